"""ATen convolution, normalisation (batch norm, layer norm, softmax) and pooling to graph nodes."""

from __future__ import annotations

import numpy as np

from minitc.frontend.aten_common import _floating, _require, converts, dims, ints


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
