"""conv2d vectorized over output channels, for weights stored [C, R, S, K] (`weight_layout="CRSK"`,
which the model front end packs once for a constant weight).

The row template (conv.py) puts output columns in vector lanes, which wastes lanes when a row
is not a multiple of the vector width (ResNet's 7-, 14- and 28-wide rows on AVX-512) and
gathers lanes when the stride is 2. Here the lanes hold `lanes` consecutive output channels,
whatever the row: each reduction step loads kb weight vectors W[c, ry, rx, k : k + kb*lanes],
broadcasts owv input pixels and does owv x kb FMAs into an accumulator tile stored
[n, oh, ow, k] (cache_write with a layout), which the copy-out transposes back into NCHW while
applying the fused epilogue.

    pad (once, parallel over channels)
    for n_oh_o_k_o in parallel(N * OH/ohb * K/(kgroups*kb*lanes)):
        acc[ohb, OW, kgroups*kb*lanes] = 0
        for rc_o, oh, ow_o, kg:                      # the weight block of rc_o is reused across rows
            for rc_i, ry, rx:
                for ow, kv in unrolled(owv), unrolled(kb):
                    acc[oh, ow_o*owv + ow, (kg*kb + kv)*lanes : +lanes] += pad[rc, oh*sh + ry.., ..] * W[rc, ry, rx, ..]
        out[n, k_o.., oh_o.., :] = epilogue(acc[.., .., ..])

Parameters are those of the row template, read for channels: kb = channel vectors and owv =
output columns of the micro-kernel, ohb = output rows and kgroups = micro-kernel channel blocks
per parallel task, lanes = channels per vector, rcb = input channels per reduction block.
"""

from __future__ import annotations

from minitc.templates.gemm import cache_under_epilogue
from minitc.templates.gemm_blocking import kernel_efficiency

MAX_ACCUMULATORS = 14  # with more, LLVM spills: 7 x 4 zmm left no register for a fifth operand


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def channel_vectors_pay(target, dtype: str, weight_shape: tuple, out_width: int, stride: int) -> bool:
    """Whether a convolution with a [K, C, R, S] weight should keep output channels in vector
    lanes rather than output columns. The channels must fill whole vectors; then a stride
    (row vectors would be gathers) or a row that is not whole vectors decides, except that a
    1x1 convolution needs rows narrower than a vector and 128 input channels or more: on wide
    or shallow 1x1 layers the row template measured as fast or faster on whole models
    (docs/benchmarks.md)."""
    K, C, R, S = weight_shape
    width = target.lanes(dtype)
    if K % width:
        return False
    if stride > 1:
        return True
    if out_width % width == 0:
        return False
    return R * S > 1 or (out_width < width and C >= 128)


def unroll_micro_kernel(s, window: tuple, unroll_window: bool, unrolled: tuple, lanes_loop) -> None:
    """The micro-kernel's loops: the window's (ry, rx) unrolled when `unroll_window`, the
    register tile's loops unrolled, the lanes vectorized."""
    if unroll_window:
        for loop in window:
            s.unroll(loop)
    for loop in unrolled:
        s.unroll(loop)
    s.vectorize(lanes_loop)


def schedule_conv2d_channels(s, out, conv, kb, ohb, owv, lanes, rcb, kgroups, unroll_window):
    """The schedule (see the module docstring) but for the padding, which the caller places at
    the parallel loop returned; `conv` is the convolution stage under `out`'s epilogue (or `out`
    itself)."""
    C = s.state.stage(conv).reduce_axes[0].extent
    acc = cache_under_epilogue(s, out, conv, layout=(0, 2, 3, 1))

    n, k, oh, ow = s.loops(out)
    ko, ki = s.split(k, factor=kgroups * kb * lanes)
    oho, ohi = s.split(oh, factor=ohb)
    s.reorder(n, oho, ko, ohi, ki, ow)  # the copy-out stores whole output rows
    tile = s.fuse(n, oho, ko)
    s.parallel(tile)

    s.compute_at(acc, tile)
    an, aoh, aow, ak, rc, ry, rx = s.loops(acc)
    wo, wi = s.split(aow, factor=owv)
    kv, kl = s.split(ak, factor=lanes)
    kg, kvi = s.split(kv, factor=kb)
    rco, rci = s.split(rc, factor=rcb or C)
    s.reorder(an, rco, aoh, wo, kg, rci, ry, rx, wi, kvi, kl)
    unroll_micro_kernel(s, (ry, rx), unroll_window, (wi, kvi), kl)
    return tile


def channel_defaults(s, conv, target) -> dict:
    """The micro-kernel that best hides the FMA latency and keeps its loads up
    (gemm_blocking.kernel_efficiency), then with the most FMAs per load, that fits the registers
    (accumulators, kb weight vectors and a broadcast, at most MAX_ACCUMULATORS accumulators) among the tiles that
    divide the row and the channel vectors; the reduction block whose weights and input rows fit half the L1d; the
    most rows per task that still leave four tasks per core."""
    st = s.state.stage(conv)
    N, K, OH, OW = st.shape
    C, R, S = (a.extent for a in st.reduce_axes)
    attrs = s.tensor(conv).op.attrs
    (_, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    lanes = target.lanes(st.dtype)
    vectors = max(1, _cdiv(K, lanes))
    # tiles that divide the row and the channels: a partial tile puts a guard in the micro-kernel
    columns = [d for d in range(1, min(OW, 8) + 1) if OW % d == 0]
    blocks = [d for d in range(1, min(4, vectors) + 1) if vectors % d == 0 and K % lanes == 0] or [1]
    best = None
    for kb in blocks:
        for owv in columns:
            acc = kb * owv
            if acc > MAX_ACCUMULATORS or acc + kb + 3 > target.vector_registers:
                continue
            # latency hidden and loads keeping up first (the hardware's figures), then the most
            # FMAs per load: kb weight vectors and owv input broadcasts per step
            eff = kernel_efficiency(target.hardware, acc, kb, owv)
            key = (round(eff, 3), round(acc / (owv + kb), 3), acc)
            if best is None or key > best[0]:
                best = (key, dict(kb=kb, owv=owv))
    kb, owv = best[1]["kb"], best[1]["owv"]
    threads = max(1, target.num_cores)
    kblocks = _cdiv(K, kb * lanes)
    ohb = max(d for d in range(1, OH + 1) if OH % d == 0 and (N * (OH // d) * kblocks >= 4 * threads or d == 1))
    in_rows = (R - 1) * dh + 1  # the rows one output row reads: a block sweeps the tile row by row
    in_cols = (OW - 1) * sw + (S - 1) * dw + 1
    per_channel = 4 * (R * S * kb * lanes + in_rows * in_cols)
    rcb = max([d for d in range(1, C + 1) if C % d == 0 and d * per_channel <= target.cache_bytes("l1d") // 2] or [1])
    return dict(kb=kb, ohb=ohb, owv=owv, lanes=lanes, rcb=rcb, kgroups=1, unroll_window=R * S <= 25, pad="root")
