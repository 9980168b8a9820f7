"""ATen operators to graph nodes: one converter per overload, in CONVERTERS.

A converter is called with the importer and the call's arguments, graph values given by name
(a str) and everything else as ATen passes it; it emits nodes with `im.emit` and returns the
name of the value the call produces (a tuple of names, None where an item is not produced, for
an operator that returns a tuple; such converters list the items they produce in `.items`). A
call beyond what minitc's kernels do (a grouped convolution, softmax over another axis,
operands of two dtypes) raises Unconvertible, and the importer runs that call through PyTorch.

KEEP_WHOLE names the operators the export keeps undecomposed because minitc has a kernel for
the whole operator (a `linear` is one dense kernel, not a transpose, a matmul and an add).
"""

from __future__ import annotations

import math

import numpy as np

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


def _flatten_leading(im, x: str) -> tuple:
    """x viewed as 2-D [rows, last] (dense reads 2-D), and the leading shape to restore."""
    shape = im.shape(x)
    _require(len(shape) >= 2)
    lead = shape[:-1]
    return im.view(x, (math.prod(lead), shape[-1])), lead


# --- linear algebra -----------------------------------------------------------------------------
@converts("aten.linear.default")
def linear(im, node, x, w, b=None):
    dtype = _floating(im, x, w, *([b] if b else []))
    _require(len(im.shape(w)) == 2 and (b is None or len(im.shape(b)) == 1))
    x2, lead = _flatten_leading(im, x)
    out = im.shape(w)[0]
    attrs = {}
    weight = im.constant_array(w)
    if weight is not None:  # transposed once here: the kernel packs [in, out] panels by plain copies
        w, attrs = im.constant(np.ascontiguousarray(weight.T), f"{w}_t"), {"weight_in_out": True}
    y = im.emit("dense", [x2, w] + ([b] if b else []), attrs, (im.shape(x2)[0], out), dtype, base=node.name)
    return im.view(y, (*lead, out))


@converts("aten.addmm.default")
def addmm(im, node, bias, a, b, beta=1, alpha=1):
    """`a @ b + bias`. With a constant [in, out] weight (GPT-2's Conv1D) and a [out] bias it is
    a dense layer reading the weight as it is stored (`weight_in_out`)."""
    _require(beta == 1 and alpha == 1)
    dtype = _floating(im, bias, a, b)
    _require(len(im.shape(a)) == 2 and len(im.shape(b)) == 2)
    shape = (im.shape(a)[0], im.shape(b)[1])
    weight = im.constant_array(b)
    if weight is not None and im.shape(bias) == (shape[1],):
        return im.emit("dense", [a, b, bias], {"weight_in_out": True}, shape, dtype, base=node.name)
    y = im.emit("matmul", [a, b], {}, shape, dtype, base=f"{node.name}_mm")
    return _binary(im, node, "add", y, bias)


@converts("aten.mm.default")
def mm(im, node, a, b):
    dtype = _floating(im, a, b)
    return im.emit("matmul", [a, b], {}, (im.shape(a)[0], im.shape(b)[1]), dtype, base=node.name)


@converts("aten.bmm.default")
def bmm(im, node, a, b):
    dtype = _floating(im, a, b)
    (batch, m, _), n = im.shape(a), im.shape(b)[2]
    return im.emit("batch_matmul", [a, b], {}, (batch, m, n), dtype, base=node.name)


