"""ATen reductions and elementwise operators (arithmetic, activations, clamp, pow, cat) to graph nodes."""

from __future__ import annotations

import numpy as np

from minitc.frontend.aten_common import _floating, _require, converts, dims


# --- reductions ---------------------------------------------------------------------------------
def _reduction(op: str):
    def convert(im, node, x, dim=None, keepdim=False, dtype=None):
        _require(dtype is None)
        axes = dims(dim, len(im.shape(x)))
        out = im.meta_shape(node)
        return im.emit(op, [x], {"axis": axes, "keepdims": bool(keepdim)}, out, _floating(im, x), base=node.name)

    return convert


converts("aten.mean.dim")(_reduction("mean"))
converts("aten.sum.dim_IntList")(_reduction("sum"))
converts("aten.amax.default")(_reduction("max"))


# --- elementwise --------------------------------------------------------------------------------
def _binary(im, node, op: str, x, y, base: str | None = None) -> str:
    base = base or node.name
    out = im.meta_shape(node) if base == node.name else None
    if isinstance(y, str) and im.shape(y) == () and im.constant_array(y) is not None:
        y = im.constant_array(y).item()
    if isinstance(y, str):
        dtype = _floating(im, x, y)
        shape = out or tuple(np.broadcast_shapes(im.shape(x), im.shape(y)))
        return im.emit(op, [x, y], {}, shape, dtype, base=base)
    _require(isinstance(y, (int, float)) and not isinstance(y, bool))
    dtype = _floating(im, x)
    return im.emit(op, [x], {"scalar": float(y)}, out or im.shape(x), dtype, base=base)


def _binary_converter(op: str):
    def convert(im, node, x, y, alpha=1):
        _require(alpha == 1 and isinstance(x, str))
        return _binary(im, node, op, x, y)

    return convert


for _op in ("add", "sub", "mul", "div"):
    converts(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_binary_converter(_op))


def _unary_converter(op: str):
    def convert(im, node, x):
        return im.emit(op, [x], {}, im.shape(x), _floating(im, x), base=node.name)

    return convert


for _op in ("relu", "sigmoid", "tanh", "exp", "rsqrt"):
    converts(f"aten.{_op}.default")(_unary_converter(_op))


@converts("aten.neg.default")
def neg(im, node, x):
    return im.emit("mul", [x], {"scalar": -1.0}, im.shape(x), _floating(im, x), base=node.name)


@converts("aten.cat.default")
def cat(im, node, tensors, dim=0):
    """Concatenation along `dim`: one kernel reading each piece where its rows are."""
    tensors = [t for t in tensors if 0 not in im.shape(t)]  # torch skips empty pieces
    _require(len(tensors) >= 1 and all(isinstance(t, str) for t in tensors))
    rank = len(im.shape(tensors[0]))
    (axis,) = dims(dim, rank)
    if len(tensors) == 1:
        return tensors[0]
    dtype = {im.dtype(t) for t in tensors}
    _require(len(dtype) == 1, f"pieces of dtypes {', '.join(sorted(dtype))}")
    shape = im.meta_shape(node)
    return im.emit("cat", tensors, {"axis": axis}, shape, dtype.pop(), base=node.name)


@converts("aten.clamp.default")
def clamp(im, node, x, low=None, high=None):
    """Clamp to [low, high], either bound optional; a NaN stays NaN, as in torch."""
    _require(all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in (low, high)))
    attrs = {"low": None if low is None else float(low), "high": None if high is None else float(high)}
    return im.emit("clamp", [x], attrs, im.shape(x), _floating(im, x), base=node.name)


@converts("aten.hardtanh.default")
def hardtanh(im, node, x, low=-1.0, high=1.0):
    """ReLU6 is hardtanh(x, 0, 6)."""
    return clamp(im, node, x, low, high)


@converts("aten.pow.Tensor_Scalar")
def power(im, node, x, exponent):
    """x ** 2 and x ** 3 (GPT-2's tanh GELU cubes) as products; other exponents run in torch."""
    _require(exponent in (2, 3) and not isinstance(exponent, bool), f"x ** {exponent}: minitc takes squares and cubes")
    dtype = _floating(im, x)
    square = im.emit("mul", [x, x], {}, im.shape(x), dtype, base=f"{node.name}_sq" if exponent == 3 else node.name)
    if exponent == 2:
        return square
    return im.emit("mul", [square, x], {}, im.shape(x), dtype, base=node.name)


@converts("aten.gelu.default")
def gelu(im, node, x, approximate="none"):
    _require(approximate == "none", f"gelu(approximate={approximate!r}): minitc's gelu is the exact erf form")
    return im.emit("gelu", [x], {}, im.shape(x), _floating(im, x), base=node.name)
