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

from minitc.frontend.compiler import compile_model

_WEIGHT_DICTS = ("_parameters", "_buffers")


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


def frozen_module(graph_module, args, weights: dict, fixed: dict):
    """An nn.Module holding `weights` ({input index: dotted name}) of `args` as buffers, whose
    forward takes the other tensor inputs in order and calls `graph_module` with all of them
    (the values in `fixed`, {input index: value}, as given)."""
    import torch

    class Frozen(torch.nn.Module):
        def forward(self, *inputs):
            rest = iter(inputs)
            full = [
                self.get_buffer(weights[i]) if i in weights else fixed[i] if i in fixed else next(rest)
                for i in range(len(args))
            ]
            return self.dynamo_graph(*full)

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
    `compiled` is the CompiledModel last run (graph, tasks, benchmark)."""

    def __init__(self, graph_module, example_inputs):
        import torch

        self.graph_module = graph_module
        self.weights = split_inputs(graph_module, example_inputs)
        inputs = [i for i in range(len(example_inputs)) if i not in self.weights]
        self.tensors = [i for i in inputs if isinstance(example_inputs[i], torch.Tensor)]
        # sizes of a graph dynamo made dynamic (SymInts): minitc compiles per value, at the call
        self.sizes = [i for i in inputs if i not in self.tensors]
        self.models: dict = {}  # {size values: CompiledModel}
        self.stamps = self._stamps(example_inputs)
        if not self.sizes:
            self.compiled = self._compile(example_inputs)

    def _stamps(self, args) -> dict:
        """{input index: (the weight tensor, its stamp)}, to see later whether it changed."""
        return {i: (args[i], stamp(args[i])) for i in self.weights}

    def _compile(self, args):
        fixed = {i: args[i] for i in self.sizes}
        model = frozen_module(self.graph_module, args, self.weights, fixed)
        tensors = tuple(args[i] for i in self.tensors)
        target = "cuda" if any(t.device.type == "cuda" for t in tensors) else "llvm"  # CUDA inputs: the GPU path
        self.models[tuple(fixed.values())] = compiled = compile_model(model, tensors, target=target)
        return compiled

    def __call__(self, *args):
        if any(args[i] is not t or stamp(args[i]) != s for i, (t, s) in self.stamps.items()):
            warnings.warn("minitc: the model's weights changed since compiling: compiling again", stacklevel=2)
            self.stamps = self._stamps(args)
            self.models.clear()
        key = tuple(args[i] for i in self.sizes)
        self.compiled = self.models.get(key) or self._compile(args)
        out = self.compiled(*(args[i] for i in self.tensors))
        return out if isinstance(out, tuple) else (out,)


def backend(graph_module, example_inputs) -> CompiledGraph:
    """The dynamo backend: compile one captured graph."""
    return CompiledGraph(graph_module, list(example_inputs))