# --- convolution, normalisation, pooling --------------------------------------------------------
@converts("aten.convolution.default")
def convolution(im, node, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    shape = im.meta_shape(node)
    if transposed:
        return _transposed_conv2d(im, node, x, w, b, stride, padding, dilation, output_padding, groups, shape)
    if len(im.shape(x)) == 3:  # 1-D: a 2-D convolution of height 1, [N, C, 1, L] by [K, C/g, 1, R]
        (n, c, length), (k, cg, r) = im.shape(x), im.shape(w)
        weight = im.constant_array(w)
        w = im.constant(weight.reshape(k, cg, 1, r), f"{w}_2d") if weight is not None else im.view(w, (k, cg, 1, r))
        args = ((1, *ints(stride, 1, 1)), (0, *ints(padding, 1, 0)), (1, *ints(dilation, 1, 1)), groups)
        y = _conv2d(im, node.name, im.view(x, (n, c, 1, length)), w, b, *args, (n, k, 1, shape[-1]))
        return im.view(y, shape)
    _require(len(im.shape(x)) == 4, f"a {len(im.shape(x)) - 2}-D convolution: minitc's kernels are 1-D and 2-D")
    args = (ints(stride, 2, 1), ints(padding, 2, 0), ints(dilation, 2, 1), groups)
    return _conv2d(im, node.name, x, w, b, *args, shape)


GROUPS_AS_DENSE = 8  # a grouped convolution of up to this many groups runs as a dense one


def _conv2d(im, base: str, x, w, b, stride, padding, dilation, groups, shape) -> str:
    dtype = _floating(im, x, w)
    channels = im.shape(x)[1]
    if groups == 1:
        op = "conv2d"
    elif groups == channels and im.shape(w)[1] == 1:
        op = "depthwise_conv2d"
    else:
        w, op = _block_diagonal(im, w, groups), "conv2d"
    attrs = {"stride": stride, "padding": padding, "dilation": dilation}
    y = im.emit(op, [x, w], attrs, shape, dtype, base=base)
    if b is None:
        return y
    return im.emit("add", [y, _channel_vector(im, b, 4)], {}, shape, dtype, base=f"{base}_bias")


def _block_diagonal(im, w: str, groups: int) -> str:
    """A grouped convolution's constant weight [K, C/g, R, S] as a dense [K, C, R, S] one, zero
    outside each group's block: `groups` times the work, but the dense templates (NCHW[c],
    Winograd, batch-norm folding) instead of a PyTorch call; up to GROUPS_AS_DENSE groups."""
    weight = im.constant_array(w)
    k, cg = im.shape(w)[:2]
    _require(
        weight is not None and groups <= GROUPS_AS_DENSE,
        f"a grouped convolution ({groups} groups of {cg} channels"
        + (f", more than {GROUPS_AS_DENSE}" if weight is not None else ", weights computed at run time")
        + "): minitc's kernels are dense and depthwise (one channel per group)",
    )
    dense = np.zeros((k, cg * groups, *weight.shape[2:]), weight.dtype)
    kg = k // groups
    for g in range(groups):
        dense[g * kg : (g + 1) * kg, g * cg : (g + 1) * cg] = weight[g * kg : (g + 1) * kg]
    return im.constant(dense, f"{w}_dense")


def _transposed_conv2d(im, node, x, w, b, stride, padding, dilation, output_padding, groups, shape) -> str:
    """A transposed convolution as a plain one: x with stride-1 zeros between its elements and
    dilation*(kernel-1)-padding around them, by the flipped weight with its channel axes swapped."""
    weight = im.constant_array(w)
    _require(
        len(im.shape(x)) == 4 and groups == 1 and weight is not None,
        "a transposed convolution that is not 2-D, has groups or weights computed at run time",
    )
    stride, padding = ints(stride, 2, 1), ints(padding, 2, 0)
    dilation, extra = ints(dilation, 2, 1), ints(output_padding, 2, 0)
    kernel = weight.shape[2:]
    before = tuple(d * (r - 1) - p for d, r, p in zip(dilation, kernel, padding))
    _require(min(before) >= 0, "a transposed convolution with padding beyond its kernel (a crop)")
    n, c, h, wd = im.shape(x)
    spread = tuple((e - 1) * s + 1 + 2 * a + o for e, s, a, o in zip((h, wd), stride, before, extra))
    attrs = {"before": (0, 0, *before), "step": (1, 1, *stride), "value": 0.0}
    xs = im.emit("pad", [x], attrs, (n, c, *spread), _floating(im, x, w), base=f"{node.name}_spread")
    flipped = im.constant(np.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)), f"{w}_flipped")
    return _conv2d(im, node.name, xs, flipped, b, (1, 1), (0, 0), dilation, 1, shape)


def _channel_vector(im, v: str, rank: int) -> str:
    """A per-channel [C] value shaped [C, 1, ...] to broadcast over NC... data."""
    shape = (im.shape(v)[0],) + (1,) * (rank - 2)
    array = im.constant_array(v)
    if array is not None:
        return im.constant(array.reshape(shape), f"{v}_c")
    return im.view(v, shape)


