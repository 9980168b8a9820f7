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

A reduction over several trailing axes that are contiguous in memory (a global average pool,
`x.mean((2, 3))` of NCHW data) fuses them first, so that the threads of a row span all of the
H*W values of an output, not only the W of one image row.

Short rows get one warp per row and several rows per block (no shared memory, no barrier);
long rows more threads. Any `threads` (up to 1024) and `rows` give a legal program: rows
shrink until the block has at most 1024 threads, and a split longer than the row is clipped.
Other axes (softmax over axis 0, sums over leading axes) keep the one-thread-per-element
binding of gpu_template_schedule.
"""

from __future__ import annotations

import math

from minitc.errors import ScheduleError
from minitc.expr import IterVar, walk
from minitc.lowering.allreduce import WARP
from minitc.templates.elementwise import inline_producers
from minitc.templates.gpu.registry import MAX_THREADS, defaults, template
from minitc.templates.norm import producer, softmax_axis
from minitc.templates.params import Ints, Param
from minitc.templates.reduce import contiguous_axis, contiguous_reduce_loop

BLOCK = 128  # threads per block of the defaults: 4 warps, many blocks per SM
PER_THREAD = 16  # elements of a row per thread (and pass) the defaults aim at


THREADS = Param(
    "threads",
    "threads per row (a cross-thread reduction)",
    Ints(1, 1024),
    "a warp for rows of up to 512 values, doubled (16 values a thread) up to 1024",
    candidates=(8, 16, 32, 64, 128, 256, 512, 1024),
)
ROWS = Param(
    "rows", "rows per block", Ints(1, 1024), "as many as make 128 threads a block", candidates=(1, 2, 4, 8, 16)
)
REDUCE_PARAMS = (THREADS, ROWS)


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


@template("softmax", REDUCE_PARAMS)
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


@template("layer_norm", REDUCE_PARAMS)
def schedule_layer_norm(s, out, target, threads=WARP, rows=4):
    """layer_norm in one launch: mean and variance by cross-thread reductions, `rows` rows a
    block, `threads` threads a row."""
    _check("layer_norm", threads, rows)
    stats = [producer(s, out, "layer_norm_mean"), producer(s, out, "layer_norm_var")]
    row_statistics(s, out, stats, threads, rows)


def contiguous_run(state, st) -> list:
    """The trailing reduction axes of stage `st` that every read along them indexes, in order, as
    its innermost whole dimensions (r2, r3 of X[n, c, r2, r3] for a mean over H and W of NCHW
    data): fused, they run over one contiguous stretch of memory. At least the last axis."""
    axes, red = list(st.reduce_axes), set(st.reduce_axes)
    run = len(axes)
    for r in st.reads():
        if not any(isinstance(v, IterVar) and v in red for i in r.indices for v in walk(i)):
            continue
        shape, k = state.stage(r.stage).shape, 0
        while k < min(run, len(r.indices)) and r.indices[-1 - k] is axes[-1 - k]:
            if k and shape[-k] != axes[-k].extent:
                break  # the inner dimension is wider than its axis: a gap between the rows
            k += 1
        run = k
    return axes[len(axes) - max(run, 1) :]


@template("reduce", REDUCE_PARAMS)
def schedule_reduce(s, out, target, threads=WARP, rows=4):
    """sum/max/min/mean whose contiguous axis is reduced: `threads` threads reduce a row (the
    contiguous run of reduced axes, fused) together, `rows` rows a block; otherwise one thread
    per output element."""
    _check("reduce", threads, rows)
    st = s.state.stage(out)
    if contiguous_axis(st)[0] != "reduced":
        return  # the kept contiguous axis: gpu_template_schedule's flat binding coalesces
    threads, rows = _legal(threads, rows)
    loops = s.loops(out)
    spatial = [ref for ref, lp in zip(loops, st.loops) if not lp.reduce]
    if spatial:
        _row_loop(s, spatial, rows)
    run = len(contiguous_run(s.state, st))
    if run == 1:
        cross_thread(s, out, threads)
        return
    row = s.fuse(*loops[len(loops) - run :])  # the last loops: the stage's reduction axes, in order
    s.bind(s.split(row, factor=threads)[1], "threadIdx.x")


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
    if not st.reduce_axes:
        return 1
    run = contiguous_run(s.state, st) if tag == "reduce" else []
    if len(run) > 1:  # schedule_reduce fuses them
        return math.prod(a.extent for a in run)
    return contiguous_reduce_loop(st, list(st.reduce_axes)).extent


@defaults("softmax")
def softmax_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "softmax_sum"))


@defaults("layer_norm")
def layer_norm_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "layer_norm_mean"))


@defaults("reduce")
def reduce_defaults(s, out, target) -> dict:
    return pick(_row_length(s, out, "reduce"))
