"""Convolutions and pooling on NCHW data.

Stage naming: the main stage carries the operator's name (`conv2d`, `depthwise_conv2d`,
`max_pool2d`, `avg_pool2d`, or `name`); when padding > 0 a separate, select-guarded stage
`<name>_pad` comes first (zeros for convolutions and average pooling, the dtype's lowest value,
-inf for floats, for max pooling). Reduce axes are `rc` (input channel), `ry`, `rx` (window).
"""

from __future__ import annotations

from minitc import dtypes, te
from minitc.errors import ShapeError
from minitc.expr import select
from minitc.ops import _util
from minitc.te import Tensor, compute, reduce_axis


def pad_hw(X: Tensor, ph: int, pw: int, value, name: str) -> Tensor:
    """X [N, C, H, W, ...] padded by `ph` rows above and below and `pw` columns left and right
    with `value`, as a select-guarded stage; X itself when there is no padding. Axes after W
    (the channel block of NCHW[c] data) are carried along."""
    if ph == 0 and pw == 0:
        return X
    N, C, H, W, *block = X.shape

    def body(n, c, h, w, *rest):
        conds = []
        if ph:
            conds += [h >= ph, h < H + ph]
        if pw:
            conds += [w >= pw, w < W + pw]
        inside = conds[0]
        for cond in conds[1:]:
            inside = inside & cond
        return select(inside, X[(n, c, h - ph, w - pw, *rest)], value)

    return compute((N, C, H + 2 * ph, W + 2 * pw, *block), body, name=name, tag="pad", attrs={"padding": (ph, pw)})


WEIGHT_LAYOUTS = ("KCRS", "CRSK")