@converts("aten._native_batch_norm_legit_no_training.default", items=(0,))
def batch_norm(im, node, x, weight, bias, mean, var, momentum, eps):
    """Inference batch norm as a per-channel scale and shift, computed once from the constants."""
    dtype = _floating(im, x)
    arrays = [im.constant_array(v) if v is not None else None for v in (weight, bias, mean, var)]
    _require(arrays[2] is not None and arrays[3] is not None)
    gamma = arrays[0] if weight is not None else np.ones_like(arrays[2])
    beta = arrays[1] if bias is not None else np.zeros_like(arrays[2])
    _require(gamma is not None and beta is not None)
    scale = (gamma.astype(np.float64) / np.sqrt(arrays[3].astype(np.float64) + eps)).astype(dtype)
    shift = (beta.astype(np.float64) - arrays[2].astype(np.float64) * scale).astype(dtype)
    rank = len(im.shape(x))
    s = im.constant(scale.reshape((-1,) + (1,) * (rank - 2)), f"{node.name}_scale")
    t = im.constant(shift.reshape((-1,) + (1,) * (rank - 2)), f"{node.name}_shift")
    y = im.emit("scale_shift", [x, s, t], {}, im.shape(x), dtype, base=node.name)
    return (y, None, None)


@converts("aten.layer_norm.default")
def layer_norm(im, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    dtype = _floating(im, x)
    _require(
        len(normalized_shape) == 1 and weight is not None and bias is not None,
        "a layer norm over more than the last axis or without weight and bias",
    )
    return im.emit("layer_norm", [x, weight, bias], {"eps": float(eps)}, im.shape(x), dtype, base=node.name)


@converts("aten.native_layer_norm.default", items=(0,))
def native_layer_norm(im, node, x, normalized_shape, weight, bias, eps):
    return (layer_norm(im, node, x, normalized_shape, weight, bias, eps), None, None)


@converts("aten._softmax.default")
def softmax(im, node, x, dim, half_to_float):
    dtype = _floating(im, x)
    _require(
        not half_to_float and dims(dim, len(im.shape(x))) == (len(im.shape(x)) - 1,),
        f"a softmax over axis {dim} of a {len(im.shape(x))}-D value: minitc's is over the last axis",
    )
    return im.emit("softmax", [x], {}, im.shape(x), dtype, base=node.name)


@converts("aten._safe_softmax.default")
def safe_softmax(im, node, x, dim, dtype=None):
    """The softmax of scaled_dot_product_attention: a fully masked row gives 0, not NaN."""
    _require(
        dtype is None and dims(dim, len(im.shape(x))) == (len(im.shape(x)) - 1,),
        f"a softmax over axis {dim} of a {len(im.shape(x))}-D value: minitc's is over the last axis",
    )
    return im.emit("softmax", [x], {"safe": True}, im.shape(x), _floating(im, x), base=node.name)


def _pool_shape(node) -> tuple:
    val = node.meta["val"]
    return tuple(int(d) for d in (val[0] if isinstance(val, (list, tuple)) else val).shape)


@converts("aten.max_pool2d_with_indices.default", items=(0,))
def max_pool2d(im, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    _require(
        not ceil_mode and ints(dilation, 2, 1) == (1, 1) and len(im.shape(x)) == 4,
        "a max pool in ceil mode, dilated or not 2-D",
    )
    kernel = ints(kernel, 2)
    attrs = {"kernel": kernel, "stride": ints(stride, 2, None) if stride else kernel, "padding": ints(padding, 2, 0)}
    return (im.emit("max_pool2d", [x], attrs, _pool_shape(node), _floating(im, x), base=node.name), None)


@converts("aten.avg_pool2d.default")
def avg_pool2d(im, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor=None):
    _require(
        not ceil_mode and count_include_pad and divisor is None and len(im.shape(x)) == 4,
        "an average pool in ceil mode, without the padding in its count, with a divisor or not 2-D",
    )
    kernel = ints(kernel, 2)
    attrs = {"kernel": kernel, "stride": ints(stride, 2, None) if stride else kernel, "padding": ints(padding, 2, 0)}
    return im.emit("avg_pool2d", [x], attrs, _pool_shape(node), _floating(im, x), base=node.name)


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
