"""Dynamic shapes: one compiled model for a range of input sizes, in torch.export's convention.

    seq = torch.export.Dim("seq", min=16, max=512)
    compiled = tc.compile(model, (ids,), dynamic_shapes={"input_ids": {1: seq}})
    compiled(ids[:, :37]); compiled(ids[:, :301])

torch.export traces the model once with symbolic sizes. The range of each dynamic dimension
is cut into at most BUCKETS buckets whose upper ends halve from the maximum (64, 128, 256,
512 for 16..512). A call runs the graph of its bucket, compiled on first use at the bucket's
largest size, on buffers of that size (minitc/frontend/dynamic_runtime.py):

- the inputs are copied into padded buffers; the outputs are the valid part of padded results;
- every kernel reads the run-time extents (one more int64 input) and skips the tiles that lie
  past them (minitc/lowering/limits.py), so a call costs what a static compile of its size does;
- what reduces over a dynamic dimension (a softmax, a matmul's contraction) reads masked inputs,
  -inf or 0 past the extent (`mask` nodes, added before fusion): padding never reaches a valid
  element;
- nodes that run through PyTorch get the valid part of their inputs and compute exactly what
  eager does.

Which dimensions of each graph value are dynamic: those that change when the graph is imported
at a second size (`dynamic_dims`). A dimension that is exactly one dynamic size can be skipped
and sliced; one that mixes sizes (`12 * seq`) is computed whole, and an operator that would
reduce over it, or run through PyTorch on it, is refused with a clear error.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from minitc.errors import ShapeError
from minitc.frontend.graph import Graph, Node, reads_extents

BUCKETS = 4
EXTENTS = "dyn_extents"  # the graph constant holding each call's extents, one per dynamic size
MIXED = -1  # a dimension that depends on the dynamic sizes but is not one of them
NEG_INF = float("-inf")


class DynamicShapes:
    """The dynamic sizes of a model: their symbols, ranges and buckets, and which input
    dimension gives each one at a call (`program`: the export they come from, None once loaded)."""

    def __init__(self, symbols: list, ranges: dict, input_dims: list, offsets=(), program=None):
        self.symbols = symbols  # sympy symbols: slots 0, 1, ...
        self.ranges = ranges  # symbol -> (min, max)
        self.input_dims = input_dims  # (input index, dim, slot)
        # the sizes `symbol + constant` the program also has (a key/value cache and one more
        # token: past + 1), the next slots; like the symbols, a valid prefix of their padding
        self.offsets = list(offsets)
        self.slots = list(symbols) + self.offsets
        self.program = program

    @classmethod
    def of_program(cls, program) -> DynamicShapes:
        symbols, ranges, input_dims = [], {}, []
        kinds = {s.arg.name: s.kind.name for s in program.graph_signature.input_specs}
        user = [
            n for n in program.graph_module.graph.nodes if n.op == "placeholder" and kinds.get(n.name) == "USER_INPUT"
        ]
        for k, fx_node in enumerate(user):
            for d, size in enumerate(fx_node.meta["val"].shape):
                expr = getattr(getattr(size, "node", None), "expr", None)
                if expr is None:
                    continue
                if not expr.is_Symbol:
                    raise ShapeError(
                        f"input {fx_node.name} has dimension {d} of size {expr}: a dynamic input dimension must be "
                        "one torch.export.Dim, not an expression of several"
                    )
                if expr not in symbols:
                    symbols.append(expr)
                    bound = program.range_constraints[expr]
                    ranges[expr] = (int(bound.lower), _finite(bound.upper, fx_node.name, d))
                input_dims.append((k, d, symbols.index(expr)))
        if not symbols:
            raise ShapeError("dynamic_shapes marks no input dimension as dynamic")
        return cls(symbols, ranges, input_dims, _offset_sizes(program.graph_module.graph.nodes, symbols), program)

    def to_json(self) -> dict:
        return {
            "symbols": [str(s) for s in self.symbols],
            "ranges": [list(self.ranges[s]) for s in self.symbols],
            "input_dims": [list(t) for t in self.input_dims],
            "offsets": [str(e) for e in self.offsets],
        }

    @classmethod
    def from_json(cls, doc: dict) -> DynamicShapes:
        import sympy

        symbols = [sympy.Symbol(name, integer=True, positive=True) for name in doc["symbols"]]
        ranges = {s: (int(lo), int(hi)) for s, (lo, hi) in zip(symbols, doc["ranges"])}
        names = {str(s): s for s in symbols}
        offsets = [sympy.sympify(e, locals=names) for e in doc.get("offsets", ())]
        return cls(symbols, ranges, [tuple(t) for t in doc["input_dims"]], offsets)

    def slot_values(self, sizes: tuple) -> tuple:
        """The value of every slot when the symbols have `sizes`."""
        env = self.env(sizes)
        return tuple(int(e.xreplace(env)) for e in self.slots)

    def bucket_sizes(self, slot: int) -> list:
        """The upper ends of the buckets of dynamic size `slot`, ascending."""
        lo, hi = self.ranges[self.symbols[slot]]
        sizes = [hi]
        while len(sizes) < BUCKETS and sizes[-1] // 2 >= max(lo, 1):
            sizes.append(sizes[-1] // 2)
        return sorted(sizes)

    def extents(self, shapes: list) -> tuple:
        """The value of every slot in a call on inputs of `shapes`; each symbol checked against
        its range and against the other inputs that carry it."""
        found: dict = {}
        for k, d, slot in self.input_dims:
            n = shapes[k][d]
            name = self.symbols[slot]
            if found.setdefault(slot, n) != n:
                raise ShapeError(f"dynamic size {name} is {found[slot]} in one input and {n} in input {k}")
            lo, hi = self.ranges[name]
            if not lo <= n <= hi:
                raise ShapeError(
                    f"input {k} has size {n} in dimension {d}, outside the range {lo}..{hi} the model was compiled "
                    f"for (dynamic size {name}); compile it with a Dim whose range holds {n}"
                )
        return self.slot_values(tuple(found[s] for s in range(len(self.symbols))))

    def bucket(self, extents: tuple) -> tuple:
        """The bucket (its largest size per dynamic size) a call of these extents runs in (the
        symbols' values come first among the extents)."""
        return tuple(
            next(b for b in self.bucket_sizes(s) if b >= n) for s, n in enumerate(extents[: len(self.symbols)])
        )

    def env(self, sizes: tuple) -> dict:
        return dict(zip(self.symbols, sizes))


def _offset_sizes(nodes, symbols: list) -> list:
    """The sizes `symbol + constant` (constant != 0) among the program's values' dimensions."""
    found = []
    for node in nodes:
        for size in getattr(node.meta.get("val"), "shape", ()):
            expr = getattr(getattr(size, "node", None), "expr", None)
            if expr is None or expr.is_Symbol or expr in found or not expr.is_Add or len(expr.free_symbols) != 1:
                continue
            (symbol,) = expr.free_symbols
            rest = expr - symbol
            if symbol in symbols and rest.is_Integer:
                found.append(expr)
    return sorted(found, key=str)


def _finite(upper, name: str, dim: int) -> int:
    try:
        return int(upper)
    except (TypeError, OverflowError, AttributeError):  # sympy: int(oo)
        raise ShapeError(
            f"input {name}'s dynamic dimension {dim} has no upper bound: give its Dim a max "
            "(torch.export.Dim('seq', max=512)); buffers are sized by it"
        ) from None


def dynamic_dims(graph: Graph, probe: Graph, sizes: tuple, probe_sizes: tuple) -> dict:
    """{value name: {dim: slot or MIXED}} for the values of `graph` (imported where the slots
    have the values `sizes`) whose dimensions differ in `probe` (the same program imported where
    they have `probe_sizes`)."""
    other, mine = _shapes(probe), _shapes(graph)
    out = {}
    for name, shape in mine.items():
        theirs = other.get(name)
        if theirs is None or len(theirs) != len(shape):
            raise ShapeError(f"the graph of value {name} changes with the dynamic sizes; it cannot be compiled once")
        dims = {}
        for d, (a, b) in enumerate(zip(shape, theirs)):
            if a != b:
                slots = [s for s, (x, y) in enumerate(zip(sizes, probe_sizes)) if (a, b) == (x, y)]
                dims[d] = slots[0] if len(slots) == 1 else MIXED
        if dims:
            out[name] = dims
    return out


def _shapes(graph: Graph) -> dict:
    """{name: shape} of every value of `graph`: constants (folded from the sizes: position ids), inputs, nodes."""
    return {name: v.shape for name, v in graph.values().items()}


def probe_sizes(sizes: tuple) -> tuple:
    """Other sizes to import the graph at, one apart from each bucket size and from each other."""
    return tuple(n - 1 - s if n - 1 - s >= 1 else n + 1 + s for s, n in enumerate(sizes))


# -- masks: what reduces over a dynamic dimension reads -inf or 0 past the extent --------------
def _mixed_dims(node: Node, shapes: dict) -> list:
    """[(input position, dim, fill)] of the input dimensions `node` reduces over or moves
    elements along, or None when it does neither: `fill` is the identity the padding must read
    as, None where no mask makes the result exact (a mean divides by the padded size)."""
    op, a = node.op, node.attrs
    if op == "softmax":
        return [(0, len(shapes[node.inputs[0]]) - 1, NEG_INF)]
    if op == "matmul":
        ta, tb = a.get("transpose_a", False), a.get("transpose_b", False)
        return [(0, 0 if ta else 1, 0.0), (1, 1 if tb else 0, 0.0)]
    if op == "batch_matmul":
        ta, tb = a.get("transpose_a", False), a.get("transpose_b", False)
        return [(0, 1 if ta else 2, 0.0), (1, 2 if tb else 1, 0.0)]
    if op in ("sum", "max"):
        return [(0, d, 0.0 if op == "sum" else NEG_INF) for d in a["axis"]]
    if op in ("dense", "layer_norm"):
        return [(0, len(shapes[node.inputs[0]]) - 1, None)]
    if op == "mean":
        return [(0, d, None) for d in a["axis"]]
    if op == "pad":
        return [(0, d, None) for d in range(len(shapes[node.inputs[0]]))]
    if "conv" in op or "pool" in op:
        return [(0, d, None) for d in range(2, len(shapes[node.inputs[0]]))]
    return None


def mask_reductions(graph: Graph, dims: dict) -> Graph:
    """`graph` with a `mask` node before every input dimension an operator reduces over that is
    dynamic: the padding past the extent reads as the reduction's identity (-inf, 0). A
    matmul's operand that a softmax over the same dimension produces is not masked: its input is
    masked to -inf, so the softmax writes 0 (or finite values) along the whole dimension, which
    the other operand's zeros then cancel (the softmax is marked to compute that dimension
    whole). An operator that reduces over a dynamic dimension in a way a mask cannot fix (a
    mean, a layer norm, a convolution window) raises ShapeError."""
    values = graph.values()
    shapes = {name: v.shape for name, v in values.items()}
    out = graph.copy()
    producers = {n.name: n for n in out.nodes}
    nodes = []
    for node in out.nodes:
        mixed = _mixed_dims(node, shapes) if node.op != "torch" else None
        inputs = list(node.inputs)
        if node.op == "cat":
            _cat_pieces(node, dims)
        for k, d, fill in mixed or ():
            slot = dims.get(inputs[k], {}).get(d)
            if slot is None:
                continue
            if fill is None or slot == MIXED:
                raise ShapeError(
                    f"{node.op} node {node.name} reduces over or moves along dimension {d} of {inputs[k]}, whose size "
                    "is dynamic; minitc cannot compile it with dynamic shapes (mark that dimension static)"
                )
            softmax = _softmax_along(inputs[k], d, shapes, producers) if fill == 0.0 else None
            if softmax is not None:
                softmax.attrs["whole"] = (len(softmax.shape) - 1,)
                continue
            name = f"{inputs[k]}_masked{d}"
            if name not in shapes:
                attrs = {"axis": d, "fill": fill, "slot": slot}
                nodes.append(Node(name, "mask", (inputs[k],), attrs, shapes[inputs[k]], values[inputs[k]].dtype))
                shapes[name] = shapes[inputs[k]]
                dims[name] = dict(dims[inputs[k]])
            inputs[k] = name
        node.inputs = tuple(inputs)
        nodes.append(node)
    out.nodes = nodes
    return out


def _cat_pieces(node: Node, dims: dict) -> None:
    """A cat along a dynamic dimension (the key/value cache and the new token's key) places
    each piece after the valid part of the one before: `piece_slots` names the pieces whose
    size along the axis is a slot, read at run time."""
    axis = node.attrs["axis"]
    slots = tuple(dims.get(i, {}).get(axis) for i in node.inputs)
    if MIXED in slots:
        raise ShapeError(
            f"cat node {node.name} joins pieces along dimension {axis} whose size mixes dynamic sizes; minitc "
            "cannot compile it with dynamic shapes"
        )
    if any(s is not None for s in slots[:-1]):  # (the last piece's size moves no other piece)
        node.attrs["piece_slots"] = slots


def _softmax_along(name: str, dim: int, shapes: dict, producers: dict):
    """The softmax node that produces `name` (through views) along `dim`, its last axis, or None."""
    if dim != len(shapes[name]) - 1:
        return None
    node = producers.get(name)
    while node is not None and node.op == "view" and shapes[node.inputs[0]][-1] == shapes[name][-1]:
        name = node.inputs[0]
        node = producers.get(name)
    return node if node is not None and node.op == "softmax" else None


# -- after the passes: what each kernel skips, and what PyTorch nodes may see -----------------------
def attach_extents(graph: Graph, dims: dict, slots: int) -> Graph:
    """`graph` with the extents constant, read by every mask (alone or a fused member) and by
    every kernel whose output has dimensions that are exactly one dynamic size (`limits`: the
    tiles past the extent are skipped), save those a member must compute whole. PyTorch nodes
    must see only such dimensions: they are sliced."""
    out = graph.copy()
    out.constants[EXTENTS] = np.zeros(slots, np.int64)
    nodes = []
    for node in out.nodes:
        if node.op == "torch":
            _check_sliceable(node, dims)
        elif node.op != "view":
            members = node.body or (node,)
            masks = any(reads_extents(m) for m in members)
            if node.body and masks:
                node.body = tuple(replace(m, inputs=m.inputs + (EXTENTS,)) if reads_extents(m) else m for m in members)
            whole = {d for m in members for d in m.attrs.get("whole", ())}
            limits = {d: s for d, s in dims.get(node.name, {}).items() if s != MIXED and d not in whole}
            if node.op == "mask":
                limits.pop(node.attrs["axis"], None)
            if masks:
                node.inputs += (EXTENTS,)
            if limits:  # the kernel's extents argument holds exactly the slots up to the last it reads
                node.inputs += (_first_extents(out, 1 + max(limits.values())),)
                node.attrs["limits"] = limits
        nodes.append(node)
    out.nodes = nodes
    return out


def _first_extents(graph: Graph, count: int) -> str:
    """The name of the constant holding the first `count` extents: EXTENTS, or a view of it."""
    name = EXTENTS if count == len(graph.constants[EXTENTS]) else f"{EXTENTS}_{count}"
    graph.constants.setdefault(name, graph.constants[EXTENTS][:count])
    return name


def share_constants(graph: Graph, others: list) -> None:
    """Give `graph` the arrays of the graphs of `others` (other buckets) wherever a constant of
    the same name holds the same values: a bucket's weights are packed again by its passes, and
    one copy in memory (and in a saved file) serves every bucket. The extents stay each plan's."""
    own = set(extents_names(graph))
    for name, array in graph.constants.items():
        if name in own:
            continue
        for other in others:
            same = other.constants.get(name)
            if same is not None and same.shape == array.shape and same.dtype == array.dtype:
                if np.array_equal(same, array):
                    graph.constants[name] = same
                    break


def extents_names(graph: Graph) -> list:
    """The names of the graph's extents constants: EXTENTS and its prefixes."""
    return [name for name in graph.constants if name == EXTENTS or name.startswith(EXTENTS + "_")]


def extents_arrays(graph: Graph) -> list:
    """The graph's extents constants: EXTENTS and its prefixes (a loaded model holds them as
    arrays of their own)."""
    return [graph.constants[name] for name in extents_names(graph)]


def set_extents(arrays: list, values: tuple) -> None:
    """Write a call's extents into `arrays` (extents_arrays of a graph)."""
    for array in arrays:
        array[:] = values[: len(array)]


def _check_sliceable(node: Node, dims: dict) -> None:
    for name in (*node.inputs, node.name):
        if MIXED in dims.get(name, {}).values():
            raise ShapeError(
                f"the PyTorch node {node.name} ({node.attrs.get('target')}) handles {name}, a value with a dimension "
                "that mixes dynamic sizes; minitc cannot run it with dynamic shapes"
            )


def bucket_graph(shapes: DynamicShapes, sizes: tuple, target: str, layout: str) -> tuple:
    """(graph, dims) of the exported program at the dynamic `sizes`, after the passes, with
    masks before the reductions over dynamic dimensions and the extents attached."""
    from minitc.frontend import passes
    from minitc.frontend.importer import Importer

    probe = probe_sizes(sizes)
    # the probe only tells the sizes apart: its nodes are not built again, and what runs through
    # PyTorch at the bucket's size does there too, so that the two graphs have the same nodes
    first = Importer(shapes.program, shapes.env(sizes))
    imported = [first.run()]
    imported.append(Importer(shapes.program, shapes.env(probe), check=False, fallbacks=first.fell_back).run())
    slots = shapes.slot_values(sizes), shapes.slot_values(probe)
    _same_arguments(*imported, *slots)
    dims = dynamic_dims(imported[0], imported[1], *slots)
    final = [passes.run_all(mask_reductions(g, dict(dims)), target, layout) for g in imported]
    dims = dynamic_dims(final[0], final[1], *slots)
    return attach_extents(final[0], dims, len(shapes.slots)), dims


def _same_arguments(graph: Graph, probe: Graph, slots: tuple, probe_slots: tuple) -> None:
    """An operator whose arguments change with the dynamic sizes (other than shapes) would
    compute the wrong elements: a slice's start counted from the end (`x[:, -1:]`, the last
    token) becomes `extents[slot] + k`, read at run time, in both graphs; anything else raises."""
    theirs = {n.name: n for n in probe.nodes}
    for node in graph.nodes:
        other = theirs.get(node.name)
        if other is None or other.op != node.op:
            raise ShapeError(f"the graph at node {node.name} changes with the dynamic sizes; it cannot compile once")
        changed = [
            k for k, v in node.attrs.items() if k not in ("shape", "reason") and repr(other.attrs.get(k)) != repr(v)
        ]
        if node.op == "slice" and changed == ["start"]:
            a, b = node.attrs["start"], other.attrs["start"]
            found = [s for s, (x, y) in enumerate(zip(slots, probe_slots)) if a - x == b - y]
            if found:
                for n in (node, other):
                    n.attrs.update(start=a - slots[found[0]], start_slot=found[0])
                continue
        if changed:
            raise ShapeError(
                f"{node.op} node {node.name}: its {', '.join(changed)} depend on the dynamic sizes; minitc cannot "
                "compile it with dynamic shapes"
            )
