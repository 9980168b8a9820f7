"""Reductions over any axes: `sum`, `max`, `min`, `mean` (numpy-style names and arguments).

`axis` is an int, a tuple of ints (negative allowed) or None for every axis. The reduced axes
are dropped, or kept with extent 1 when keepdims=True; since a minitc tensor has at least one
dimension, reducing every axis without keepdims gives shape (1,), not a 0-d scalar.
Each is one stage named after the operator (or `name`); reduce axes are named `r<axis>`.
"""

from __future__ import annotations

from minitc import te
from minitc.ops import _util
from minitc.te import Tensor, compute, reduce_axis


def _reduction(op: str, combiner, X, axis, keepdims: bool, name, scale=None) -> Tensor:
    _util.tensor(op, "X", X)
    (_util.floating if scale is not None else _util.numeric)(op, X)
    reduced = _util.axes(op, X, axis)
    shape = _util.reduced_shape(X.shape, reduced, keepdims)
    rvars = tuple(reduce_axis(X.shape[d], name=f"r{d}") for d in reduced)
    all_gone = not keepdims and len(reduced) == X.ndim

    def body(*i):
        index = _util.full_index(X.ndim, reduced, () if all_gone else i, rvars, keepdims)
        value = X[index] if scale is None else X[index] * scale
        return combiner(value, axis=rvars)

    return compute(
        shape, body, name=name or op, tag="reduce", attrs={"op": op, "axis": tuple(reduced), "keepdims": keepdims}
    )


def sum(X, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:  # noqa: A001
    """Sum of X over `axis` (int, tuple or None for all)."""
    return _reduction("sum", te.sum, X, axis, keepdims, name)


def max(X, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:  # noqa: A001
    """Maximum of X over `axis` (int, tuple or None for all)."""
    return _reduction("max", te.max, X, axis, keepdims, name)


def min(X, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:  # noqa: A001
    """Minimum of X over `axis` (int, tuple or None for all)."""
    return _reduction("min", te.min, X, axis, keepdims, name)


def mean(X, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """Mean of float X over `axis`, as one stage: sum of X * (1/count)."""
    _util.tensor("mean", "X", X)
    count = 1
    for d in _util.axes("mean", X, axis):
        count *= X.shape[d]
    return _reduction("mean", te.sum, X, axis, keepdims, name, scale=1.0 / count)
