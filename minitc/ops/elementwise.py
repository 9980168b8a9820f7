"""Elementwise operators: binary arithmetic with numpy broadcasting, activations, bias_add.

Each operator is one compute stage named after the operator (`add`, `relu`, ...) unless the
caller passes `name=`.
"""

from __future__ import annotations

import math

from minitc import dtypes
from minitc.errors import DTypeError, ShapeError
from minitc.expr import Expr, as_expr, binary, call
from minitc.expr import maximum as _maximum
from minitc.expr import minimum as _minimum
from minitc.ops import _util
from minitc.te import Tensor, compute

_SQRT1_2 = 1.0 / math.sqrt(2.0)


def broadcast_shape(op: str, *shapes: tuple) -> tuple:
    """The numpy broadcast of shapes: align on the right; each pair of extents must be equal or
    one of them 1."""
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        extents = {s[len(s) - ndim + d] for s in shapes if len(s) - ndim + d >= 0} - {1}
        if len(extents) > 1:
            shown = " and ".join(str(s) for s in shapes)
            raise ShapeError(
                f"{op}: shapes {shown} do not broadcast (axis {d - ndim} has extents "
                f"{sorted(extents)}); extents must match or be 1"
            )
        out.append(extents.pop() if extents else 1)
    return tuple(out)


def broadcast_read(x: Tensor, out_index: tuple) -> Expr:
    """Read `x` at the position of an output element, numpy-broadcast: `x`'s axes align with the
    last axes of the output, and an axis of extent 1 is always read at 0."""
    offset = len(out_index) - x.ndim
    return x[tuple(0 if x.shape[d] == 1 else out_index[offset + d] for d in range(x.ndim))]


