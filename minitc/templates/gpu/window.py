"""GPU templates for the sliding windows on NCHW data (the layout the model compiler keeps on a
GPU): `depthwise_conv2d`, `max_pool2d` and `avg_pool2d`.

A block covers a tile of oht*ohb output rows by wt output columns of kt channels; a thread one
column of ohb rows of one channel, its accumulators in registers:

    for (n, c_o, oh_o, ow_o) in bind("blockIdx.x"):
        for (c_i, hy) in bind("threadIdx.y", kt * oht): for tx in bind("threadIdx.x", wt):
            acc[ohb] = init                                  # registers
            for ry, rx, h in unrolled(R, S, ohb):            # windows up to 7x7
                acc[h] (+)= X[n, c, (oh + h)*sh + ry - ph, ow*sw + rx - pw] (* W[c, ry, rx])
            out[n, c, oh:oh + ohb, ow] = acc                 # unrolled copy-out (epilogue applied here)

Neighbouring threads take neighbouring output columns, so every load of a warp reads one
contiguous run of a row (every other word at stride 2): coalesced along the innermost axis.
With the window and the rows unrolled, the compiler loads an input value once for all the
window offsets and rows of the thread that read it (ohb + R - 1 rows of S values, not ohb*R*S),
and the padding is a select in the loads (no padded copy).

A window far larger than its output (a global pool: 7x7 -> 1x1) is instead reduced across the
threads of a warp: `threads` threads a window, `rows` windows a block, so that a warp reads the
window's contiguous values together rather than one thread all of them.

Any parameters give a legal program: tiles that do not divide the shape are guarded, and the
block shrinks until it has at most 1024 threads.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.templates.conv import find_pad_stage
from minitc.templates.gemm import cache_under_epilogue, epilogue_anchor
from minitc.templates.gpu.reduce import ROWS, THREADS, pick
from minitc.templates.gpu.registry import MAX_THREADS, defaults, template
from minitc.templates.params import Ints, Param

WINDOW_TAGS = ("depthwise_conv2d", "max_pool2d", "avg_pool2d")
UNROLLED_WINDOW = 49  # windows up to 7x7 are unrolled (as the CPU's sliding-window template does)
BLOCK = 256  # threads a block the defaults aim at
ROW_WIDTH = 32  # output columns a block spans at most by default (one warp's worth)
GLOBAL_WINDOW = 4  # windows this many times larger than the output (a global pool): reduced across threads


WINDOW_PARAMS = (
    Param("wt", "output columns per block (a thread each)", Ints(1, 1024),
          "the row, if up to 32 columns, else a divisor of it from 16 to 32", candidates=(4, 8, 16, 32)),
    Param("oht", "row tiles per block", Ints(1, 1024), "a divisor of the row tiles making up to 256 threads",
          candidates=(1, 2, 4, 8, 14)),
    Param("ohb", "output rows per thread", Ints(1, 64), "2 where it divides the rows, else 1",
          candidates=(1, 2, 3, 4, 7)),
    Param("kt", "channels per block", Ints(1, 1024), "a divisor of C making up to 256 threads",
          candidates=(2, 4, 8, 16)),
    Param("threads", "threads per window, reduced across them (0: the register tiles instead)", Ints(0, 1024),
          "0; for a global pool (a window 4x its output or more) a warp, more for windows over 512 values",
          candidates=THREADS.candidates),
    Param("rows", "windows per block of the cross-thread reduction", ROWS.domain,
          "1; global pools: 128 threads a block", candidates=ROWS.candidates),
)  # fmt: skip


def _check(params: dict) -> None:
    for name, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"GPU sliding-window template: {name} must be a positive int, got {v!r}")


def _anchor(s, out: str) -> str:
    """The window stage: `out` itself, or the one under a fused elementwise epilogue."""
    tag = s.state.stage(out).tag
    if tag in WINDOW_TAGS and s.state.stage(out).reduce_axes:
        return out
    for t in WINDOW_TAGS:
        try:
            return epilogue_anchor(s, out, t, "GPU sliding-window")
        except ScheduleError:
            continue
    raise ScheduleError(f"GPU sliding-window template: {out} reads no depthwise_conv2d or pooling stage")


def schedule_tiles(s, out: str, wt: int, oht: int, ohb: int, kt: int) -> None:
    """Tiles of oht*ohb rows x wt columns x kt channels a block, ohb rows a thread in registers."""
    _check({"wt": wt, "oht": oht, "ohb": ohb, "kt": kt})
    anchor = _anchor(s, out)
    _, C, OH, OW = s.state.stage(anchor).shape
    R, S = (a.extent for a in s.state.stage(anchor).reduce_axes)
    # no thread without work, and at most MAX_THREADS a block: fewer, busier threads
    wt, kt = min(wt, OW), min(kt, C)
    ohb = min(ohb, OH)
    oht = min(oht, -(-OH // ohb))
    while wt * oht * kt > MAX_THREADS:
        if kt > 1:
            kt //= 2
        elif oht > 1:
            oht, ohb = oht // 2, ohb * 2
        else:
            wt //= 2
    pad = find_pad_stage(s, anchor)
    acc = s.stage_name(cache_under_epilogue(s, out, anchor))
    n, c, oh, ow = s.loops(out)
    co, ci = s.split(c, factor=kt)
    ho, hi = s.split(oh, factor=oht * ohb)
    hy, hr = s.split(hi, factor=ohb)
    wo, tx = s.split(ow, factor=wt)
    s.reorder(n, co, ho, wo, ci, hy, tx, hr)
    s.bind(s.fuse(n, co, ho, wo), "blockIdx.x")
    s.bind(s.fuse(ci, hy), "threadIdx.y")
    s.bind(tx, "threadIdx.x")
    s.unroll(hr)  # the copy-out unrolled, so that the accumulators stay in registers
    s.compute_at(acc, tx)
    _, _, ah, aw, ry, rx = s.loops(acc)
    s.reorder(ry, rx, ah, aw)
    for ref in (ry, rx, ah) if R * S <= UNROLLED_WINDOW else (ah,):
        s.unroll(ref)
    if pad is not None:
        s.compute_inline(pad)  # padding becomes a select in the loads


def schedule_global(s, out: str, threads: int, rows: int) -> None:
    """`threads` threads reduce each output element's window together (ry and rx fused: one
    contiguous run when the window spans whole rows), `rows` channels' windows a block."""
    _check({"threads": threads, "rows": rows})
    anchor = _anchor(s, out)
    threads = min(threads, MAX_THREADS)
    rows = max(1, min(rows, MAX_THREADS // threads))
    pad = find_pad_stage(s, anchor)
    acc = s.stage_name(cache_under_epilogue(s, out, anchor)) if anchor != out else out
    n, c, oh, ow = s.loops(out)[:4]
    co, ci = s.split(c, factor=rows)  # rows of channels: the accumulator's region stays one element
    s.reorder(n, co, oh, ow, ci)
    s.bind(s.fuse(n, co, oh, ow), "blockIdx.x")
    if acc != out:  # the epilogue's store by one thread of each window's (threadIdx.x < 1)
        ci, one = s.split(ci, factor=1)
        s.bind(one, "threadIdx.x")
        s.compute_at(acc, ci)
    s.bind(ci, "threadIdx.y")
    *_, ry, rx = s.loops(acc)
    s.bind(s.split(s.fuse(ry, rx), factor=threads)[1], "threadIdx.x")  # a cross-thread reduction
    if pad is not None:
        s.compute_inline(pad)


def _schedule(s, out, target, wt=ROW_WIDTH, oht=4, ohb=2, kt=1, threads=0, rows=1):
    """`threads` > 0: the cross-thread reduction of each window (schedule_global); otherwise the
    register tiles of schedule_tiles."""
    if threads:
        schedule_global(s, out, threads, rows)
    else:
        schedule_tiles(s, out, wt, oht, ohb, kt)


for _tag in WINDOW_TAGS:
    template(_tag, WINDOW_PARAMS)(_schedule)


def window_defaults(s, out, target) -> dict:
    """A global pool (windows of at least 16 values, together GLOBAL_WINDOW times larger than the
    output): a warp a window (more for windows over 512 values), four windows a block.
    Otherwise whole rows up to 32 columns (a divisor of the row from 16 up, if any) a block,
    2 rows a thread where they divide the rows (a 3x3 window's rows then serve two outputs),
    as many rows (a divisor of the tiles, if any) and channels (a divisor, if any) as make up to
    BLOCK threads."""
    anchor = _anchor(s, out)
    _, C, OH, OW = s.state.stage(anchor).shape
    R, S = (a.extent for a in s.state.stage(anchor).reduce_axes)
    if R * S >= 16 and OH * OW * GLOBAL_WINDOW <= R * S:
        return {"wt": ROW_WIDTH, "oht": 4, "ohb": 2, "kt": 1, **pick(R * S)}  # the tiles' unused
    wt = OW if OW <= ROW_WIDTH else max((d for d in range(16, ROW_WIDTH + 1) if OW % d == 0), default=ROW_WIDTH)
    ohb = 2 if OH % 2 == 0 else 1
    tiles = -(-OH // ohb)
    fit = max(1, min(tiles, BLOCK // wt))
    oht = max((d for d in range(1, fit + 1) if tiles % d == 0 and 2 * d > fit), default=fit)
    fit = max(1, min(C, BLOCK // (wt * oht)))
    kt = max(d for d in range(1, fit + 1) if C % d == 0)
    return {"wt": wt, "oht": oht, "ohb": ohb, "kt": kt, "threads": 0, "rows": 1}


for _tag in WINDOW_TAGS:
    defaults(_tag)(window_defaults)
