"""`torch.compile(model, backend="minitc")`: the torch dynamo backend (registered through the
entry point group `torch_dynamo_backends` in pyproject.toml).

Dynamo hands over each graph it captured as a GraphModule and example inputs. It lifts the
model's parameters and buffers into inputs of the graph (inline_inbuilt_nn_modules), so the
backend puts them back: the placeholders whose dynamo source reads an nn.Module's
`_parameters` or `_buffers` become buffers of a wrapper module whose forward takes only the
real inputs, and the wrapper goes through the same import as `tc.compile` (torch.export,
then Core ATen), which makes them constants: batch norms fold into convolutions, linear
weights are transposed once. The weights are copied at compile time, as inductor's freezing
does; a weight that dynamo later passes changed (another tensor, or the same one changed in
place) compiles the graph again, with a warning.
"""

from __future__ import annotations

import warnings

from minitc.errors import ConfigError, MinitcError
from minitc.frontend.compiler import compile_model

_WEIGHT_DICTS = ("_parameters", "_buffers")
GROWTH = 4  # a dynamic graph compiles first for sizes up to GROWTH x the first call's, in powers of 2


def weight_name(node) -> str | None:
    """The dotted name (`layer1.0.conv1.weight`) of the parameter or buffer a dynamo
    placeholder reads (the placeholder's own name when the path to it is not plain submodules),
    or None when the placeholder is anything else (a real input, a plain tensor attribute, a
    source this torch version spells differently)."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    base = getattr(source, "base", None)
    if getattr(base, "member", None) not in _WEIGHT_DICTS or not hasattr(source, "index"):
        return None
    parts = [str(source.index)]
    source = base.base
    while source is not None:  # the submodules' names, up to the root module
        base = getattr(source, "base", None)
        if getattr(base, "member", None) == "_modules" and hasattr(source, "index"):
            parts.append(str(source.index))
            source = base.base
        elif hasattr(source, "member") or hasattr(source, "index"):  # a list, an attribute: no state-dict name
            return node.name
        else:  # a wrapper dynamo puts around a module's source
            source = base
    return ".".join(reversed(parts))


def frozen_module(graph_module, args, weights: dict, fixed: dict, measured: dict | None = None):
    """An nn.Module holding `weights` ({input index: dotted name}) of `args` as buffers, whose
    forward takes the other tensor inputs in order and calls `graph_module` with all of them
    (the values in `fixed`, {input index: value}, as given; those in `measured`, {input index:
    (position among the tensor inputs, dim)}, read off the tensor inputs' shapes)."""
    import torch

    measured = measured or {}

    class Frozen(torch.nn.Module):
        def forward(self, *inputs):
            rest = iter(inputs)  # the tensor inputs, in the order of the graph's arguments

            def argument(i):
                if i in weights:
                    return self.get_buffer(weights[i])
                if i in fixed:
                    return fixed[i]
                if i in measured:
                    position, dim = measured[i]
                    return inputs[position].shape[dim]
                return next(rest)

            return self.dynamo_graph(*(argument(i) for i in range(len(args))))

    module = Frozen()
    for i, name in weights.items():
        owner = module
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_buffer(leaf, args[i].detach())  # the import copies it (graph.as_array)
    module.dynamo_graph = graph_module
    return module


def split_inputs(graph_module, example_inputs) -> dict:
    """{input index: dotted name} of the inputs that are the model's weights."""
    import torch

    weights = {}
    placeholders = graph_module.graph.find_nodes(op="placeholder")
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        name = weight_name(node)
        if name is not None and isinstance(value, torch.Tensor):
            weights[i] = name
    if len(set(weights.values())) < len(weights) or "dynamo_graph" in {n.split(".")[0] for n in weights.values()}:
        return {}  # names that clash in the wrapper: unsure, so every input stays an input
    return weights


def stamp(tensor) -> tuple:
    """What a weight was when it was copied: its storage and its version counter (in-place
    changes bump it; inference tensors have none). A change through `.data` in place leaves
    both as they were."""
    return tensor.data_ptr(), None if tensor.is_inference() else tensor._version


class CompiledGraph:
    """One dynamo graph compiled with the model's weights as constants. Called with dynamo's
    full argument list, it passes only the tensor inputs to the compiled model and returns a
    tuple, as dynamo's graphs do. `weights` maps input positions to the weights' names;
    `compiled` is the CompiledModel last run (graph, tasks, benchmark).

    A graph dynamo made dynamic (`dynamic=True`, or after a second size) has its sizes as SymInt
    inputs. When each is a dimension of a tensor input, the graph compiles once with dynamic
    shapes (minitc/frontend/dynamic.py: one specialisation per bucket of sizes up to
    `max_size`, raised when a call needs more); otherwise once per value of the sizes."""

    def __init__(self, graph_module, example_inputs, max_size: int | None = None):
        import torch
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        self.graph_module = graph_module
        self.weights = split_inputs(graph_module, example_inputs)
        inputs = [i for i in range(len(example_inputs)) if i not in self.weights]
        placeholders = graph_module.graph.find_nodes(op="placeholder")
        # Python numbers dynamo passes as tensors (a dropout's p, an eps under dynamic=True):
        # module attributes, compiled in as they are
        self.numbers = {i: example_inputs[i] for i in inputs if _number_as_tensor(placeholders[i])}
        inputs = [i for i in inputs if i not in self.numbers]
        self.tensors = [i for i in inputs if isinstance(example_inputs[i], torch.Tensor)]
        # sizes of a graph dynamo made dynamic (SymInts): minitc compiles per value, at the call
        self.sizes = [i for i in inputs if i not in self.tensors]
        self.models: dict = {}  # {size values: CompiledModel}
        self.stamps = self._stamps(example_inputs)
        # (optimization_hint reads a SymInt's value without a guard: int() would make dynamo specialise it)
        first = max([2, *(optimization_hint(example_inputs[i]) for i in self.sizes)])
        self.max_size = max_size or _power_of_two(GROWTH * first)
        # what the sizes are, read once: {SymInt input: (tensor position, dim)}, [{dim: symbol}]
        self.measured, self.symbols = self._read_sizes() if self.sizes else ({}, [])
        self.dynamic = bool(self.measured)
        self.compiled = None  # a dynamic graph compiles at its first call: torch.export must not run inside dynamo
        if not self.sizes:
            self.compiled = self._compile(example_inputs)

    def _stamps(self, args) -> dict:
        """{input index: (the weight tensor, its stamp)}, to see later whether it changed."""
        return {i: (args[i], stamp(args[i])) for i in self.weights}

    def _read_sizes(self) -> tuple:
        """({SymInt input index: (position among the tensor inputs, dim)}, per tensor input
        {dim: its sympy symbol}), or ({}, []) when a tensor's size is an expression of others.
        The SymInts that are no tensor's dimension (`logits_to_keep`) are compiled in, per value."""
        placeholders = self.graph_module.graph.find_nodes(op="placeholder")
        symbols = {_symbol(placeholders[i].meta.get("example_value")): i for i in self.sizes}
        symbols.pop(None, None)
        measured, per_tensor = {}, []
        for k, i in enumerate(self.tensors):
            spec = {}
            for d, size in enumerate(getattr(placeholders[i].meta.get("example_value"), "shape", ())):
                expr = _symbol(size)
                if expr is None and not _static(size):
                    return {}, []  # a size that is an expression of others
                if expr is not None:
                    spec[d] = expr
                    if expr in symbols:
                        measured.setdefault(symbols[expr], (k, d))
            per_tensor.append(spec)
        return measured, per_tensor

    def _dynamic_shapes(self) -> tuple:
        """torch.export's dynamic_shapes for the wrapper's tensor inputs: one Dim per symbol, up
        to the current max_size."""
        from torch.export import Dim

        dims: dict = {}
        shapes = []
        for spec in self.symbols:
            named = {d: dims.setdefault(e, Dim(f"size{len(dims)}", min=2, max=self.max_size)) for d, e in spec.items()}
            shapes.append(named or None)
        return (tuple(shapes),)

    def _compile(self, args):
        tensors = tuple(args[i] for i in self.tensors)
        target = "cuda" if any(t.device.type == "cuda" for t in tensors) else "llvm"  # CUDA inputs: the GPU path
        if self.dynamic:
            fixed = {i: int(args[i]) for i in self.sizes if i not in self.measured}
            model = frozen_module(self.graph_module, args, self.weights, {**fixed, **self.numbers}, self.measured)
            try:
                self.models[tuple(fixed.values())] = compiled = compile_model(
                    model, tensors, target=target, dynamic_shapes=self._dynamic_shapes()
                )
                return compiled
            except MinitcError as e:
                warnings.warn(f"minitc: {e}; compiling this graph once per size instead", stacklevel=3)
                self.dynamic = False
                self.models.clear()
        fixed = {i: args[i] for i in self.sizes}
        model = frozen_module(self.graph_module, args, self.weights, {**fixed, **self.numbers})
        self.models[tuple(fixed.values())] = compiled = compile_model(model, tensors, target=target)
        return compiled

    def __call__(self, *args):
        if any(args[i] is not t or stamp(args[i]) != s for i, (t, s) in self.stamps.items()):
            warnings.warn("minitc: the model's weights changed since compiling: compiling again", stacklevel=2)
            self.stamps = self._stamps(args)
            self.models.clear()
            if self.dynamic:
                self.compiled = self._compile(args)
        tensors = [args[i] for i in self.tensors]
        if self.dynamic:
            longest = max(args[i] for i in self.measured)
            if longest > self.max_size:  # a longer sequence: a longer range
                self.max_size = _power_of_two(GROWTH * longest)
                self.models.clear()
            key = tuple(args[i] for i in self.sizes if i not in self.measured)
            self.compiled = self.models.get(key) or self._compile(args)
        if not self.dynamic:
            key = tuple(args[i] for i in self.sizes)
            self.compiled = self.models.get(key) or self._compile(args)
        out = self.compiled(*tensors)
        return out if isinstance(out, tuple) else (out,)


def _number_as_tensor(placeholder) -> bool:
    return bool(getattr(placeholder.meta.get("grapharg"), "pass_arg_as_tensor", False))


def _power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _static(size) -> bool:
    expr = getattr(getattr(size, "node", None), "expr", None)
    return isinstance(size, int) or (expr is not None and expr.is_number)


def _symbol(size):
    """The sympy symbol a SymInt is, or None (an int, or an expression of symbols)."""
    expr = getattr(getattr(size, "node", None), "expr", None)
    return expr if expr is not None and expr.is_Symbol else None


def backend(graph_module, example_inputs, options: dict | None = None) -> CompiledGraph:
    """The dynamo backend: compile one captured graph. `options` (torch.compile's): `max_size`,
    the largest dynamic size compiled for at first (default: GROWTH times the first call's,
    rounded up to a power of 2; a call past it compiles for a range GROWTH times its size)."""
    options = dict(options or {})
    max_size = options.pop("max_size", None)
    if options:
        raise ConfigError(f"minitc's backend takes the option max_size only, got {', '.join(options)}")
    return CompiledGraph(graph_module, list(example_inputs), None if max_size is None else int(max_size))
