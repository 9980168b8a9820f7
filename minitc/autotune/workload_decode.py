"""From a workload's canonical form (workload_key.canonical) back to tensors.

    form = canonical(C, attrs=True)       # what the records database stores
    (C2,) = decode(form)                  # placeholders and computes, bodies, reduce axes, tags, attrs
    workload_key(C2) == workload_key(C)   # decode checks this (against form_key(form))

The rebuilt tensors have made-up names (inputs A, B, ...; a compute is named by its tag), since
the form keeps none, and the attrs of the form (the stored one has them; a form made without
them decodes to tensors without attrs, which the templates may then not recognise). A form that
is malformed, names an unknown node, dtype or operator, or that this minitc rebuilds into
another workload raises `DecodeError`, naming the stage and the node at fault.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.autotune.workload_key import form_key, workload_key
from minitc.errors import MinitcError
from minitc.expr import (
    BINARY_OPS,
    COMPARE_OPS,
    INTRINSICS,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    EqualityTest,
    IterVar,
    Not,
    Select,
)
from minitc.te import ComputeOp, Reduce, Tensor, TensorRead, placeholder

SPATIAL_NAMES = ("i", "j", "l", "m", "n", "o", "p", "q")
COMBINERS = ("sum", "max", "min")


class DecodeError(MinitcError):
    """A canonical workload form that cannot be turned back into tensors."""


def decode(form) -> list:
    """The output tensors of a canonical form (a list, or its JSON text parsed by the caller);
    raises DecodeError for a form that is malformed or not this minitc's."""
    if not isinstance(form, list) or not form:
        raise DecodeError(f"a canonical workload form is a non-empty JSON list, got {_show(form)}")
    *entries, last = form
    if not (isinstance(last, list) and len(last) == 2 and last[0] == "outputs" and isinstance(last[1], list)):
        raise DecodeError(f"the last entry of a canonical form is ['outputs', [stage numbers]], got {_show(last)}")
    tensors: list = []
    n_inputs = 0
    for n, entry in enumerate(entries):
        kind = entry[0] if isinstance(entry, list) and entry else None
        if kind == "input":
            tensors.append(_input(entry, n, _letters(n_inputs)))
            n_inputs += 1
        elif kind == "compute":
            tensors.append(_compute(entry, n, tensors))
        else:
            raise DecodeError(f"stage {n}: expected an ['input', ...] or ['compute', ...] entry, got {_show(entry)}")
    outputs = [_stage(i, tensors, "the outputs") for i in last[1]]
    if not outputs or any(not isinstance(t.op, ComputeOp) for t in outputs):
        raise DecodeError(f"the outputs {_show(last[1])} must name one or more compute stages")
    try:
        key = workload_key(outputs)
    except MinitcError as e:
        raise DecodeError(f"the decoded computation is not valid: {e}") from None
    if key != form_key(form):
        raise DecodeError(
            f"the form decodes to workload {key}, not {form_key(form)}: it was written by another minitc "
            "version, or a stage is unreachable from the outputs or out of order"
        )
    return outputs


