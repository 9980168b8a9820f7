"""Schedule templates for channel-blocked data (minitc/ops/nchwc.py): `conv2d_nchwc`, and one
sliding-window template for `depthwise_conv2d_nchwc`, `max_pool2d_nchwc` and
`avg_pool2d_nchwc`. Each may sit under a fused elementwise epilogue (bias, residual add,
activation), applied as the accumulator tile is stored.

conv2d_nchwc: a parallel task owns `kb` output-channel blocks of `ohb` output rows (with
`rows_task`, `ohb` rows of every block, running the kb-block groups one after another). Its
accumulator tile [ohb, OW, kb x block] lives in a local buffer; the micro-kernel keeps
`pixels` x kb vectors of one block each in registers and, for each input channel of a
reduction block (`rcb` input blocks), broadcasts `pixels` input values and loads kb weight
vectors (kb x pixels FMAs):

    pad (once, parallel over channel blocks)
    for n_k_o_oh_o in parallel(N * K/(kb*block) * OH/ohb):
        acc[ohb, OW, kb, block] = 0
        for rc_o, oh, ow_o:
            for rc_i, ry, rx, rci:
                for ow, k in unrolled(pixels), unrolled(kb):
                    acc[oh, ow_o*pixels + ow, k, :] += pad[n, rc, .., .., rci] * W[k, rc, ry, rx, rci, :]
        out[n, k_o*kb : +kb, oh_o*ohb : +ohb, :, :] = epilogue(acc)

When the reduction is one block (rcb 0, or at least all input blocks), there is nothing to keep
between blocks: each micro-tile runs the whole reduction in registers and is stored through the
epilogue at once, with no accumulator tile in memory (ResNet-50's expanding 1x1 layers and
MobileNet-V2's pointwise ones gain most).

The window template: a task per (image, channel block, `oht` output rows), an accumulator of
`pixels` vectors per row swept over the unrolled window.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.templates.conv import KB, OHB, OHT, PAD, RCB, UNROLL_WINDOW, _place_pad, find_pad_stage
from minitc.templates.conv_channels import MAX_ACCUMULATORS, unroll_micro_kernel
from minitc.templates.gemm import cache_under_epilogue, epilogue_anchor
from minitc.templates.gemm_blocking import kc_from_l1, kernel_efficiency
from minitc.templates.params import SWITCH, Ints, Param
from minitc.templates.registry import defaults, template

PIXELS = Param("pixels", "output columns per micro-kernel", Ints(1, 4096),
               "the micro-tile with the most FMAs per load whose accumulators fit the registers, dividing the row",
               candidates=(2, 4, 6, 7, 8, 14))  # fmt: skip
ROWS_TASK = Param("rows_task", "tasks over output rows only, each running every output-channel group", SWITCH,
                  "true where tasks over row blocks read less than tasks over channel groups (4 per core)")  # fmt: skip
NCHWC_PARAMS = (KB, PIXELS, OHB, RCB, UNROLL_WINDOW, PAD, ROWS_TASK)
NCHWC_WINDOW_PARAMS = (OHT, PIXELS, UNROLL_WINDOW, PAD)

WINDOW_TAGS = ("depthwise_conv2d_nchwc", "max_pool2d_nchwc", "avg_pool2d_nchwc")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _registers_per_vector(target, dtype: str, block: int) -> int:
    return _cdiv(block * dtypes.bits(dtype), target.vector_bits)


@template("conv2d_nchwc", NCHWC_PARAMS)
def schedule_conv2d_nchwc(
    s, out, target, kb=2, pixels=7, ohb=1, rcb=0, unroll_window=True, pad="root", rows_task=False
):
    """kb: output-channel blocks and pixels: output columns of the micro-kernel; ohb: output
    rows per task; rcb: input-channel blocks per reduction block (0: all); unroll_window:
    unroll ry and rx; pad: "root", "tile" or "inline"; rows_task: tasks over row blocks only,
    each running every group of kb output blocks over its rows."""
    conv = epilogue_anchor(s, out, "conv2d_nchwc", "conv2d_nchwc")
    blocks = s.state.stage(conv).reduce_axes[0].extent
    pad_stage = find_pad_stage(s, conv)
    acc = cache_under_epilogue(s, out, conv)
    n, k, oh, ow, kl = s.loops(out)
    ko, ki = s.split(k, factor=kb)
    oho, ohi = s.split(oh, factor=ohb)
    if rows_task:
        s.reorder(n, oho, ko, ki, ohi, ow, kl)
        tile = s.fuse(n, oho)
    else:
        s.reorder(n, ko, oho, ki, ohi, ow, kl)
        tile = s.fuse(n, ko, oho)
    s.parallel(tile)
    s.vectorize(kl)
    _place_pad(s, pad_stage, pad, tile, s.state.stage(conv).shape[-1])

    if rcb and rcb < blocks:  # a split reduction: the task's whole tile accumulates in a buffer
        s.compute_at(acc, ko if rows_task else tile)
        an, ak, aoh, aow, akl, rc, ry, rx, rci = s.loops(acc)
        wo, wi = s.split(aow, factor=pixels)
        rco, rcin = s.split(rc, factor=rcb)
        s.reorder(an, rco, aoh, wo, rcin, ry, rx, rci, wi, ak, akl)
        unroll_micro_kernel(s, (ry, rx), unroll_window, (wi, ak), akl)
        return
    # one pass over the reduction: a micro-tile is finished in registers and stored at once
    wo, wi = s.split(ow, factor=pixels)
    s.reorder(*((tile, ko) if rows_task else (tile,)), ohi, wo, ki, wi, kl)
    s.unroll(ki)
    s.unroll(wi)
    s.compute_at(acc, wo)
    an, ak, aoh, aow, akl, rc, ry, rx, rci = s.loops(acc)
    s.reorder(an, aoh, rc, ry, rx, rci, aow, ak, akl)
    unroll_micro_kernel(s, (ry, rx), unroll_window, (aow, ak), akl)


def micro_tile(blocks: int, width: int, regs: int, target) -> tuple:
    """(kb, pixels): the micro-kernel of kb output-channel blocks (dividing `blocks`) by `pixels`
    columns (dividing `width`) that best hides the FMA latency and keeps its loads up
    (gemm_blocking.kernel_efficiency), then with the most FMAs per load, whose accumulators, weight vectors
    and a broadcast fit the registers, at most MAX_ACCUMULATORS accumulators."""
    best = None
    for kb in (d for d in range(1, min(blocks, 4) + 1) if blocks % d == 0):
        for pixels in (d for d in range(1, min(width, 14) + 1) if width % d == 0):
            acc = kb * pixels * regs
            if acc > MAX_ACCUMULATORS or acc + kb * regs + 1 > target.vector_registers - 2:
                continue
            # latency hidden and loads keeping up first (the hardware's figures), then the most
            # FMAs per load: kb x regs weight vectors and `pixels` input broadcasts per step
            eff = kernel_efficiency(target.hardware, acc, kb * regs, pixels)
            key = (round(eff, 3), round(kb * pixels / (pixels + kb * regs), 3), acc)
            if best is None or key > best[0]:
                best = (key, (kb, pixels))
    return best[1] if best else (1, 1)


@defaults("conv2d_nchwc")
def conv2d_nchwc_defaults(s, out, target) -> dict:
    """The micro-kernel with the most FMAs per load whose accumulators, weight vectors and a
    broadcast fit the registers (at most MAX_ACCUMULATORS accumulators), among tiles that
    divide the row and the channel blocks; the most rows per task whose accumulator tile stays
    within half the L1d while leaving four tasks per core; tasks over row blocks where they
    read less (_rows_task); for a window (3x3, 7x7), the reduction block whose weights and
    input rows fit half the L1d, and for a 1x1 one pass over the reduction where the task's
    weights fit the L1d, else the BLIS kc (_pointwise_blocks)."""
    conv = epilogue_anchor(s, out, "conv2d_nchwc", "conv2d_nchwc")
    st = s.state.stage(conv)
    N, KB, OH, OW, block = st.shape
    CB, R, S, cb = (a.extent for a in st.reduce_axes)
    attrs = s.tensor(conv).op.attrs
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    regs = _registers_per_vector(target, st.dtype, block)
    kb, pixels = micro_tile(KB, OW, regs, target)
    bytes_ = dtypes.bits(st.dtype) // 8
    half_l1 = target.cache_bytes("l1d") // 2
    threads = max(1, target.num_cores)
    groups = _cdiv(KB, kb)

    def rows_per_task(tasks_per_row: int) -> int:
        rows = [d for d in range(1, OH + 1) if OH % d == 0]
        fits = [d for d in rows if d * OW * kb * block * bytes_ <= half_l1 and tasks_per_row * (OH // d) >= 4 * threads]
        return max(fits or [1])

    ohb = rows_per_task(N * groups)
    row_ohb = rows_per_task(N)
    input_bytes = bytes_ * N * CB * cb * OH * OW * sh * sw
    weight_bytes = bytes_ * KB * block * CB * cb * R * S
    rows_task = _rows_task(input_bytes, weight_bytes, groups, N * (OH // row_ohb), threads)
    if rows_task:
        ohb = row_ohb
    in_cols = (OW - 1) * sw + (S - 1) * dw + 1
    per_block = bytes_ * cb * (R * S * kb * block + ((R - 1) * dh + 1) * in_cols)
    fitting = [d for d in range(1, CB + 1) if CB % d == 0 and d * per_block <= half_l1]
    rcb = max(fitting or [1]) if R * S > 1 else _pointwise_blocks(target, CB, cb, kb * block, pixels, bytes_)
    # an input block narrower than a vector (a stem's 3 colours) pads in short rows that fill
    # no vector: reading through the select costs less than that copy
    pad = "inline" if cb < target.lanes(st.dtype) else "root"
    return dict(
        kb=kb,
        pixels=pixels,
        ohb=ohb,
        rcb=0 if rcb == CB else rcb,
        unroll_window=R * S <= 25,
        pad=pad,
        rows_task=rows_task,
    )


def _rows_task(input_bytes: int, weight_bytes: int, groups: int, row_tasks: int, threads: int) -> bool:
    """Whether tasks over row blocks, each running every group of output blocks, read less than
    tasks over channel groups: those read the input once per group and the weights once, these
    the input once and the weights once per row block (ResNet-50's 1x1 layers at 56x56 and
    28x28 on the Intel Xeon: the model 30.7 -> 29.2 ms, docs/models.md). Only with four row
    tasks per core."""
    return row_tasks >= 4 * threads and input_bytes * groups > weight_bytes * row_tasks


def _pointwise_blocks(target, CB: int, cb: int, nr: int, pixels: int, bytes_: int) -> int:
    """Input blocks per reduction block of a 1x1 convolution, a GEMM whose micro-kernel reads a
    kc x nr weight panel (nr = kb x block) and broadcasts `pixels` inputs per k. Its whole
    reduction in one pass where the task's weights fit the L1d: every micro-tile then finds
    them there. Else each micro-tile would stream all of them from L2 besides its inputs, and
    the reduction is blocked as BLIS blocks k (gemm_blocking.kc_from_l1): a block of weights
    stays in L1 for all the task's pixels, for one round trip of the accumulators per block
    (ResNet-50's 1x1 layers over 512-2048 channels on the Intel Xeon: the model 30.0 -> 28.8
    ms, docs/models.md)."""
    if CB * cb * nr * bytes_ <= target.cache_bytes("l1d"):
        return CB
    kc = kc_from_l1(target.hardware, pixels, nr, bytes_)
    return max([d for d in range(1, CB + 1) if CB % d == 0 and d * cb <= kc] or [1])


def _window_schedule(s, out, target, tag, oht, pixels, unroll_window, pad):
    op = epilogue_anchor(s, out, tag, tag)
    pad_stage = find_pad_stage(s, op)
    acc = cache_under_epilogue(s, out, op)
    n, k, oh, ow, kl = s.loops(out)
    oho, ohi = s.split(oh, factor=oht)
    s.reorder(n, k, oho, ohi, ow, kl)
    tile = s.fuse(n, k, oho)
    s.parallel(tile)
    s.vectorize(kl)
    _place_pad(s, pad_stage, pad, tile, s.state.stage(op).shape[-1])

    s.compute_at(acc, tile)
    an, ak, aoh, aow, akl, ry, rx = s.loops(acc)
    wo, wi = s.split(aow, factor=pixels)
    s.reorder(an, ak, aoh, wo, ry, rx, wi, akl)
    unroll_micro_kernel(s, (ry, rx), unroll_window, (wi,), akl)


def _window_defaults(tag):
    def choose(s, out, target) -> dict:
        """`pixels`: the most output columns dividing the row whose accumulators fill half the
        registers; `oht`: the most rows whose accumulator tile stays within half the L1d while
        leaving four tasks per core; a depthwise convolution reads its padding inside the
        loads, a pool pads each task's rows first (as measured inside models, docs/models.md)."""
        st = s.state.stage(epilogue_anchor(s, out, tag, tag))
        N, CB, OH, OW, block = st.shape
        R, S = (a.extent for a in st.reduce_axes)
        regs = _registers_per_vector(target, st.dtype, block)
        pixels = max(d for d in range(1, OW + 1) if OW % d == 0 and d * regs <= target.vector_registers // 2)
        bytes_ = dtypes.bits(st.dtype) // 8
        threads = max(1, target.num_cores)
        rows = [
            d
            for d in range(1, OH + 1)
            if OH % d == 0
            and d * OW * block * bytes_ <= target.cache_bytes("l1d") // 2
            and N * CB * (OH // d) >= 4 * threads
        ]
        pad = "inline" if tag == "depthwise_conv2d_nchwc" else "tile"
        return dict(oht=max(rows or [1]), pixels=pixels, unroll_window=R * S <= 49, pad=pad)

    return choose


def _register_window(tag):
    @template(tag, NCHWC_WINDOW_PARAMS)
    def schedule(s, out, target, oht=1, pixels=7, unroll_window=True, pad="tile"):
        """oht: output rows per task; pixels: output columns per accumulator tile;
        unroll_window: unroll ry and rx; pad: "tile", "inline" or "root"."""
        _window_schedule(s, out, target, tag, oht, pixels, unroll_window, pad)

    schedule.__name__ = f"schedule_{tag}"
    defaults(tag)(_window_defaults(tag))


for _tag in WINDOW_TAGS:
    _register_window(_tag)
