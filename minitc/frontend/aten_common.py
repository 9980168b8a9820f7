"""The converter registry (CONVERTERS, `converts`, KEEP_WHOLE, Unconvertible) and the argument
helpers every group of converters shares; see aten.py for what a converter is."""

from __future__ import annotations

KEEP_WHOLE = ("aten.linear.default", "aten.layer_norm.default", "aten._safe_softmax.default")

CONVERTERS: dict = {}


class Unconvertible(Exception):  # noqa: N818 - a signal to the importer, not an error
    """This call is run through PyTorch; the message, when there is one, says why."""


def converts(*overloads: str, items=None):
    def register(fn):
        fn.items = items
        for name in overloads:
            CONVERTERS[name] = fn
        return fn

    return register


def _require(condition: bool, reason: str = "") -> None:
    if not condition:
        raise Unconvertible(reason)


def _floating(im, *names) -> str:
    dtypes = {im.dtype(n) for n in names}
    _require(
        len(dtypes) == 1 and next(iter(dtypes)) in ("float32", "float64"),
        f"operands of dtype {', '.join(sorted(dtypes))}: minitc's kernels take one float dtype",
    )
    return dtypes.pop()


def ints(value, n: int, default: int | None = None) -> tuple:
    """An ATen size argument as `n` ints, in every form PyTorch passes it: an int, a one-element
    list or tuple (repeated), an n-element one, or None/empty (`default` repeated). Any other
    form is beyond the converters: the call runs through PyTorch."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        _require(default is not None)
        return (default,) * n
    if isinstance(value, (list, tuple)):
        items = tuple(value)
        if len(items) == 1:
            items = items * n
    else:
        items = (value,) * n
    _require(len(items) == n and all(isinstance(v, int) and not isinstance(v, bool) for v in items))
    return tuple(int(v) for v in items)


def dims(value, rank: int) -> tuple:
    """An ATen dimension argument (an int, a list or tuple of them, possibly negative; None or
    empty for all) as sorted non-negative axes; Unconvertible when one is out of range."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return tuple(range(rank))
    items = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    _require(all(isinstance(d, int) and -rank <= d < rank for d in items))
    return tuple(sorted({d % rank for d in items}))
