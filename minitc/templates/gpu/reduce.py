"""GPU templates for softmax, layer_norm and reductions over the last axis: a block of
`threads` x `rows` threads handles `rows` rows, `threads` threads per row, with cross-thread
reductions (minitc/lowering/allreduce.py) and one launch for the whole operator.

softmax (layer_norm is the same with mean and variance for max and sum):

    for r_o in bind("blockIdx.x", R / rows): for r_i in bind("threadIdx.y", rows):
        mx = max over k of x[r, k]            # k = k_o * threads + k_i, k_i bound to threadIdx.x:
        sm = sum over k of exp(x[r, k] - mx)  # per-thread partials, then shuffles (+ shared memory)
        for j_o in range(N / threads): for j_i in bind("threadIdx.x", threads):
            y[r, j] = exp(x[r, j] - mx) / sm  # every thread holds mx and sm in registers

The exp stage is inlined (recomputed in the sum and the output: exp is cheap next to memory).
Each thread reads its strided share of the row, coalesced across the threads, three times;
the second and third reads hit L1 (a 512-float row is 2 KiB). A row sum is the output itself
reducing: one thread of each row group writes the total.

Short rows get one warp per row and several rows per block (no shared memory, no barrier);
long rows more threads. Any `threads` (up to 1024) and `rows` give a legal program: rows
shrink until the block has at most 1024 threads, and a split longer than the row is clipped.
Other axes (softmax over axis 0, sums over leading axes) keep the one-thread-per-element
binding of gpu_template_schedule.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.lowering.allreduce import WARP
from minitc.templates.elementwise import inline_producers
from minitc.templates.gpu.registry import MAX_THREADS, defaults, template
from minitc.templates.norm import producer, softmax_axis
from minitc.templates.reduce import contiguous_axis, contiguous_reduce_loop

BLOCK = 128  # threads per block of the defaults: 4 warps, many blocks per SM
PER_THREAD = 16  # elements of a row per thread (and pass) the defaults aim at


def _check(name: str, threads, rows) -> None:
    for what, v in (("threads", threads), ("rows", rows)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"GPU {name} template: {what} must be a positive int, got {v!r}")


def _legal(threads: int, rows: int) -> tuple:
    threads = min(threads, MAX_THREADS)
    return threads, max(1, min(rows, MAX_THREADS // threads))


def _row_loop(s, loops: list, rows: int):
    """Bind the (fused) row loops: `rows` rows a block along threadIdx.y; returns the loop that
    runs one row per thread group."""
    row = s.fuse(*loops) if len(loops) > 1 else loops[0]
    if rows == 1:
        s.bind(row, "blockIdx.x")
        return row
    ro, ri = s.split(row, factor=rows)
    s.bind(ro, "blockIdx.x")
    s.bind(ri, "threadIdx.y")
    return ri


def cross_thread(s, name: str, threads: int) -> None:
    """Split the stage's contiguous reduction loop by `threads` and bind the inner part to
    threadIdx.x: a cross-thread reduction (the other reduction loops stay serial)."""
    st = s.state.stage(name)
    red = [ref for ref, lp in zip(s.loops(name), st.loops) if lp.reduce]
    c = contiguous_reduce_loop(st, red)
    s.bind(s.split(c, factor=threads)[1], "threadIdx.x")


def row_statistics(s, out: str, stats: list, threads: int, rows: int) -> None:
    """`out` (normalising along its last axis) with its row statistics `stats` in one launch."""
    threads, rows = _legal(threads, rows)
    *outer, j = s.loops(out)
    if not outer:  # one row
        outer = [s.split(j, factor=s.state.stage(out).shape[0])[0]]
        j = s.loops(out)[-1]
    at = _row_loop(s, outer, rows)
    s.bind(s.split(j, factor=threads)[1], "threadIdx.x")
    for name in stats:
        s.compute_at(name, at)
        cross_thread(s, name, threads)


@template("softmax")
def schedule_softmax(s, out, target, threads=WARP, rows=4):
    """softmax over the last axis in one launch: `rows` rows a block, `threads` threads a row."""
    _check("softmax", threads, rows)
    exp = producer(s, out, "softmax_exp")
    stats = [producer(s, exp, "softmax_max"), producer(s, out, "softmax_sum")]
    st = s.state.stage(out)
    if len(st.shape) > 1 and softmax_axis(s, out) != len(st.shape) - 1:
        inline_producers(s, out)  # another axis: one thread per element, a launch per stage
        return
    s.compute_inline(exp)
    row_statistics(s, out, stats, threads, rows)


@template("layer_norm")
def schedule_layer_norm(s, out, target, threads=WARP, rows=4):
    """layer_norm in one launch: mean and variance by cross-thread reductions, `rows` rows a
    block, `threads` threads a row."""
    _check("layer_norm", threads, rows)
    stats = [producer(s, out, "layer_norm_mean"), producer(s, out, "layer_norm_var")]
    row_statistics(s, out, stats, threads, rows)


@template("reduce")
def schedule_reduce(s, out, target, threads=WARP, rows=4):
    """sum/max/min/mean whose contiguous axis is reduced: `threads` threads reduce a row
    together, `rows` rows a block; otherwise one thread per output element."""
    _check("reduce", threads, rows)
    st = s.state.stage(out)
    if contiguous_axis(st)[0] != "reduced":
        return  # the kept contiguous axis: gpu_template_schedule's flat binding coalesces
    threads, rows = _legal(threads, rows)
    spatial = [ref for ref, lp in zip(s.loops(out), st.loops) if not lp.reduce]
    if spatial:
        _row_loop(s, spatial, rows)
    cross_thread(s, out, threads)


def pick(row: int) -> dict:
    """One warp a row for rows of up to 32 x PER_THREAD elements (no shared memory, no
    barrier), four rows a block; longer rows more threads, PER_THREAD elements each, up to
    1024, with BLOCK threads a block at least."""
    threads = WARP
    while threads < MAX_THREADS and threads * PER_THREAD < row:
        threads *= 2
    return {"threads": threads, "rows": max(1, BLOCK // threads)}


def _row_length(s, out: str, tag: str) -> int:
    st = s.state.stage(out if tag == "reduce" else producer(s, out, tag))
    return contiguous_reduce_loop(st, list(st.reduce_axes)).extent if st.reduce_axes else 1


@defaults("softmax")
def softmax_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "softmax_sum"))


@defaults("layer_norm")
def layer_norm_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "layer_norm_mean"))


@defaults("reduce")
def reduce_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "reduce"))
