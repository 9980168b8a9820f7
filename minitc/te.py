"""Tensor expressions: how a user states *what* to compute.

    A = tc.placeholder((M, K), "float32", name="A")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")

Shapes are static integers. A compute's body is a scalar expression of its axes; a reduction
(`sum`, `max`, `min`) may only be the whole body (give a reduction inside a bigger expression
its own stage).
"""

from __future__ import annotations

import inspect
import itertools

from minitc import dtypes
from minitc.errors import DTypeError, ShapeError
from minitc.expr import Binary, Const, Expr, IterVar, Var, as_expr, binary, cast, walk

_creation = itertools.count()


class Tensor:
    """The output of a placeholder or a compute. Index it to read an element: `A[i, k]`."""

    def __init__(self, shape, dtype: str, name: str, op):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.name = name
        self.op = op
        self.order = next(_creation)  # kernel arguments follow creation order
        # dynamic shapes: {dim: slot} where the dimension holds only extents[slot] valid
        # elements at run time (minitc/lowering/limits.py); the rest is padding
        self.limits: dict = {}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorRead:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ShapeError(f"{self.name} has {self.ndim} dimensions {self.shape} but was indexed with {len(indices)}")
        exprs = []
        for dim, index in enumerate(indices):
            index = as_expr(index, dtypes.INDEX) if not isinstance(index, Expr) else index
            if not dtypes.is_int(index.dtype):
                raise DTypeError(f"index {dim} of {self.name} has dtype {index.dtype}; indices must be integers")
            exprs.append(cast(index, dtypes.INDEX))
        return TensorRead(self, tuple(exprs))

    def __repr__(self):
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"

    __hash__ = object.__hash__


class PlaceholderOp:
    """An input of the computation; `constant` marks one that is not in the caches when the
    kernel runs (a model's weights, read once per inference)."""

    def __init__(self, constant: bool = False):
        self.constant = constant


class ComputeOp:
    """`axes` are the spatial axes (one per output dimension); `body` is the element expression,
    a `Reduce` at the top for reductions. `tag` names the operator family (`"matmul"`,
    `"conv2d"`, ...) and `attrs` its parameters; schedule templates and the design space
    dispatch on them."""

    def __init__(self, axes: tuple, body: Expr, tag: str = "", attrs: dict | None = None):
        self.axes = tuple(axes)
        self.body = body
        self.tag = tag
        self.attrs = dict(attrs or {})

    @property
    def reduce_axes(self) -> tuple:
        return self.body.axes if isinstance(self.body, Reduce) else ()


