"""Convolutions and pooling on channel-blocked data, NCHW[c]: X [N, C/c, H, W, c].

A block of `c` consecutive channels is the innermost axis, so a kernel that keeps a vector of
output channels per register loads its weights as whole vectors, broadcasts one input value
per pixel and channel, and stores whole output vectors without a transpose; the next
convolution reads that layout as it is. The model front end converts a CNN to it once
(minitc/frontend/layout.py), as ONNX Runtime's NCHWc transformer and oneDNN's blocked formats
do. Channel `k` of NCHW is block `k // c`, lane `k % c`.

    conv2d_nchwc            X [N, C/cb, H, W, cb], W [K/kb, C/cb, R, S, cb, kb] -> [N, K/kb, OH, OW, kb]
    depthwise_conv2d_nchwc  X [N, C/c, H, W, c],   W [C/c, R, S, c]              -> [N, C/c, OH, OW, c]
    max_pool2d_nchwc, avg_pool2d_nchwc (X, kernel, stride=None, padding=0)        -> [N, C/c, OH, OW, c]

Stage names and reduce axes are those of the NCHW operators (minitc/ops/nn.py): `<name>_pad`,
`rc` (input channel block), `ry`, `rx`, and for conv2d_nchwc `rci` (the channel within a block).
"""

from __future__ import annotations

from minitc import dtypes, te
from minitc.errors import ShapeError
from minitc.ops import _util
from minitc.ops.nn import pad_hw
from minitc.te import Tensor, compute, reduce_axis


def _window(op: str, H: int, W: int, R: int, S: int, stride, padding, dilation) -> tuple:
    sh, sw = _util.pair(op, "stride", stride)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    dh, dw = _util.pair(op, "dilation", dilation)
    OH = _util.out_size(op, "vertical", H, ph, R, sh, dh)
    OW = _util.out_size(op, "horizontal", W, pw, S, sw, dw)
    return (sh, sw), (ph, pw), (dh, dw), OH, OW


def conv2d_nchwc(X, W, stride=1, padding=0, dilation=1, name: str | None = None) -> Tensor:
    """2-D convolution of blocked data: X [N, C/cb, H, W, cb], W [K/kb, C/cb, R, S, cb, kb]
    -> [N, K/kb, OH, OW, kb], the same numbers as conv2d on the unblocked tensors."""
    op = "conv2d_nchwc"
    _util.rank(op, "X", X, 5, "NCHWc: [batch, channel blocks, height, width, channels per block]")
    _util.rank(op, "W", W, 6, "[out blocks, in blocks, kernel_h, kernel_w, in channels per block, out per block]")
    N, CB, H, Wd, cb = X.shape
    KB, CB2, R, S, cb2, kb = W.shape
    if (CB, cb) != (CB2, cb2):
        raise ShapeError(
            f"{op}: X {X.shape} has {CB} blocks of {cb} input channels but W {W.shape} expects {CB2} of {cb2}"
        )
    _util.numeric(op, X, W)
    (sh, sw), (ph, pw), (dh, dw), OH, OW = _window(op, H, Wd, R, S, stride, padding, dilation)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")
    rc, ry, rx, rci = reduce_axis(CB, "rc"), reduce_axis(R, "ry"), reduce_axis(S, "rx"), reduce_axis(cb, "rci")

    def body(n, k, oh, ow, kl):
        x = P[n, rc, oh * sh + ry * dh, ow * sw + rx * dw, rci]
        return te.sum(x * W[k, rc, ry, rx, rci, kl], axis=(rc, ry, rx, rci))

    attrs = {"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw)}
    return compute((N, KB, OH, OW, kb), body, name=base, tag=op, attrs=attrs)


def depthwise_conv2d_nchwc(X, W, stride=1, padding=0, dilation=1, name: str | None = None) -> Tensor:
    """Depthwise convolution (channel multiplier 1) of blocked data: X [N, C/c, H, W, c],
    W [C/c, R, S, c] -> [N, C/c, OH, OW, c]."""
    op = "depthwise_conv2d_nchwc"
    _util.rank(op, "X", X, 5, "NCHWc")
    _util.rank(op, "W", W, 4, "[channel blocks, kernel_h, kernel_w, channels per block]")
    N, CB, H, Wd, c = X.shape
    if (W.shape[0], W.shape[3]) != (CB, c):
        raise ShapeError(
            f"{op}: X {X.shape} has {CB} blocks of {c} channels but W {W.shape} has {W.shape[0]} of {W.shape[3]}"
        )
    _util.numeric(op, X, W)
    R, S = W.shape[1], W.shape[2]
    (sh, sw), (ph, pw), (dh, dw), OH, OW = _window(op, H, Wd, R, S, stride, padding, dilation)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")
    ry, rx = reduce_axis(R, "ry"), reduce_axis(S, "rx")

    def body(n, k, oh, ow, kl):
        return te.sum(P[n, k, oh * sh + ry * dh, ow * sw + rx * dw, kl] * W[k, ry, rx, kl], axis=(ry, rx))

    attrs = {"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw)}
    return compute((N, CB, OH, OW, c), body, name=base, tag=op, attrs=attrs)


def _pool(op: str, X, kernel, stride, padding, name, pad_value, combine, scale=None) -> Tensor:
    _util.rank(op, "X", X, 5, "NCHWc")
    kh, kw = _util.pair(op, "kernel", kernel)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    if ph > kh // 2 or pw > kw // 2:
        raise ShapeError(f"{op}: padding {padding!r} must be at most half the kernel {kernel!r} (as in torch)")
    N, CB, H, Wd, c = X.shape
    (sh, sw), _, _, OH, OW = _window(op, H, Wd, kh, kw, (kh, kw) if stride is None else stride, padding, 1)
    base = name or op
    P = pad_hw(X, ph, pw, pad_value, f"{base}_pad")
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")

    def body(n, k, oh, ow, kl):
        x = P[n, k, oh * sh + ry, ow * sw + rx, kl]
        return combine(x if scale is None else x * scale, axis=(ry, rx))

    attrs = {"kernel": (kh, kw), "stride": (sh, sw), "padding": (ph, pw)}
    return compute((N, CB, OH, OW, c), body, name=base, tag=op, attrs=attrs)


def max_pool2d_nchwc(X, kernel, stride=None, padding=0, name: str | None = None) -> Tensor:
    """Max pooling of blocked data X [N, C/c, H, W, c]; padding never wins, as in torch."""
    _util.numeric("max_pool2d_nchwc", X)
    return _pool("max_pool2d_nchwc", X, kernel, stride, padding, name, dtypes.min_value(X.dtype), te.max)


def avg_pool2d_nchwc(X, kernel, stride=None, padding=0, name: str | None = None) -> Tensor:
    """Average pooling of blocked data X [N, C/c, H, W, c]; padded zeros count in the average."""
    _util.floating("avg_pool2d_nchwc", X)
    kh, kw = _util.pair("avg_pool2d_nchwc", "kernel", kernel)
    return _pool("avg_pool2d_nchwc", X, kernel, stride, padding, name, 0, te.sum, 1.0 / (kh * kw))
