"""The model graph: the small dataflow IR between torch.export and minitc kernels.

A graph has user inputs, constants (the model's weights, as numpy arrays), nodes in
topological order and outputs. Every value is named; a node names its inputs, its operator
(one of minitc's graph ops, see BUILDERS in minitc/frontend/kernels.py, or `torch` for an ATen op run through
PyTorch, or `fused`: several nodes computed by one kernel, listed under it), plain
attributes, and the shape and dtype of what it produces:

    graph(x: float32[2, 16]) {
      const fc1_weight: float32[32, 16]
      %linear = dense(%x, %fc1_weight, %fc1_bias)                 float32[2, 32]
      %relu = relu(%linear)                                        float32[2, 32]
      return %relu
    }

Passes (minitc/frontend/passes.py) rewrite a graph into another; `print(graph)` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

# PyTorch operators whose results differ between two calls with the same arguments
NOT_PURE = ("rand", "dropout", "bernoulli", "normal", "empty")


def is_pure(node) -> bool:
    """Whether two calls of `node` with the same inputs give the same result."""
    return node.op != "torch" or not any(word in node.attrs["target"] for word in NOT_PURE)


def reads_extents(node: Node) -> bool:
    """A mask, a slice from a start counted from a dynamic size, a cat after a dynamic piece."""
    return node.op == "mask" or "start_slot" in node.attrs or "piece_slots" in node.attrs


# graph ops computed element by element (the passes fuse them; layout.py keeps them blocked)
ELEMENTWISE = ("add", "sub", "mul", "div", "relu", "gelu", "sigmoid", "tanh", "exp", "scale_shift", "clamp")


@dataclass(frozen=True)
class Value:
    name: str
    shape: tuple
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass
class Node:
    name: str  # the value it produces
    op: str
    inputs: tuple  # names of values
    attrs: dict
    shape: tuple
    dtype: str
    aten: object = None  # the ATen overload, for `torch` nodes and for messages
    body: tuple = ()  # a `fused` node's nodes, in order: one kernel computes them all

    @property
    def value(self) -> Value:
        return Value(self.name, self.shape, self.dtype)


def _attr_text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_attr_text(v) for v in value) + "]"
    return str(value)


@dataclass
class Graph:
    inputs: list = field(default_factory=list)  # Values fed by the caller, in order
    constants: dict = field(default_factory=dict)  # name -> np.ndarray
    nodes: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # value names
    symbols: dict = field(default_factory=dict)  # dynamic shapes: sympy symbol -> the size of this graph

    def copy(self) -> Graph:
        """A graph a pass can change: new node objects and lists, the same constant arrays."""
        return Graph(
            list(self.inputs),
            dict(self.constants),
            [replace(n, attrs=dict(n.attrs)) for n in self.nodes],
            list(self.outputs),
            dict(self.symbols),
        )

    def values(self) -> dict:
        """{name: Value} of every input, constant and node output."""
        out = {v.name: v for v in self.inputs}
        out.update({n: Value(n, a.shape, str(a.dtype)) for n, a in self.constants.items()})
        out.update({n.name: n.value for n in self.nodes})
        return out

    def add_constant(self, base: str, array, taken=()) -> str:
        """Add `array` (made contiguous) as a constant named `base`, or `base_2`, `base_3`, ...
        when that name is a value of the graph or in `taken`; return the name."""
        name, n = base, 1
        names = self.values()
        while name in names or name in taken:
            n += 1
            name = f"{base}_{n}"
        self.constants[name] = np.asarray(array, order="C")
        return name

    def producers(self) -> dict:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict:
        """{value name: [nodes reading it]} (a node reading a value twice is listed once)."""
        out: dict = {}
        for n in self.nodes:
            for name in dict.fromkeys(n.inputs):
                out.setdefault(name, []).append(n)
        return out

    def op_counts(self) -> dict:
        counts: dict = {}
        for n in self.nodes:
            key = f"torch:{n.attrs['target']}" if n.op == "torch" else n.op
            counts[key] = counts.get(key, 0) + 1
        return counts

    def prune(self) -> Graph:
        """Drop nodes and constants nothing reaches from the outputs."""
        live = set(self.outputs)
        for n in reversed(self.nodes):
            if n.name in live:
                live.update(n.inputs)
        nodes = [n for n in self.nodes if n.name in live]
        constants = {k: v for k, v in self.constants.items() if k in live}
        return Graph(list(self.inputs), constants, nodes, list(self.outputs), dict(self.symbols))

    def __str__(self) -> str:
        args = ", ".join(f"{v.name}: {v}" for v in self.inputs)
        lines = [f"graph({args}) {{"]
        for name, array in self.constants.items():
            lines.append(f"  const {name}: {Value(name, array.shape, str(array.dtype))}")
        for n in self.nodes:
            lines.append(_node_line(n, "  "))
            lines.extend(_node_line(b, "      ") for b in n.body)
        lines.append(f"  return {', '.join('%' + o for o in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def verify(graph: Graph) -> None:
    """GraphError unless `graph` keeps the rules the runtime relies on: every value named once
    (the plan keys buffers and kernels by name), every node reading values made before it (a
    fused node's members: its inputs or earlier members), the outputs made, a view keeping its
    element count. A pass that breaks them would run one node on another's buffers."""
    from minitc.errors import GraphError

    shapes: dict = {}  # value name -> shape, of the values made so far
    for name, shape in [(v.name, v.shape) for v in graph.inputs] + [(k, a.shape) for k, a in graph.constants.items()]:
        if name in shapes:
            raise GraphError(f"the graph names two values {name}")
        shapes[name] = tuple(shape)
    for node in graph.nodes:
        missing = [i for i in node.inputs if i not in shapes]
        if missing:
            raise GraphError(f"node {node.name} ({node.op}) reads {', '.join(missing)} before it is made")
        inside = set(node.inputs)
        for member in node.body:
            if any(i not in inside for i in member.inputs):
                raise GraphError(f"fused node {node.name}: member {member.name} reads a value the group lacks")
            inside.add(member.name)
        if node.body and (node.body[-1].shape, node.body[-1].dtype) != (node.shape, node.dtype):
            raise GraphError(f"fused node {node.name}: its last member is not its value")
        if node.op == "view" and np.prod(node.shape) != np.prod(shapes[node.inputs[0]]):
            raise GraphError(f"view {node.name} of {node.inputs[0]} changes the element count")
        if node.name in shapes:
            raise GraphError(f"the graph names two values {node.name}")
        shapes[node.name] = tuple(node.shape)
    missing = [o for o in graph.outputs if o not in shapes]
    if missing:
        raise GraphError(f"the graph's outputs {', '.join(missing)} are not made")


def _node_line(n: Node, indent: str) -> str:
    operands = ", ".join(f"%{i}" for i in n.inputs)
    # a PyTorch node's reason is for the compile report (importer.fallback_reasons), not for each line
    attrs = ", ".join(f"{k}={_attr_text(v)}" for k, v in n.attrs.items() if k != "reason")
    op = f"fused[{', '.join(b.op for b in n.body)}]" if n.body else n.op
    call = f"{indent}%{n.name} = {op}({operands}{', ' if operands and attrs else ''}{attrs})"
    return f"{call:<72} {n.value}"


def as_array(value) -> np.ndarray:
    """A constant as a contiguous numpy array. A torch tensor is copied, so that the compiled
    model keeps the weights it was compiled with (numpy() alone would share their memory). A 0-d
    value stays 0-d (np.ascontiguousarray would make it 1-d: a (1,) output where eager has ())."""
    if hasattr(value, "detach"):
        return np.array(value.detach().cpu().numpy(), order="C", copy=True)
    return np.asarray(value, order="C")


def single_use(graph: Graph, name: str, users: dict) -> bool:
    """Whether the value `name` has one reader (`users`: name -> reading nodes) and is not an
    output of the graph: a fusion may then compute it inside its reader's kernel."""
    return len(users.get(name, [])) == 1 and name not in graph.outputs
