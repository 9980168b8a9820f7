"""From a PyTorch model to a minitc graph, through torch.export.

    graph = import_model(model, (x,))

The model is exported (non-strict, static shapes) and lowered to Core ATen with a
decomposition table that keeps the operators minitc has a better kernel for whole (`linear`,
`layer_norm`, ...). Each ATen call becomes a graph node through the converters of
minitc/frontend/aten.py; parameters and buffers become constants. An ATen operator without a
converter (or a call a converter cannot take, such as a grouped convolution) becomes a `torch`
node that runs through PyTorch at run time; `unsupported(graph)` lists them all at once.
"""

from __future__ import annotations

import operator
import warnings

from minitc.errors import GraphError, MinitcError
from minitc.frontend.aten import CONVERTERS, KEEP_WHOLE, Unconvertible
from minitc.frontend.fallback import INTERNAL, Fallback, error_text
from minitc.frontend.graph import Graph, Node, Value, as_array


class ImportError_(MinitcError):  # noqa: N801 - ImportError is Python's own
    """The model could not be exported or imported."""


class Ref(str):
    """An argument of a `torch` node that names a graph value (the rest are kept as given)."""


class SymArg:
    """An integer argument of a `torch` node that depends on a dynamic dimension (`s0 * 12`),
    evaluated at each call with the extents of that call (minitc/frontend/dynamic.py)."""

    def __init__(self, expr):
        self.expr = expr

    def value(self, symbols: dict) -> int:
        return int(self.expr.xreplace(symbols)) if hasattr(self.expr, "xreplace") else int(self.expr)

    def __repr__(self):
        return f"SymArg({self.expr})"


def torch_dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _value_meta(fx_node, symbols: dict):
    """(shape, dtype) of an exported node's value, with the dynamic dimensions' `symbols`
    (sympy symbol: size) put in, and -1 for a size known only when the model runs (a `torch`
    node's: nothing plans its memory); ((), 'object') for tuples and other values."""
    val = fx_node.meta.get("val")
    if hasattr(val, "shape") and hasattr(val, "dtype"):
        return tuple(-1 if _at_run_time(d, symbols) else sym_int(d, symbols) for d in val.shape), torch_dtype_name(
            val.dtype
        )
    return (), "object"


def _at_run_time(d, symbols: dict) -> bool:
    """Whether the size or number `d` depends on values the model computes (torch.export's
    unbacked symbols: a mixture of experts' rows per expert), not only on the input sizes."""
    expr = getattr(getattr(d, "node", None), "expr", None)
    return expr is not None and any(s not in symbols for s in getattr(expr, "free_symbols", ()))


def _sized_at_run_time(fx_node, symbols: dict) -> bool:
    """Whether the call makes or reads a value whose size (or which number) is known only when
    the model runs: PyTorch runs it, since minitc's kernels and their memory are planned before."""
    import torch.fx

    def run_time(val) -> bool:
        if hasattr(val, "shape") and hasattr(val, "dtype"):
            return any(_at_run_time(d, symbols) for d in val.shape)
        if isinstance(val, (list, tuple)):
            return any(run_time(v) for v in val)
        return _at_run_time(val, symbols)

    def reads(arg) -> bool:
        if isinstance(arg, torch.fx.Node):
            return run_time(arg.meta.get("val"))
        return isinstance(arg, (list, tuple)) and any(reads(a) for a in arg)

    return run_time(fx_node.meta.get("val")) or any(reads(a) for a in (*fx_node.args, *fx_node.kwargs.values()))


def sym_int(d, symbols: dict) -> int:
    """An int of `d`, a size that may be a torch.SymInt of the dynamic dimensions."""
    node = getattr(d, "node", None)
    if node is not None and hasattr(node, "expr"):
        return int(node.expr.xreplace(symbols))
    return int(d)


def _touches_a_scalar(fx_node) -> bool:
    """Whether the call makes or reads a 0-d tensor (`x.sum()`, `x[0, 0]`): minitc's tensors
    have at least one axis, so PyTorch runs it."""
    import torch.fx

    def zero_dim(node):
        val = node.meta.get("val")
        return hasattr(val, "shape") and hasattr(val, "dtype") and len(val.shape) == 0

    args = [a for a in (*fx_node.args, *fx_node.kwargs.values()) if isinstance(a, torch.fx.Node)]
    return zero_dim(fx_node) or any(zero_dim(a) for a in args)