def conv2d(
    X, W, stride=1, padding=0, dilation=1, name: str | None = None, weight_layout: str = "KCRS", out_channels=None
) -> Tensor:
    """2-D convolution (cross-correlation, like torch.nn.functional.conv2d without groups).

    X [N, C, H, W], W [K, C, R, S] -> [N, K, OH, OW] with
    OH = (H + 2*pad_h - dil_h*(R-1) - 1) // stride_h + 1 (likewise OW).
    stride, padding and dilation are ints or (h, w) pairs. `weight_layout="CRSK"` takes W
    stored [C, R, S, K] (a constant weight repacked once by the model front end, so that the
    template can load vectors of output channels); its rows may be padded past the K =
    `out_channels` it computes (a row stride of a whole number of KiB puts every row's vectors
    in the same L1 sets).
    """
    op = "conv2d"
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ShapeError(f"{op}: weight_layout must be one of {', '.join(WEIGHT_LAYOUTS)}, got {weight_layout!r}")
    crsk = weight_layout == "CRSK"
    _util.rank(op, "X", X, 4, "NCHW")
    _util.rank(
        op,
        "W",
        W,
        4,
        "CRSK: [in_channels, kernel_h, kernel_w, out_channels]"
        if crsk
        else "KCRS: [out_channels, in_channels, kernel_h, kernel_w]",
    )
    sh, sw = _util.pair(op, "stride", stride)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    dh, dw = _util.pair(op, "dilation", dilation)
    N, C, H, Wd = X.shape
    C2, R, S, K = W.shape if crsk else (W.shape[1], W.shape[2], W.shape[3], W.shape[0])
    if out_channels is not None:
        if not (0 < out_channels <= K if crsk else out_channels == K):
            raise ShapeError(f"{op}: out_channels={out_channels} does not fit W {W.shape} ({weight_layout})")
        K = out_channels
    if C != C2:
        raise ShapeError(
            f"{op}: X {X.shape} has {C} input channels but W {W.shape} expects {C2} (W is [{', '.join(weight_layout)}])"
        )
    _util.numeric(op, X, W)
    OH = _util.out_size(op, "vertical", H, ph, R, sh, dh)
    OW = _util.out_size(op, "horizontal", Wd, pw, S, sw, dw)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")
    rc, ry, rx = reduce_axis(C, "rc"), reduce_axis(R, "ry"), reduce_axis(S, "rx")

    def body(n, k, oh, ow):
        x = P[n, rc, oh * sh + ry * dh, ow * sw + rx * dw]
        return te.sum(x * (W[rc, ry, rx, k] if crsk else W[k, rc, ry, rx]), axis=(rc, ry, rx))

    attrs = {"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw)}
    if crsk:  # the default layout is not named, so workload keys of KCRS convolutions stay as they were
        attrs["weight_layout"] = weight_layout
        if K != W.shape[3]:
            attrs["out_channels"] = K
    return compute((N, K, OH, OW), body, name=base, tag=op, attrs=attrs)


def conv2d_gemm(X, W, kernel_size, stride=1, padding=0, dilation=1, name: str | None = None) -> Tensor:
    """2-D convolution as an implicit GEMM (the formulation GPU libraries use beside the direct
    one): X [N, C, H, W] and W [K, C*R*S], a KCRS weight viewed as rows (`w.reshape(K, -1)`),
    give Y [N, K, OH*OW], the NCHW output viewed with its pixels flattened:

        Y[n, k, p] = sum_r W[k, r] * col[n, r, p]
        col[n, r, p] = Xpad[n, r // (R*S), (p // OW)*sh + (r // S % R)*dh, (p % OW)*sw + (r % S)*dw]

    `col` (the im2col matrix, tag "im2col") is a stage of its own so that a template can
    compute it inline into the fills of its shared tiles: it is never stored. `kernel_size` is
    R or (R, S); the rest as conv2d."""
    op = "conv2d_gemm"
    _util.rank(op, "X", X, 4, "NCHW")
    _util.rank(op, "W", W, 2, "[out_channels, in_channels * kernel_h * kernel_w]")
    _util.numeric(op, X, W)
    R, S = _util.pair(op, "kernel_size", kernel_size)
    sh, sw = _util.pair(op, "stride", stride)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    dh, dw = _util.pair(op, "dilation", dilation)
    N, C, H, Wd = X.shape
    K, CRS = W.shape
    if CRS != C * R * S:
        want = f"[K, C*R*S] = [K, {C * R * S}]"
        raise ShapeError(f"{op}: W {W.shape} must be {want} for X {X.shape} and a {R}x{S} window")
    OH = _util.out_size(op, "vertical", H, ph, R, sh, dh)
    OW = _util.out_size(op, "horizontal", Wd, pw, S, sw, dw)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")

    def gather(n, r, p):
        return P[n, r // (R * S), (p // OW) * sh + (r // S % R) * dh, (p % OW) * sw + (r % S) * dw]

    col = compute((N, CRS, OH * OW), gather, name=f"{base}_col", tag="im2col")
    rk = reduce_axis(CRS, "rk")
    attrs = {"kernel_size": (R, S), "stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw), "out_hw": (OH, OW)}
    return compute(
        (N, K, OH * OW), lambda n, k, p: te.sum(W[k, rk] * col[n, rk, p], axis=rk), name=base, tag=op, attrs=attrs
    )


def depthwise_conv2d(X, W, stride=1, padding=0, dilation=1, name: str | None = None) -> Tensor:
    """Depthwise 2-D convolution, torch's conv2d with groups=C.

    X [N, C, H, W]; W [C*m, 1, R, S] (torch layout; m is the channel multiplier, usually 1) or
    [C*m, R, S]. Output channel k reads input channel k // m. Output [N, C*m, OH, OW].
    """
    op = "depthwise_conv2d"
    _util.rank(op, "X", X, 4, "NCHW")
    _util.tensor(op, "W", W)
    if W.ndim == 4 and W.shape[1] != 1:
        raise ShapeError(f"{op}: W {W.shape} must be [C*m, 1, R, S] (torch's groups=C layout); its axis 1 must be 1")
    if W.ndim not in (3, 4):
        raise ShapeError(f"{op}: W must be [C*m, 1, R, S] or [C*m, R, S], got shape {W.shape}")
    sh, sw = _util.pair(op, "stride", stride)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    dh, dw = _util.pair(op, "dilation", dilation)
    N, C, H, Wd = X.shape
    K, R, S = W.shape[0], W.shape[-2], W.shape[-1]
    if K % C != 0:
        raise ShapeError(
            f"{op}: W {W.shape} has {K} output channels, not a multiple of the {C} input channels of X {X.shape}"
        )
    mult = K // C
    _util.numeric(op, X, W)
    OH = _util.out_size(op, "vertical", H, ph, R, sh, dh)
    OW = _util.out_size(op, "horizontal", Wd, pw, S, sw, dw)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")
    ry, rx = reduce_axis(R, "ry"), reduce_axis(S, "rx")

    def body(n, k, oh, ow):
        c = k if mult == 1 else k // mult
        x = P[n, c, oh * sh + ry * dh, ow * sw + rx * dw]
        w = W[k, 0, ry, rx] if W.ndim == 4 else W[k, ry, rx]
        return te.sum(x * w, axis=(ry, rx))

    return compute(
        (N, K, OH, OW), body, name=base, tag=op, attrs={"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw)}
    )


def _pool_args(op: str, X, kernel, stride, padding):
    _util.rank(op, "X", X, 4, "NCHW")
    kh, kw = _util.pair(op, "kernel", kernel)
    sh, sw = _util.pair(op, "stride", (kh, kw) if stride is None else stride)
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    if ph > kh // 2 or pw > kw // 2:
        raise ShapeError(
            f"{op}: padding {padding!r} must be at most half the kernel {kernel!r} (as in torch), "
            "otherwise a window can lie entirely in the padding"
        )
    OH = _util.out_size(op, "vertical", X.shape[2], ph, kh, sh)
    OW = _util.out_size(op, "horizontal", X.shape[3], pw, kw, sw)
    return kh, kw, sh, sw, ph, pw, OH, OW


def max_pool2d(X, kernel, stride=None, padding=0, name: str | None = None) -> Tensor:
    """Max pooling over kernel windows of X [N, C, H, W]; stride defaults to the kernel.
    Padding acts as -inf (it never wins), as in torch."""
    op = "max_pool2d"
    kh, kw, sh, sw, ph, pw, OH, OW = _pool_args(op, X, kernel, stride, padding)
    _util.numeric(op, X)
    base = name or op
    P = pad_hw(X, ph, pw, dtypes.min_value(X.dtype), f"{base}_pad")
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    N, C = X.shape[:2]
    return compute(
        (N, C, OH, OW),
        lambda n, c, oh, ow: te.max(P[n, c, oh * sh + ry, ow * sw + rx], axis=(ry, rx)),
        name=base,
        tag=op,
        attrs={"kernel": (kh, kw), "stride": (sh, sw), "padding": (ph, pw)},
    )


def avg_pool2d(X, kernel, stride=None, padding=0, name: str | None = None) -> Tensor:
    """Average pooling over kernel windows of X [N, C, H, W]; stride defaults to the kernel.
    Padded zeros count in the average (torch's default count_include_pad=True)."""
    op = "avg_pool2d"
    kh, kw, sh, sw, ph, pw, OH, OW = _pool_args(op, X, kernel, stride, padding)
    _util.floating(op, X)
    base = name or op
    P = pad_hw(X, ph, pw, 0, f"{base}_pad")
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    scale = 1.0 / (kh * kw)
    N, C = X.shape[:2]
    return compute(
        (N, C, OH, OW),
        lambda n, c, oh, ow: te.sum(P[n, c, oh * sh + ry, ow * sw + rx] * scale, axis=(ry, rx)),
        name=base,
        tag=op,
        attrs={"kernel": (kh, kw), "stride": (sh, sw), "padding": (ph, pw)},
    )