def _scalar(op: str, what: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            return value.item()  # a numpy scalar adopts the tensor's dtype, like a Python number
        raise DTypeError(f"{op}: {what} must be a minitc Tensor or a Python number, got {type(value).__name__}")
    return value


def _binary(op: str, fn, X, Y, name) -> Tensor:
    """One broadcasting stage `fn(X[...], Y[...])`; either operand may be a Python number."""
    xt, yt = isinstance(X, Tensor), isinstance(Y, Tensor)
    if not xt and not yt:
        raise DTypeError(f"{op}: at least one operand must be a minitc Tensor, got two numbers")
    tensors = [t for t in (X, Y) if isinstance(t, Tensor)]
    if not xt:
        X = _scalar(op, "X", X)
    if not yt:
        Y = _scalar(op, "Y", Y)
    _util.numeric(op, *tensors)
    shape = broadcast_shape(op, *(t.shape for t in tensors))

    def body(*i):
        a = broadcast_read(X, i) if xt else X
        b = broadcast_read(Y, i) if yt else Y
        try:
            return fn(a, b)
        except DTypeError as err:
            raise DTypeError(f"{op}: {err}") from None

    return compute(shape, body, name=name or op, tag="elementwise", attrs={"op": op})


def add(X, Y, name: str | None = None) -> Tensor:
    """`X + Y` with numpy broadcasting; either side may be a Python number."""
    return _binary("add", lambda a, b: binary("add", a, b), X, Y, name)


def sub(X, Y, name: str | None = None) -> Tensor:
    """`X - Y` with numpy broadcasting; either side may be a Python number."""
    return _binary("sub", lambda a, b: binary("sub", a, b), X, Y, name)


def mul(X, Y, name: str | None = None) -> Tensor:
    """`X * Y` with numpy broadcasting; either side may be a Python number."""
    return _binary("mul", lambda a, b: binary("mul", a, b), X, Y, name)


def div(X, Y, name: str | None = None) -> Tensor:
    """`X / Y` (float true division) with numpy broadcasting."""
    for t in (X, Y):
        if isinstance(t, Tensor) and not dtypes.is_float(t.dtype):
            raise DTypeError(f"div: {t.name} is {t.dtype}; true division needs floats (cast first)")
    return _binary("div", lambda a, b: binary("div", a, b), X, Y, name)


def maximum(X, Y, name: str | None = None) -> Tensor:
    """Elementwise maximum with numpy broadcasting."""
    return _binary("maximum", _maximum, X, Y, name)


def minimum(X, Y, name: str | None = None) -> Tensor:
    """Elementwise minimum with numpy broadcasting."""
    return _binary("minimum", _minimum, X, Y, name)


# ---------------------------------------------------------------------------------------------
# activations: scalar-expression builders, shared with dense's epilogue


def relu_expr(x: Expr) -> Expr:
    return _maximum(x, as_expr(0, x.dtype))


def gelu_expr(x: Expr) -> Expr:
    """Exact (erf) GELU, torch's default: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + call("erf", x * _SQRT1_2))


ACTIVATIONS = {
    "relu": relu_expr,
    "gelu": gelu_expr,
    "sigmoid": lambda x: call("sigmoid", x),
    "tanh": lambda x: call("tanh", x),
}
FLOAT_ONLY = ("gelu", "sigmoid", "tanh", "exp")


def activation(op: str, kind, x: Expr) -> Expr:
    """Apply the activation named `kind` (a key of ACTIVATIONS) to a scalar expression."""
    if kind not in ACTIVATIONS:
        raise ShapeError(f"{op}: unknown activation {kind!r}; use None or one of {', '.join(map(repr, ACTIVATIONS))}")
    if kind in FLOAT_ONLY and not dtypes.is_float(x.dtype):
        raise DTypeError(f"{op}: activation {kind!r} needs float data, got {x.dtype}")
    return ACTIVATIONS[kind](x)


def _unary(op: str, fn, X, name) -> Tensor:
    _util.tensor(op, "X", X)
    (_util.floating if op in FLOAT_ONLY else _util.numeric)(op, X)
    return compute(X.shape, lambda *i: fn(X[i]), name=name or op, tag="elementwise", attrs={"op": op})


def relu(X, name: str | None = None) -> Tensor:
    """max(X, 0)."""
    return _unary("relu", relu_expr, X, name)


def gelu(X, name: str | None = None) -> Tensor:
    """Exact GELU, 0.5 * x * (1 + erf(x / sqrt 2)), like torch.nn.functional.gelu."""
    return _unary("gelu", gelu_expr, X, name)


def sigmoid(X, name: str | None = None) -> Tensor:
    """1 / (1 + exp(-X))."""
    return _unary("sigmoid", lambda x: call("sigmoid", x), X, name)


def tanh(X, name: str | None = None) -> Tensor:
    """Hyperbolic tangent."""
    return _unary("tanh", lambda x: call("tanh", x), X, name)


def exp(X, name: str | None = None) -> Tensor:
    """e ** X."""
    return _unary("exp", lambda x: call("exp", x), X, name)


def bias_add(X, bias, axis: int = 1, name: str | None = None) -> Tensor:
    """`X + bias` with the 1-D `bias` laid along `axis` of X.

    The rule: `bias.shape == (X.shape[axis],)`. The default axis=1 is the channel axis of NCHW
    data and the feature axis of [batch, features] data (as in TVM's nn.bias_add); pass
    axis=-1 for channels-last layouts.
    """
    op = "bias_add"
    _util.tensor(op, "X", X)
    _util.rank(op, "bias", bias, 1)
    if X.ndim < 2 and axis == 1:
        raise ShapeError(f"{op}: X of shape {X.shape} has no axis 1; pass axis=0 (or -1) for 1-D X")
    ax = _util.axis(op, X, axis)
    if bias.shape[0] != X.shape[ax]:
        raise ShapeError(f"{op}: bias has {bias.shape[0]} elements but axis {axis} of X {X.shape} has {X.shape[ax]}")
    _util.numeric(op, X, bias)
    return compute(
        X.shape, lambda *i: X[i] + bias[i[ax]], name=name or op, tag="elementwise", attrs={"op": op, "axis": ax}
    )