def export(model, example_inputs, dynamic_shapes=None):
    """torch.export of `model` in Core ATen, keeping KEEP_WHOLE operators whole; `dynamic_shapes`
    as torch.export takes it (minitc/frontend/dynamic.py)."""
    import torch

    model = model.eval()
    try:
        with warnings.catch_warnings():  # torch's own deprecations inside export: nothing a user can act on
            warnings.simplefilter("ignore", FutureWarning)
            program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes, strict=False)
            table = torch.export.default_decompositions()
            for op in KEEP_WHOLE:
                table.pop(getattr_path(torch.ops, op), None)
            return program.run_decompositions(table)
    except Exception as e:  # torch raises many kinds; one clear error naming the model
        raise ImportError_(f"torch.export could not export {type(model).__name__}: {type(e).__name__}: {e}") from e


def getattr_path(root, dotted: str):
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


class Importer:
    """Walks an ExportedProgram's graph once, emitting nodes (converters call `emit`)."""

    def __init__(self, program, symbols: dict | None = None, check: bool = True, fallbacks=(), strict: bool = False):
        self.program = program
        self.strict = strict  # else a call that minitc fails on (a bug) runs through PyTorch (fallback.py)
        self.internal: list = []  # fallback.Fallback of each internal error compiled around
        self.check = check  # build each converted node's tensor expression (False: dynamic.py's probe)
        self.fallbacks = set(fallbacks)  # fx nodes to run through PyTorch whatever (the probe: as at the other size)
        self.fell_back: list = []  # the fx nodes that run through PyTorch, by name
        self.symbols = dict(symbols or {})  # dynamic shapes: sympy symbol -> the size compiled for
        self.graph = Graph(symbols=dict(symbols or {}))
        self.names: dict = {}  # fx node -> value name (a tuple of names for a converted tuple)
        self.values: dict = {}  # value name -> Value
        self.used: set = set()

    # --- helpers for converters -------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def emit(self, op: str, inputs, attrs: dict, shape, dtype: str, base: str | None = None, aten=None) -> str:
        node = Node(self.fresh(base or op), op, tuple(inputs), dict(attrs), tuple(shape), dtype, aten)
        self.graph.nodes.append(node)
        self.values[node.name] = node.value
        return node.name

    def constant(self, array, base: str) -> str:
        name = self.fresh(base)
        array = self.graph.constants[name] = as_array(array)
        self.values[name] = Value(name, array.shape, str(array.dtype))
        return name

    def meta_shape(self, fx_node) -> tuple:
        """The shape of an exported node's value, at the sizes compiled for."""
        return _value_meta(fx_node, self.symbols)[0]

    def shape(self, name: str) -> tuple:
        return self.values[name].shape

    def dtype(self, name: str) -> str:
        return self.values[name].dtype

    def constant_array(self, name: str):
        """The array of a constant value, or None when `name` is computed."""
        return self.graph.constants.get(name)

    def view(self, x: str, shape) -> str:
        shape = tuple(shape)
        if shape == self.shape(x):
            return x
        return self.emit("view", [x], {"shape": shape}, shape, self.dtype(x), base=f"{x}_view")

    # --- the walk ---------------------------------------------------------------------------
    def run(self) -> Graph:
        import torch.fx

        program = self.program
        signature = program.graph_signature
        changed = [spec.target for spec in signature.output_specs if spec.kind.name.endswith("_MUTATION")]
        if changed:  # the compiled program returns values; it cannot write them back
            raise ImportError_(
                f"the model changes {', '.join(map(str, changed))} in place when it runs, which minitc cannot "
                "compile (a batch norm in training mode? call model.eval())"
            )
        kinds = {spec.arg.name: spec for spec in signature.input_specs}
        for fx_node in program.graph_module.graph.nodes:
            if fx_node.op == "placeholder":
                self._placeholder(fx_node, kinds[fx_node.name])
            elif fx_node.op == "call_function":
                self._guarded_call(fx_node)
            elif fx_node.op == "output":
                outs = fx_node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                # a Python number among the outputs (MaskFormer's Swin returns a window size) is
                # no tensor: a compiled model returns the tensors, as the whole-model fallback does
                self.graph.outputs = [self._operand(o) for o in outs if isinstance(o, torch.fx.Node)]
        return self.graph.prune()

    def _placeholder(self, fx_node, spec) -> None:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            shape, dtype = _value_meta(fx_node, self.symbols)
            name = self.fresh(fx_node.name)
            self.graph.inputs.append(Value(name, shape, dtype))
            self.values[name] = Value(name, shape, dtype)
        else:  # PARAMETER, BUFFER, CONSTANT_TENSOR: weights are constants of the graph
            source = self.program.state_dict if spec.target in self.program.state_dict else self.program.constants
            name = self.constant(source[spec.target], spec.target)  # its name in the state dict
        self.names[fx_node] = name

    def _operand(self, arg) -> str:
        name = self.names.get(arg)
        if not isinstance(name, str):
            raise GraphError(f"{arg} is not a single tensor value: a graph output must be one")
        return name

    def _guarded_call(self, fx_node) -> None:
        """_call, and where minitc fails inside it (not a converter's refusal: a bug), the call
        through PyTorch, noted in `internal`; raised when strict."""
        start = len(self.graph.nodes)
        try:
            self._call(fx_node)
        except Exception as e:
            if self.strict:
                raise
            for node in self.graph.nodes[start:]:
                self.values.pop(node.name, None)
            del self.graph.nodes[start:]
            self._internal(fx_node, e)
            self.names[fx_node] = self._fallback(fx_node, str(fx_node.target), INTERNAL + error_text(e))
            self.fell_back.append(fx_node.name)

    def _internal(self, fx_node, e: Exception) -> None:
        self.internal.append(Fallback("import", f"{fx_node.name} ({fx_node.target})", error_text(e)))

    def _call(self, fx_node) -> None:
        target = fx_node.target
        node = getattr(fx_node.meta.get("val"), "node", None)
        if node is not None and hasattr(node, "expr") and not _at_run_time(fx_node.meta["val"], self.symbols):
            self.names[fx_node] = SymArg(node.expr)  # an integer of the dynamic sizes (`sym_size`)
            return
        if target is operator.getitem:
            source, index = fx_node.args
            parts = self.names[source]
            if isinstance(parts, tuple):  # an item of a converted operator
                self.names[fx_node] = parts[index]
            else:  # an item of a `torch` node's tuple, taken at run time
                name = self.emit(
                    "torch",
                    [parts],
                    {"target": "getitem", "reason": "an item of a PyTorch result"},
                    *_value_meta(fx_node, self.symbols),
                    base=fx_node.name,
                )
                self.graph.nodes[-1].aten = (operator.getitem, (Ref(parts), index), {})
                self.names[fx_node] = name
            return
        key = str(target)
        converter = CONVERTERS.get(key)
        if fx_node.name in self.fallbacks:
            reason = "it runs through PyTorch at the other size"
        elif _sized_at_run_time(fx_node, self.symbols):
            reason = "a size it makes or reads is known only when the model runs"
        elif converter is None:
            reason = "no converter for this operator"
        elif _touches_a_scalar(fx_node):
            reason = "it makes or reads a 0-d tensor"
        elif not self._items_available(fx_node, converter):
            reason = "the model reads an item of its result that minitc does not compute"
        else:
            reason = self._convert(fx_node, converter)
            if reason is None:
                return
        self.fell_back.append(fx_node.name)
        self.names[fx_node] = self._fallback(fx_node, key, reason)

    def _convert(self, fx_node, converter) -> str | None:
        """Convert one call; None when done, else why it runs through PyTorch. The nodes the
        converter emitted are each built as a tensor expression here, so that an argument the
        kernels refuse makes this call a fallback instead of an error later, inside compile."""
        args = [self._resolve(a) for a in fx_node.args]
        kwargs = {k: self._resolve(v) for k, v in fx_node.kwargs.items()}
        start = len(self.graph.nodes)
        try:
            result = converter(self, fx_node, *args, **kwargs)
            for node in self.graph.nodes[start:] if self.check else ():
                _check_builds(node, self.values)
        except Unconvertible as e:
            reason = str(e) or "the converter does not take these arguments"
        except MinitcError as e:  # a kernel refused the node's arguments: a fallback with its reason
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        except Exception as e:  # minitc failed (a bug): PyTorch runs the call, noted as internal
            if self.strict:
                raise
            self._internal(fx_node, e)
            reason = INTERNAL + error_text(e)
        else:
            self.names[fx_node] = result
            return None
        for node in self.graph.nodes[start:]:  # what the failed converter emitted is dropped
            self.values.pop(node.name, None)
        del self.graph.nodes[start:]
        return reason

    @staticmethod
    def _items_available(fx_node, converter) -> bool:
        """False when the program reads an item of a tuple result that the converter does not
        produce (batch norm's saved statistics, max pooling's indices)."""
        produced = getattr(converter, "items", None)
        if produced is None:
            return True
        return all(user.target is operator.getitem and user.args[1] in produced for user in fx_node.users)

    def _resolve(self, arg):
        """Graph values of fx nodes (names), recursively in lists; other arguments as given."""
        import torch.fx

        if isinstance(arg, torch.fx.Node):
            named = self.names.get(arg)
            return named.value(self.symbols) if isinstance(named, SymArg) else self._operand(arg)
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._resolve(a) for a in arg)
        return arg

    def _fallback(self, fx_node, key: str, reason: str) -> str:
        import torch.fx

        def ref(a):
            if isinstance(a, torch.fx.Node):
                named = self.names.get(a)
                return named if isinstance(named, SymArg) else Ref(self._operand(a))
            if isinstance(a, (list, tuple)):  # plain lists and tuples: fx's immutable_list is neither to the passes
                return (list if isinstance(a, list) else tuple)(ref(x) for x in a)
            return a

        args, kwargs = ref(tuple(fx_node.args)), {k: ref(v) for k, v in fx_node.kwargs.items()}
        inputs = list(dict.fromkeys(_refs((args, kwargs))))
        shape, dtype = _value_meta(fx_node, self.symbols)
        name = self.emit("torch", inputs, {"target": key, "reason": reason}, shape, dtype, base=fx_node.name)
        self.graph.nodes[-1].aten = (fx_node.target, args, kwargs)
        return name


