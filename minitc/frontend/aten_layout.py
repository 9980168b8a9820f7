"""ATen layout operators to graph nodes: views, permutes, slices, pads and broadcasts."""

from __future__ import annotations

from minitc.frontend.aten_common import _floating, _require, converts


# --- layout: views are free, permutes and broadcasts are index expressions ----------------------
def _view(im, node, x, *rest, **options):
    return im.view(x, im.meta_shape(node))


for _name in (
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.reshape.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.flatten.using_ints",
    "aten.alias.default",
    "aten.clone.default",
    "aten.detach.default",
):
    converts(_name)(_view)


@converts("aten.permute.default")
def permute(im, node, x, order):
    rank = len(im.shape(x))
    _require(len(order) == rank and all(-rank <= d < rank for d in order))
    order = tuple(d % rank for d in order)
    if order == tuple(range(rank)):
        return x
    shape = tuple(im.shape(x)[d] for d in order)
    return im.emit("permute", [x], {"dims": order}, shape, im.dtype(x), base=node.name)


@converts("aten.slice.Tensor")
def slice_(im, node, x, dim=0, start=None, end=None, step=1):
    step = 1 if step is None else step
    _require(isinstance(step, int) and step >= 1 and -len(im.shape(x)) <= dim < len(im.shape(x)))
    shape = im.shape(x)
    dim %= len(shape)
    begin = 0 if start is None else max(0, min(shape[dim], start + shape[dim] if start < 0 else start))
    stop = shape[dim] if end is None else max(begin, min(shape[dim], end + shape[dim] if end < 0 else end))
    if step == 1:
        return _slice(im, node.name, x, dim, begin, stop)
    out = im.meta_shape(node)  # every step-th row from begin (Swin's patch merging)
    return im.emit("slice", [x], {"axis": dim, "start": begin, "step": step}, out, im.dtype(x), base=node.name)


@converts("aten.split_with_sizes.default")
def split_with_sizes(im, node, x, sizes, dim=0):
    """The pieces (GPT-2's query, key and value out of one dense layer) as slices, which fuse
    into their readers."""
    _require(-len(im.shape(x)) <= dim < len(im.shape(x)))
    dim %= len(im.shape(x))
    _require(sum(sizes) == im.shape(x)[dim])
    starts = [sum(sizes[:n]) for n in range(len(sizes))]
    return tuple(_slice(im, f"{node.name}_{n}", x, dim, b, b + size) for n, (b, size) in enumerate(zip(starts, sizes)))


def _slice(im, base: str, x: str, dim: int, begin: int, stop: int) -> str:
    shape = im.shape(x)
    if (begin, stop) == (0, shape[dim]):
        return x
    out = shape[:dim] + (stop - begin,) + shape[dim + 1 :]
    return im.emit("slice", [x], {"axis": dim, "start": begin}, out, im.dtype(x), base=base)


@converts("aten.constant_pad_nd.default")
def constant_pad(im, node, x, pad, value=0):
    """torch's pad list: (before, after) pairs from the last axis backwards; cropping (a negative
    amount) runs through PyTorch."""
    rank = len(im.shape(x))
    _require(
        len(pad) % 2 == 0 and len(pad) // 2 <= rank and all(isinstance(p, int) and p >= 0 for p in pad),
        f"padding {list(pad)}: a negative amount crops",
    )
    _require(isinstance(value, (int, float)) and not isinstance(value, bool))
    widths = [(0, 0)] * rank
    for k in range(len(pad) // 2):
        widths[rank - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    if not any(a or b for a, b in widths):
        return x
    shape = tuple(d + a + b for d, (a, b) in zip(im.shape(x), widths))
    attrs = {"before": tuple(a for a, _ in widths), "value": float(value)}
    return im.emit("pad", [x], attrs, shape, _floating(im, x), base=node.name)


@converts("aten.expand.default")
def expand(im, node, x, size, implicit=False):
    shape = im.meta_shape(node)
    if shape == im.shape(x):
        return x
    return im.emit("expand", [x], {"shape": shape}, shape, im.dtype(x), base=node.name)