def _show(x, limit: int = 80) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _letters(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else f"X{n}"


def _dtype(value, where: str) -> str:
    if value not in dtypes.ALL:
        raise DecodeError(f"{where}: unknown dtype {_show(value)} (known: {', '.join(dtypes.ALL)})")
    return value


def _shape(value, where: str) -> tuple:
    if not (isinstance(value, list) and value and all(type(d) is int and d > 0 for d in value)):
        raise DecodeError(f"{where}: a shape is a non-empty list of positive ints, got {_show(value)}")
    return tuple(value)


def _input(entry: list, n: int, name: str) -> Tensor:
    where = f"stage {n} (input)"
    if len(entry) not in (3, 4) or (len(entry) == 4 and entry[3] != "constant"):
        raise DecodeError(f"{where}: expected ['input', shape, dtype] or [..., 'constant'], got {_show(entry)}")
    shape, dtype = _shape(entry[1], where), _dtype(entry[2], where)
    return placeholder(shape, dtype, name=name, constant=len(entry) == 4)


def _compute(entry: list, n: int, tensors: list) -> Tensor:
    where = f"stage {n} (compute)"
    if len(entry) not in (6, 7):
        expected = "['compute', tag, shape, dtype, extents, body(, attrs)]"
        raise DecodeError(f"{where}: expected {expected}, got {_show(entry)}")
    _, tag, shape, dtype, extents, body = entry[:6]
    attrs = entry[6] if len(entry) == 7 else {}
    if not isinstance(tag, str):
        raise DecodeError(f"{where}: the tag must be a string, got {_show(tag)}")
    if not isinstance(attrs, dict):
        raise DecodeError(f"{where}: the attrs must be a JSON object, got {_show(attrs)}")
    where = f"stage {n} (compute {tag or 'untagged'})"
    shape, dtype = _shape(shape, where), _dtype(dtype, where)
    if not (isinstance(extents, list) and all(type(e) is int and e > 0 for e in extents)):
        raise DecodeError(f"{where}: the axis extents must be a list of positive ints, got {_show(extents)}")
    if tuple(extents[: len(shape)]) != shape:
        raise DecodeError(f"{where}: the spatial axes {extents[: len(shape)]} do not match the shape {list(shape)}")
    axes = [IterVar(_axis_name(d, len(shape)), e, "spatial") for d, e in enumerate(extents[: len(shape)])]
    reduce_extents = extents[len(shape) :]
    axes += [IterVar("k" if len(reduce_extents) == 1 else f"k{d}", e, "reduce") for d, e in enumerate(reduce_extents)]
    decoder = _Body(axes, len(shape), tensors, where)
    expr = decoder.top(body)
    if expr.dtype != dtype:
        raise DecodeError(f"{where}: the body computes {expr.dtype}, but the stage says {dtype}")
    name = tag or "compute"
    return Tensor(shape, dtype, name, ComputeOp(tuple(axes[: len(shape)]), expr, tag, _attrs(attrs)))


def _axis_name(d: int, ndim: int) -> str:
    return SPATIAL_NAMES[d] if ndim <= len(SPATIAL_NAMES) else f"i{d}"


def _attr(value):
    return tuple(_attr(v) for v in value) if isinstance(value, list) else value


def _attrs(attrs: dict) -> dict:
    """Attrs as tc.ops writes them: JSON lists back to tuples."""
    return {name: _attr(value) for name, value in attrs.items()}


def _stage(i, tensors: list, where: str) -> Tensor:
    if type(i) is not int or not 0 <= i < len(tensors):
        raise DecodeError(f"{where}: stage number {_show(i)} names no earlier stage (there are {len(tensors)})")
    return tensors[i]


class _Body:
    """Decodes one compute's body; `where` names the stage in errors."""

    def __init__(self, axes: list, n_spatial: int, tensors: list, where: str):
        self.axes, self.n_spatial, self.tensors, self.where = axes, n_spatial, tensors, where

    def fail(self, node, why: str):
        raise DecodeError(f"{self.where}: {why}: {_show(node)}")

    def top(self, node):
        """The body: a reduction over all the reduce axes, or (without reduce axes) any expression."""
        reduce_axes = self.axes[self.n_spatial :]
        if isinstance(node, list) and node[:1] == ["reduce"]:
            if len(node) != 5 or node[1] not in COMBINERS or not isinstance(node[2], list):
                self.fail(node, f"a reduction is ['reduce', one of {', '.join(COMBINERS)}, [axes], init, source]")
            axes = [self.axis(a, node) for a in node[2]]
            if axes != reduce_axes:
                self.fail(node, f"the reduction must run over the reduce axes {self.n_spatial}.. in order")
            init, source = self.expr(node[3]), self.expr(node[4])
            if not isinstance(init, Const):
                self.fail(node[3], "a reduction's init is a constant")
            return Reduce(node[1], source, tuple(axes), init)
        if reduce_axes:
            self.fail(node, f"the stage has {len(reduce_axes)} reduce axes but its body is no reduction")
        return self.expr(node)

    def axis(self, i, node) -> IterVar:
        if type(i) is not int or not 0 <= i < len(self.axes):
            self.fail(node, f"axis number {_show(i)} is none of the stage's {len(self.axes)} axes")
        return self.axes[i]

    def expr(self, node):
        if not (isinstance(node, list) and node and isinstance(node[0], str)):
            self.fail(node, "a body node is a list starting with its kind")
        head = node[0]
        if head == "c":
            return self.const(node)
        if head == "v":
            if len(node) != 2:
                self.fail(node, "a variable is ['v', axis number]")
            return self.axis(node[1], node)
        if head == "r":
            return self.read(node)
        if head == "reduce":
            self.fail(node, "a reduction may only be the whole body of a compute")
        rule = _NODES.get(head)
        if rule is None:
            self.fail(node, f"unknown node kind {head!r} (known: c, v, r, reduce, {', '.join(_NODES)})")
        arity, build = rule
        if len(node) != arity:
            self.fail(node, f"a {head!r} node has {arity - 1} fields after its kind")
        dtype = _dtype(node[1], f"{self.where}: node {_show(node)}")
        try:
            return build(self, node, dtype)
        except DecodeError:
            raise
        except (MinitcError, TypeError, ValueError) as e:  # an operand a constructor refuses
            self.fail(node, f"not a valid {head!r} node ({e})")

    def const(self, node):
        if len(node) != 3 or not isinstance(node[2], str):
            self.fail(node, "a constant is ['c', dtype, repr(value)]")
        dtype = _dtype(node[1], f"{self.where}: constant {_show(node)}")
        try:
            value = float(node[2]) if dtypes.is_float(dtype) else int(node[2])
        except ValueError:
            self.fail(node, f"{node[2]!r} is not a {dtype} value")
        return Const(value, dtype)

    def read(self, node):
        if len(node) < 3:
            self.fail(node, "a read is ['r', stage number, *indices]")
        tensor = _stage(node[1], self.tensors, f"{self.where}: read {_show(node)}")
        indices = tuple(self.expr(i) for i in node[2:])
        if len(indices) != tensor.ndim:
            self.fail(node, f"stage {node[1]} has {tensor.ndim} dimensions but is read with {len(indices)} indices")
        if any(i.dtype != dtypes.INDEX for i in indices):
            self.fail(node, f"indices are {dtypes.INDEX}")
        return TensorRead(tensor, indices)

    def operator(self, name, known: tuple, node):
        if name not in known:
            self.fail(node, f"unknown operator {name!r} (known: {', '.join(known)})")
        return name


def _binary(d: _Body, node, dtype):
    return Binary(d.operator(node[2], BINARY_OPS, node), d.expr(node[3]), d.expr(node[4]), dtype)


def _compare(d: _Body, node, dtype, equality: bool = False):
    op = d.operator(node[2], ("eq", "ne") if equality else COMPARE_OPS, node)
    a, b = d.expr(node[3]), d.expr(node[4])
    return EqualityTest(op, a, b, (a, b)) if equality else Compare(op, a, b)


def _call(d: _Body, node, dtype):
    return Call(d.operator(node[2], INTRINSICS, node), (d.expr(node[3]),), dtype)


# head -> (node length, builder(decoder, node, dtype)); the shapes workload_key._encode writes
_NODES = {
    "b": (5, _binary),
    "cmp": (5, _compare),
    "EqualityTest": (5, lambda d, node, dtype: _compare(d, node, dtype, equality=True)),
    "not": (3, lambda d, node, dtype: Not(d.expr(node[2]))),
    "sel": (5, lambda d, node, dtype: Select(d.expr(node[2]), d.expr(node[3]), d.expr(node[4]), dtype)),
    "cast": (3, lambda d, node, dtype: Cast(dtype, d.expr(node[2]))),
    "call": (4, _call),
}