def _check_builds(node, values: dict) -> None:
    """Build `node`'s tensor expression on placeholders of its inputs' shapes (raises what the
    operator raises: a ShapeError for arguments its kernel does not take)."""
    from minitc.frontend.kernels import NO_KERNEL, node_tensor
    from minitc.te import placeholder

    if node.op in NO_KERNEL:
        return
    inputs = [placeholder(values[i].shape, values[i].dtype, name=f"in{k}") for k, i in enumerate(node.inputs)]
    node_tensor(node, inputs)


def _refs(tree):
    if isinstance(tree, Ref):
        yield str(tree)
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _refs(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _refs(v)


def import_model(model, example_inputs, fallbacks: list | None = None, strict: bool = False) -> Graph:
    """The graph of `model` called on `example_inputs` (a tuple of tensors). A call whose
    conversion fails inside minitc (a bug, not a refusal) runs through PyTorch, noted in the
    list `fallbacks` (fallback.Fallback) when one is given; `strict` raises the error instead."""
    importer = Importer(export(model, example_inputs), strict=strict)
    graph = importer.run()
    if fallbacks is not None:
        fallbacks.extend(importer.internal)
    return graph


def unsupported(graph: Graph) -> dict:
    """{ATen operator: count} of the nodes that run through PyTorch."""
    out: dict = {}
    for n in graph.nodes:
        if n.op == "torch":
            out[n.attrs["target"]] = out.get(n.attrs["target"], 0) + 1
    return out


def fallback_reasons(graph: Graph) -> dict:
    """{ATen operator: [why, ...]} of the nodes that run through PyTorch, each reason once."""
    out: dict = {}
    for n in graph.nodes:
        if n.op == "torch":
            reasons = out.setdefault(n.attrs["target"], [])
            reason = n.attrs.get("reason", "")
            if reason not in reasons:
                reasons.append(reason)
    return out
