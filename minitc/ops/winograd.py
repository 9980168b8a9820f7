"""3x3 convolutions by Winograd's minimal filtering, F(2x2, 3x3), on channel-blocked data.

A direct 3x3 convolution spends 9 multiply-adds per output pixel, input channel and output
channel. F(2x2, 3x3) computes each 2x2 tile of outputs from the 4x4 input patch under it with
16 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):

    V = B^T d B      the input patch d, transformed (additions only)
    U = G g G^T      the 3x3 filter g, transformed once at compile time (`winograd_weights`)
    M = sum over input channels of U * V, for each of the 16 positions of the 4x4 tile:
                     16 independent channel products, the whole cost (2.25x fewer than direct)
    Y = A^T M A      the 2x2 outputs (additions only)

    conv2d_winograd_nchwc  X [N, C/cb, H, W, cb], U [4, 4, K/kb, C/cb, cb, kb] -> [N, K/kb, OH, OW, kb]
    conv2d_winograd        X [N, C, H, W], U [4, 4, C, K] -> [N, K, OH, OW]   (the GPU's form)

Stride 1, no dilation; an odd output size is computed to the next even one and cut. The stages:
`<name>_pad` (the input, zero-padded to whole tiles), `<name>_input` (V, [N, 4, 4, C/cb, TH, TW,
cb]), `<name>_gemm` (M, tagged `winograd_gemm`, reduce axes `rc` and `rci`) and the output
transform `<name>`. The transforms are written as sums of the nonzero terms only, so the
kernel does no multiplications by 0 or 1; `reference.conv2d_winograd_nchwc` does the same
arithmetic in numpy, which also makes a NaN or an infinity spread as it does in the kernel: to
every output of a 2x2 tile whose 4x4 patch holds it (a direct convolution spreads it only to
the outputs whose 3x3 window holds it).

`conv2d_winograd` is the same arithmetic on plain NCHW data with the tiles of all images in one
column axis, so that the channel products are 16 ordinary matrix products, M[xi, nu] =
U[xi, nu]^T x V[xi, nu] ([C, K]^T x [C, tiles]), which the GPU's GEMM template runs. Its stages:
`<name>_patch` (each tile's 4x4 input patch, [C, N*TH*TW, 4, 4], the padding a select),
`<name>_input` (V, [4, 4, C, N*TH*TW]), `<name>_gemm` (M, [4, 4, K, N*TH*TW]) and the output
transform `<name>`.
"""

from __future__ import annotations

import numpy as np

from minitc import te
from minitc.errors import ShapeError
from minitc.expr import select
from minitc.ops import _util
from minitc.te import Tensor, compute, reduce_axis

TILE = 2  # outputs per tile side: F(2x2, 3x3)
PATCH = 4  # input patch side, TILE + 3 - 1
B_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))  # input transform
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))  # filter transform
A_T = ((1, 1, 1, 0), (0, 1, -1, -1))  # output transform


def combine(coefs, terms):
    """sum(c * t) over the nonzero coefficients (1 and -1 as an addition or a subtraction), for
    expressions and numpy arrays alike."""
    out = None
    for c, t in zip(coefs, terms):
        if c == 0:
            continue
        if out is None:
            out = t if c == 1 else -t
        else:
            out = out + t if c == 1 else out - t
    return out


def _pick(index, exprs: list):
    """exprs[index] for a loop index: a chain of selects that unrolling turns into one term."""
    out = exprs[-1]
    for v in range(len(exprs) - 2, -1, -1):
        out = select(index == v, exprs[v], out)
    return out