class TensorRead(Expr):
    """`tensor[indices]` inside a tensor expression."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor, self.indices, self.dtype = tensor, tuple(indices), tensor.dtype

    def children(self):
        return self.indices

    def rebuild(self, kids):
        return TensorRead(self.tensor, kids)


class Reduce(Expr):
    """A reduction (`sum`, `max` or `min`) of `source` over `axes`, starting from `init`."""

    __slots__ = ("combiner", "source", "axes", "init")

    def __init__(self, combiner: str, source: Expr, axes: tuple, init: Const):
        self.combiner, self.source, self.axes, self.init = combiner, source, tuple(axes), init
        self.dtype = source.dtype

    def children(self):
        return (self.source,)

    def rebuild(self, kids):
        return Reduce(self.combiner, kids[0], self.axes, self.init)


def combine(combiner: str, acc: Expr, value: Expr) -> Expr:
    """The update `acc <- acc (+|max|min) value` of a reduction."""
    return binary({"sum": "add", "max": "max", "min": "min"}[combiner], acc, value)


_names: dict = {}


def _fresh(base: str) -> str:
    n = _names.get(base, 0)
    _names[base] = n + 1
    return base if n == 0 else f"{base}{n}"


def _check_shape(shape) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ShapeError(f"a shape must be a tuple of positive ints, got {shape!r}") from None
    if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        raise ShapeError(f"a shape must be a non-empty tuple of positive ints, got {shape!r}")
    return shape


def placeholder(shape, dtype="float32", name: str | None = None, constant: bool = False) -> Tensor:
    """An input tensor of the given static shape and dtype. `constant=True` says it is a
    weight that will come from memory, not the caches, when the kernel runs in a model:
    tuning then flushes it from the caches before each timed call, and it is another workload
    than the same computation on warm inputs."""
    op = PlaceholderOp(constant)
    return Tensor(_check_shape(shape), dtypes.check(dtype), name or _fresh("placeholder"), op)


def reduce_axis(extent, name: str | None = None) -> IterVar:
    """A reduction axis ranging over `0 <= k < extent` (`extent` may also be a `(0, n)` pair)."""
    if isinstance(extent, tuple):
        if len(extent) != 2 or extent[0] != 0:
            raise ShapeError(f"reduce_axis takes an extent or a (0, n) range, got {extent!r}")
        extent = extent[1]
    if not isinstance(extent, int) or extent <= 0:
        raise ShapeError(f"reduce_axis extent must be a positive int, got {extent!r}")
    return IterVar(name or "k", extent, "reduce")


def compute(shape, fcompute, name: str | None = None, tag: str = "", attrs: dict | None = None) -> Tensor:
    """A tensor whose element at (i, j, ...) is `fcompute(i, j, ...)`. `tag` and `attrs`
    optionally name the operator family and its parameters (see ComputeOp)."""
    shape = _check_shape(shape)
    params = [p for p in inspect.signature(fcompute).parameters.values()]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        names = [f"i{d}" for d in range(len(shape))]
    else:
        if len(params) != len(shape):
            raise ShapeError(
                f"compute shape {shape} has {len(shape)} dimensions but the lambda takes {len(params)} arguments"
            )
        names = [p.name for p in params]
    axes = tuple(IterVar(n, s, "spatial") for n, s in zip(names, shape))
    body = as_expr(fcompute(*axes))
    name = name or _fresh("compute")
    _check_body(body, axes, name)
    return Tensor(shape, body.dtype, name, ComputeOp(axes, body, tag, attrs))


def _check_body(body: Expr, axes: tuple, name: str) -> None:
    reduce_axes = ()
    if isinstance(body, Reduce):
        reduce_axes = body.axes
        nodes = list(walk(body.source))
    else:
        nodes = list(walk(body))
    for node in nodes:
        if isinstance(node, Reduce):
            raise ShapeError(
                f"compute {name}: a reduction must be the whole body of a compute; "
                "give the reduction its own tc.compute and combine the results in another"
            )
    allowed = set(axes) | set(reduce_axes)
    for node in nodes:
        if isinstance(node, Var) and node not in allowed:
            what = "reduce axis" if isinstance(node, IterVar) and node.kind == "reduce" else "variable"
            raise ShapeError(
                f"compute {name}: {what} {node.name} is used but not bound by this compute or its reduction"
            )


def _reduce(combiner: str, expr, axis, dtype=None) -> Reduce:
    expr = as_expr(expr)
    if dtype is not None:
        expr = widen(expr, dtypes.check(dtype), f"tc.{combiner}(..., dtype={dtype!r})")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes or not all(isinstance(a, IterVar) and a.kind == "reduce" for a in axes):
        raise ShapeError(f"{combiner}(..., axis=...) needs axes made by tc.reduce_axis, got {axis!r}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{combiner}: the same reduce axis appears twice")
    if combiner == "sum":
        init = Const(0, expr.dtype)
    elif combiner == "max":
        init = Const(dtypes.min_value(expr.dtype), expr.dtype)
    else:
        init = Const(dtypes.max_value(expr.dtype), expr.dtype)
    if expr.dtype == dtypes.BOOL:
        raise DTypeError(f"cannot {combiner}-reduce booleans; cast them first")
    return Reduce(combiner, expr, axes, init)


def widen(expr: Expr, dtype: str, what: str) -> Expr:
    """`expr` computed in the wider `dtype`: the operands of its arithmetic are converted
    first, so `A[i, k] * B[k, j]` of int8 operands multiplies in int32 (no int8 wrap-around)
    and of bfloat16 ones in float32 (no rounding of the product), as the dot-product
    instructions (vpdpbusd, vdpbf16ps) compute."""
    if expr.dtype == dtype:
        return expr
    if expr.dtype == dtypes.BOOL or dtypes.promote(expr.dtype, dtype, what) != dtype:
        raise DTypeError(f"{what}: cannot accumulate {expr.dtype} in the narrower or other-kind {dtype}")
    if isinstance(expr, Binary) and expr.op in ("add", "sub", "mul", "min", "max"):
        return binary(expr.op, widen(expr.a, dtype, what), widen(expr.b, dtype, what))
    return cast(expr, dtype)


def sum(expr, axis, dtype=None) -> Reduce:  # noqa: A001 - mirrors tvm.te.sum
    """Sum of `expr` over the reduce axis (or tuple of axes) `axis`. `dtype` accumulates in a
    wider type of the same kind (`"float32"` for bfloat16/float16, `"int32"` for int8/uint8);
    the element expression is then computed in it too (see `widen`)."""
    return _reduce("sum", expr, axis, dtype)


def max(expr, other=None, axis=None) -> Expr:  # noqa: A001
    """`tc.max(x, axis=k)` reduces over k; `tc.max(a, b)` is the elementwise maximum."""
    if axis is not None:
        return _reduce("max", expr, axis)
    if other is None:
        raise ShapeError("tc.max needs either axis=<reduce axis> or a second operand")
    return binary("max", expr, other)


def min(expr, other=None, axis=None) -> Expr:  # noqa: A001
    """`tc.min(x, axis=k)` reduces over k; `tc.min(a, b)` is the elementwise minimum."""
    if axis is not None:
        return _reduce("min", expr, axis)
    if other is None:
        raise ShapeError("tc.min needs either axis=<reduce axis> or a second operand")
    return binary("min", expr, other)


def graph(outputs) -> list:
    """All tensors the outputs depend on, producers before consumers, deterministic order."""
    order, seen = [], set()

    def visit(t: Tensor):
        if t in seen:
            return
        seen.add(t)
        if isinstance(t.op, ComputeOp):
            for node in walk(t.op.body):
                if isinstance(node, TensorRead):
                    visit(node.tensor)
        order.append(t)

    for out in outputs:
        visit(out)
    return order


def reads(body: Expr) -> list:
    """The TensorRead nodes of an expression, in order."""
    return [n for n in walk(body) if isinstance(n, TensorRead)]
