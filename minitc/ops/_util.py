"""Argument checking and index helpers shared by the operator definitions.

Every check raises `ShapeError` or `DTypeError` with a message that starts with the operator's
name, says what was expected and what was given, so a user can fix the call without reading
minitc's source.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.errors import DTypeError, ShapeError
from minitc.te import Tensor


def tensor(op: str, what: str, x) -> Tensor:
    """`x` must be a minitc Tensor (a placeholder or a compute)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{op}: {what} must be a minitc Tensor (tc.placeholder or tc.compute), got {type(x).__name__}")
    return x


def rank(op: str, what: str, x, ndim: int, layout: str = "") -> Tensor:
    """`x` must be a Tensor of exactly `ndim` dimensions."""
    tensor(op, what, x)
    if x.ndim != ndim:
        hint = f" ({layout})" if layout else ""
        raise ShapeError(f"{op}: {what} must be {ndim}-D{hint}, got shape {x.shape} ({x.ndim}-D)")
    return x


def numeric(op: str, *xs: Tensor) -> str:
    """The common dtype of the tensors, which must not be boolean."""
    dtype = xs[0].dtype
    for x in xs:
        if x.dtype == dtypes.BOOL:
            raise DTypeError(f"{op}: {x.name} is boolean; cast it to a number first with tc.cast")
    for x in xs[1:]:
        dtype = dtypes.promote(dtype, x.dtype, f"{op}: inputs {xs[0].name} and {x.name}")
    return dtype


def floating(op: str, *xs: Tensor) -> str:
    """The common dtype of the tensors, which must be a float type."""
    dtype = numeric(op, *xs)
    if not dtypes.is_float(dtype):
        raise DTypeError(f"{op} needs float inputs, got {dtype}; cast them first, e.g. tc.ops.cast(x, 'float32')")
    return dtype


def pair(op: str, what: str, value, minimum: int = 1) -> tuple:
    """An int or a pair of ints, each at least `minimum`, as a pair."""
    items = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        items = tuple(items)
    except TypeError:
        items = ()
    if len(items) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ShapeError(f"{op}: {what} must be an int or a pair of ints, got {value!r}")
    if any(v < minimum for v in items):
        raise ShapeError(f"{op}: {what} must be >= {minimum}, got {value!r}")
    return items


def axis(op: str, x: Tensor, ax) -> int:
    """A (possibly negative) axis of `x`, normalised to 0 <= axis < x.ndim."""
    if not isinstance(ax, int) or isinstance(ax, bool):
        raise ShapeError(f"{op}: axis must be an int, got {ax!r}")
    if not -x.ndim <= ax < x.ndim:
        raise ShapeError(f"{op}: axis {ax} is out of range for {x.name} of shape {x.shape} ({x.ndim}-D)")
    return ax % x.ndim


def axes(op: str, x: Tensor, ax) -> tuple:
    """`None` (all axes), an int or a tuple of ints, normalised and sorted; no duplicates."""
    if ax is None:
        return tuple(range(x.ndim))
    items = ax if isinstance(ax, (tuple, list)) else (ax,)
    if not items:
        raise ShapeError(f"{op}: axis must name at least one axis (or be None for all), got {ax!r}")
    normalised = [axis(op, x, a) for a in items]
    if len(set(normalised)) != len(normalised):
        raise ShapeError(f"{op}: axis {ax!r} names the same axis twice for {x.name} of shape {x.shape}")
    return tuple(sorted(normalised))


def reduced_shape(shape: tuple, reduced: tuple, keepdims: bool) -> tuple:
    """The shape left after reducing `reduced` axes. Tensors have at least one dimension, so
    reducing every axis without keepdims gives shape (1,)."""
    if keepdims:
        return tuple(1 if d in reduced else s for d, s in enumerate(shape))
    kept = tuple(s for d, s in enumerate(shape) if d not in reduced)
    return kept or (1,)


def full_index(ndim: int, reduced: tuple, out_index: tuple, reduce_vars: tuple, keepdims: bool) -> tuple:
    """The index into the un-reduced tensor: reduce variables on the reduced axes, the output's
    axes (in order) elsewhere. Inverse of `reduced_shape`."""
    rvars = iter(reduce_vars)
    if keepdims:
        return tuple(next(rvars) if d in reduced else out_index[d] for d in range(ndim))
    kept = iter(out_index)
    return tuple(next(rvars) if d in reduced else next(kept) for d in range(ndim))


def window_output_size(extent: int, pad: int, window: int, stride: int, dilation: int = 1) -> int:
    """Output extent of a sliding window (no ceil mode): floor((n + 2p - d(w-1) - 1) / s) + 1."""
    return (extent + 2 * pad - dilation * (window - 1) - 1) // stride + 1


def out_size(op: str, what: str, extent: int, pad: int, window: int, stride: int, dilation: int = 1) -> int:
    """window_output_size, or a ShapeError naming `op` when the window does not fit."""
    span = dilation * (window - 1) + 1
    if extent + 2 * pad < span:
        raise ShapeError(
            f"{op}: the {what} window spans {span} (kernel {window}, dilation {dilation}) but the "
            f"padded input is only {extent + 2 * pad} ({extent} + 2*{pad}); use a smaller kernel or more padding"
        )
    return window_output_size(extent, pad, window, stride, dilation)