def tiles(out_size: int) -> int:
    return -(-out_size // TILE)


def winograd_weights(w, in_block: int, out_block: int) -> np.ndarray:
    """A 3x3 conv2d weight [K, C, 3, 3] -> U [4, 4, K/kb, C/cb, cb, kb] (G g G^T per filter)."""
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ShapeError(f"winograd_weights: expected a [K, C, 3, 3] weight, got {list(w.shape)}")
    k, c = w.shape[:2]
    if k % out_block or c % in_block:
        raise ShapeError(f"winograd_weights: {k} output and {c} input channels in blocks of {out_block} and {in_block}")
    g = np.asarray(G, np.float64)
    u = np.einsum("ai,kcij,bj->abkc", g, w.astype(np.float64), g)
    u = u.reshape(PATCH, PATCH, k // out_block, out_block, c // in_block, in_block)
    return np.ascontiguousarray(u.transpose(0, 1, 2, 4, 5, 3)).astype(w.dtype)


def winograd_weights_ck(w) -> np.ndarray:
    """A 3x3 conv2d weight [K, C, 3, 3] -> U [4, 4, C, K], the weight of `conv2d_winograd`."""
    k, c = np.shape(w)[:2]
    return winograd_weights(w, c, k).reshape(PATCH, PATCH, c, k)


def conv2d_winograd_nchwc(X, U, padding=1, name: str | None = None) -> Tensor:
    """A 3x3, stride-1 convolution of blocked data by F(2x2, 3x3): X [N, C/cb, H, W, cb] and
    the transformed weight U [4, 4, K/kb, C/cb, cb, kb] (`winograd_weights`) -> [N, K/kb, OH, OW, kb],
    the numbers of conv2d_nchwc on the untransformed weight, up to rounding."""
    op = "conv2d_winograd_nchwc"
    _util.rank(op, "X", X, 5, "NCHWc: [batch, channel blocks, height, width, channels per block]")
    _util.rank(op, "U", U, 6, "[4, 4, out blocks, in blocks, in channels per block, out per block]")
    N, CB, H, W, cb = X.shape
    if U.shape[:2] != (PATCH, PATCH) or U.shape[3:5] != (CB, cb):
        raise ShapeError(
            f"{op}: X {X.shape} has {CB} blocks of {cb} input channels; U must be "
            f"[4, 4, K/kb, {CB}, {cb}, kb] (winograd_weights), got {U.shape}"
        )
    _util.floating(op, X, U)  # the transformed weights are fractions
    KB, kb = U.shape[2], U.shape[5]
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    OH = _util.out_size(op, "vertical", H, ph, 3, 1, 1)
    OW = _util.out_size(op, "horizontal", W, pw, 3, 1, 1)
    TH, TW = tiles(OH), tiles(OW)
    base = name or op

    def pad_body(n, c, h, w, ci):
        inside = (h >= ph) & (h < H + ph) & (w >= pw) & (w < W + pw)
        return select(inside, X[n, c, h - ph, w - pw, ci], 0.0)

    shape = (N, CB, TILE * TH + 2, TILE * TW + 2, cb)
    P = compute(shape, pad_body, name=f"{base}_pad", tag="pad", attrs={"padding": (ph, pw)})

    def input_body(n, xi, nu, c, th, tw, ci):
        def d(i, j):
            return P[n, c, th * TILE + i, tw * TILE + j, ci]

        cols = [_pick(xi, [combine(row, [d(i, j) for i in range(PATCH)]) for row in B_T]) for j in range(PATCH)]
        return _pick(nu, [combine(row, cols) for row in B_T])

    V = compute((N, PATCH, PATCH, CB, TH, TW, cb), input_body, name=f"{base}_input", tag="winograd_input")
    rc, rci = reduce_axis(CB, "rc"), reduce_axis(cb, "rci")

    def gemm_body(n, xi, nu, k, th, tw, kl):
        return te.sum(V[n, xi, nu, rc, th, tw, rci] * U[xi, nu, k, rc, rci, kl], axis=(rc, rci))

    M = compute((N, PATCH, PATCH, KB, TH, TW, kb), gemm_body, name=f"{base}_gemm", tag="winograd_gemm")

    def output_body(n, k, oh, ow, kl):
        th, i, tw, j = oh // TILE, oh % TILE, ow // TILE, ow % TILE

        def m(xi, nu):
            return M[n, xi, nu, k, th, tw, kl]

        rows = [_pick(j, [combine(col, [m(xi, nu) for nu in range(PATCH)]) for col in A_T]) for xi in range(PATCH)]
        return _pick(i, [combine(col, rows) for col in A_T])

    attrs = {"stride": (1, 1), "padding": (ph, pw), "dilation": (1, 1)}
    return compute((N, KB, OH, OW, kb), output_body, name=base, tag=op, attrs=attrs)


def conv2d_winograd(X, U, padding=1, name: str | None = None) -> Tensor:
    """A 3x3, stride-1 convolution of NCHW data by F(2x2, 3x3): X [N, C, H, W] and the
    transformed weight U [4, 4, C, K] (`winograd_weights_ck`) -> [N, K, OH, OW], the numbers of
    conv2d on the untransformed weight, up to rounding."""
    op = "conv2d_winograd"
    _util.rank(op, "X", X, 4, "NCHW: [batch, channels, height, width]")
    _util.rank(op, "U", U, 4, "[4, 4, in channels, out channels] (winograd_weights_ck)")
    N, C, H, W = X.shape
    if U.shape[:3] != (PATCH, PATCH, C):
        raise ShapeError(
            f"{op}: X {X.shape} has {C} channels; U must be [4, 4, {C}, K] (winograd_weights_ck), got {U.shape}"
        )
    _util.floating(op, X, U)
    K = U.shape[3]
    ph, pw = _util.pair(op, "padding", padding, minimum=0)
    OH = _util.out_size(op, "vertical", H, ph, 3, 1, 1)
    OW = _util.out_size(op, "horizontal", W, pw, 3, 1, 1)
    TH, TW = tiles(OH), tiles(OW)
    base = name or op

    def patch_body(c, p, i, j):
        n, th, tw = p // (TH * TW), p // TW % TH, p % TW
        h, w = th * TILE + i - ph, tw * TILE + j - pw
        return select((h >= 0) & (h < H) & (w >= 0) & (w < W), X[n, c, h, w], 0.0)

    P = N * TH * TW
    D = compute((C, P, PATCH, PATCH), patch_body, name=f"{base}_patch", tag="winograd_patch")

    def input_body(xi, nu, c, p):
        cols = [_pick(xi, [combine(row, [D[c, p, i, j] for i in range(PATCH)]) for row in B_T]) for j in range(PATCH)]
        return _pick(nu, [combine(row, cols) for row in B_T])

    V = compute((PATCH, PATCH, C, P), input_body, name=f"{base}_input", tag="winograd_input")
    rc = reduce_axis(C, "rc")
    M = compute(
        (PATCH, PATCH, K, P),
        lambda xi, nu, k, p: te.sum(U[xi, nu, rc, k] * V[xi, nu, rc, p], axis=rc),
        name=f"{base}_gemm",
        tag="winograd_gemm",
    )

    def output_body(n, k, oh, ow):
        i, j, p = oh % TILE, ow % TILE, (n * TH + oh // TILE) * TW + ow // TILE

        def m(xi, nu):
            return M[xi, nu, k, p]

        rows = [_pick(j, [combine(col, [m(xi, nu) for nu in range(PATCH)]) for col in A_T]) for xi in range(PATCH)]
        return _pick(i, [combine(col, rows) for col in A_T])

    attrs = {"stride": (1, 1), "padding": (ph, pw), "dilation": (1, 1)}
    return compute((N, K, OH, OW), output_body, name=base, tag=op, attrs=attrs)
