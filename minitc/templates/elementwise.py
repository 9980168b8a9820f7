"""Elementwise template: inline the elementwise producers, vectorize the contiguous axis,
parallelize the rows. Memory-bound: the goal is one pass over the data with full vectors.

    for rows in parallel(R):              # all outer axes fused (and the column chunks, when
        for j_o in range(N / lanes):      # there are too few rows to share among the threads)
            for j_i in vectorized(lanes):
                y[rows, j_o * lanes + j_i] = f(x[...], ...)   # producers inlined

Shared helpers for the memory-bound templates (lane counts, extents, thresholds) live here too.
Memory-bound templates take their vector width from the target's `preferred_vector_bits`: on a
core whose 512-bit ops are split in halves (Zen 4) that is 256 bits, as on AVX2.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.templates.params import SWITCH, Ints, Param
from minitc.templates.registry import defaults, template

VECTOR = Param(
    "vector",
    "lanes of the vectorized elementwise loops",
    Ints(1, 1024),
    "the target's preferred vector width (lanes) for the dtype",
    candidates=(8, 16, 32, 64),
)
PARALLEL = Param(
    "parallel",
    "run the outer loop in parallel",
    SWITCH,
    "true where the data is large enough to pay for the threads (worth_parallel)",
)
INLINE = Param("inline", "inline the elementwise producers", SWITCH, "true")

MAX_LANES = 64
PARALLEL_MIN_BYTES = 256 * 1024  # below this a thread-pool launch costs more than it saves
ROWS_PER_THREAD = 4  # fuse the column chunks in when there are fewer rows than this per thread


# -- helpers shared with reduce.py and norm.py -------------------------------------------------


def extent(s, loop) -> int:
    return s.state.stage(loop.stage).loop(loop.name).extent


def check_int(template_name: str, **params) -> None:
    for name, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"{template_name} template: {name} must be a positive int, got {v!r}")


def pick_lanes(n: int, vector: int) -> int:
    """Lanes for a vectorized loop over an axis of extent `n`: the whole axis when it fits in
    `vector` lanes (no tail at all), else the largest of vector, vector/2, ... (down to 8) that
    divides n (no masked tail), else `vector`."""
    vector = min(vector, MAX_LANES)
    if n <= vector:
        return n
    lanes = vector
    while lanes >= 8:
        if n % lanes == 0:
            return lanes
        lanes //= 2
    return vector


def pick_tile(n: int, tile: int) -> int:
    """A tile of at most `tile` iterations for an axis of extent n, dividing n if some tile in
    [tile/2, tile] does (so no guarded tail), else `tile`."""
    if n <= tile:
        return n
    for t in range(tile, max(1, tile // 2) - 1, -1):
        if n % t == 0:
            return t
    return tile


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def worth_parallel(nbytes: int, target) -> bool:
    """True if `nbytes` of traffic is worth sharing among the target's cores."""
    return target.num_cores > 1 and nbytes >= PARALLEL_MIN_BYTES


def default_vector(target, dtype: str) -> int:
    """Lanes of a vectorized loop: four registers of the target's preferred width, so each
    iteration issues four independent vector operations (32 float32 on AVX2 and on Zen 4,
    64 on a core with full-rate 512-bit units)."""
    return min(MAX_LANES, 4 * target.preferred_lanes(dtype))


def parallelize(s, outer: list, parallel: bool) -> None:
    """Fuse the outer loops (adjacent, outermost first) into one parallel loop."""
    if not parallel or not outer:
        return
    s.parallel(s.fuse(*outer) if len(outer) > 1 else outer[0])


def inline_producers(s, out: str) -> None:
    """compute_inline every elementwise stage that feeds `out` through elementwise stages only
    (the fusion group of `out`); reductions and other operators stay as they are."""
    todo, seen = [out], set()
    while todo:
        name = todo.pop()
        for r in s.state.stage(name).read_stages():
            st = s.state.stage(r)
            if r in seen or st.is_placeholder or st.output or st.inline or st.reduce_axes:
                continue
            if st.tag not in ("elementwise", ""):
                continue
            seen.add(r)
            s.compute_inline(r)
            todo.append(r)


# -- the template ------------------------------------------------------------------------------


def schedule_injective(s, out: str, target, *, vector: int, parallel: bool) -> None:
    """Vectorize the last axis of `out` (a stage without reduction), parallelize the others."""
    loops = s.loops(out)
    last = loops[-1]
    n = extent(s, last)
    lanes = pick_lanes(n, vector)
    outer = list(loops[:-1])
    if lanes < n:
        jo, ji = s.split(last, factor=lanes)
    else:
        jo, ji = None, last
    if lanes > 1:
        s.vectorize(ji)
    if jo is not None:
        rows = 1
        for lp in outer:
            rows *= extent(s, lp)
        if rows < ROWS_PER_THREAD * max(1, target.num_cores):
            outer.append(jo)  # 1-D, or too few rows: share the column chunks too
    parallelize(s, outer, parallel)


@template("elementwise", (VECTOR, PARALLEL, INLINE))
def schedule_elementwise(s, out, target, vector=32, parallel=True, inline=True):
    """Elementwise chain ending in `out`: producers inlined (`inline`), the last axis
    vectorized with `vector` lanes (fewer when they divide it), outer rows `parallel`."""
    check_int("elementwise", vector=vector)
    if inline:
        inline_producers(s, out)
    schedule_injective(s, out, target, vector=vector, parallel=parallel)


@defaults("elementwise")
def elementwise_defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    nbytes = numel(st.shape) * dtypes.bits(st.dtype) // 8
    return {"vector": default_vector(target, st.dtype), "parallel": worth_parallel(nbytes, target), "inline": True}
