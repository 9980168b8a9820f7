"""Reduction template (sum/max/min/mean over any axes), and the reduction helper that the
softmax and layer_norm templates reuse for their per-row statistics.

A vectorized loop must be spatial. Where the input's contiguous (last) axis goes decides
which loop carries the vector lanes:

kept (e.g. sum over axis 0): vectorize it; the reduction loops sit between a parallel chunk
loop and the vector loop, so each task streams whole rows of its column chunk and keeps the
chunk of accumulators in L1:

    for [outer, c] in parallel(...):          # column chunks of `chunk` elements
        for k in range(K):                    # reduction loops
            for j_m in range(chunk / vector):
                for j_i in vectorized(vector):
                    y[.., c*chunk + j_m*vector + j_i] += x[k, .., c*chunk + j_m*vector + j_i]

reduced (e.g. row sums): `rfactor` turns `lanes` elements of the reduced axis into a spatial
axis of a partial-results stage `y_rf`, which is vectorized: contiguous loads of whole
registers into `lanes / simd` independent vector accumulators per row. The final step reduces
each row's partial results, the rows of a tile unrolled so their chains run side by side:

    for r_o in parallel(R / rows):
        for r in range(rows):                          # y_rf: a rows x lanes tile
            y_rf[r, :] = 0
            for k_o in range(K / lanes):
                for k_i in vectorized(lanes):
                    y_rf[r, k_i] += x[r_o*rows + r, k_o*lanes + k_i]
        for k_i in range(lanes):                       # the horizontal step
            for r_i in unrolled(rows):
                y[r_o*rows + r_i] += y_rf[r_i, k_i]

The reduce template reads `streams` rows of the tile side by side (the target's `row_streams`:
4 on Zen 5, else 1), one cache line of each per step (`lanes` = 64 bytes of elements, at least a preferred vector):

        for r in range(rows / streams):
            y_rf[...] = 0
            for k_o in range(K / lanes):
                for s in unrolled(streams):
                    for k_i in vectorized(lanes):
                        y_rf[r*streams + s, k_i] += x[r_o*rows + r*streams + s, k_o*lanes + k_i]

On Zen 5, four streams of one line each keep more of a core's memory requests in flight than
one row at a time; on Zen 4 one row at a time is faster (minitc/target/cpus.py). The softmax
and layer_norm templates, whose rows are mostly in cache, keep one row at a time. Otherwise
`lanes` is whole vectors of the target's preferred width (`preferred_lanes`), at most four,
and at most a quarter of the axis; where it does not divide K the last k_o step is guarded
(lowering peels it off). Rows shorter than that pays for (`default_lanes`) get `lanes=0`:
`rows` accumulators unrolled inside the reduction loop, independent chains that LLVM's SLP
vectorizer packs into one vector (a load per lane):

    for r_o in parallel(R / rows):
        for k in range(K):
            for r_i in unrolled(rows):
                y[r_o*rows + r_i] += x[r_o*rows + r_i, k]

No output axis of extent > 1 (a full reduction): the same partial results, and with
`parallel` first one partial result per core (a second rfactor over the outermost reduction
loop, parallel), each of them vectorized as above.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.expr import IterVar, walk
from minitc.templates.contraction import reduction_under
from minitc.templates.elementwise import (
    PARALLEL,
    VECTOR,
    check_int,
    default_vector,
    extent,
    numel,
    parallelize,
    pick_lanes,
    pick_tile,
    schedule_injective,
    worth_parallel,
)
from minitc.templates.gemm_stages import inline_epilogue
from minitc.templates.params import Ints, Param
from minitc.templates.registry import defaults, template

CHUNK_BYTES = 16 * 1024  # accumulators per column chunk: a whole 16 KiB row segment per pass
# (long contiguous runs keep the prefetchers streaming; the chunk of accumulators stays in L1)
CHUNK = CHUNK_BYTES // 4

# -- the parameters (shared with norm.py) --------------------------------------------------------
PARTIALS = Param(
    "lanes",
    "vector partial results per row of a reduction along it (0: none)",
    Ints(0, 1024),
    "whole registers of the target's preferred width (default_lanes), 0 for short rows; reduce: one "
    "cache line of a long row",
    candidates=(4, 7, 8, 16),
)
CHUNK_PARAM = Param(
    "chunk",
    "columns per tile when the reduced axis is not the contiguous one",
    Ints(1, 65536),
    "16 KiB of accumulators, at least one chunk per core (softmax: its tile fits TILE_BYTES)",
    candidates=(64, 128, 256, 512, 1024),
)
REDUCE_PARAMS = (
    VECTOR,
    PARTIALS,
    Param("rows", "rows per tile", Ints(1, 1024), "the target's preferred lanes (the final step fills a vector)",
          candidates=(1, 2, 4, 8, 16)),
    CHUNK_PARAM,
    PARALLEL,
    Param("streams", "rows of a tile read side by side", Ints(1, 64),
          "the target's row streams (what its prefetchers follow at once)", candidates=(1, 2, 4, 8)),
)  # fmt: skip
MIN_STEPS = 4  # steps of the vector partial loop at least (fewer lanes for shorter rows)
LINE_BYTES = 64  # a cache line on every x86-64


def contiguous_axis(st):
    """Where the contiguous (last) axis of the input a reduction stage streams over goes:
    ("kept", p) when it is the stage's spatial axis p, ("reduced", None) when it is reduced,
    (None, None) when the stage reads nothing along a reduction axis."""
    red = set(st.reduce_axes)
    for r in st.reads():
        if not r.indices or not any(isinstance(n, IterVar) and n in red for i in r.indices for n in walk(i)):
            continue
        last = {n for n in walk(r.indices[-1]) if isinstance(n, IterVar)}
        if last & red:
            return "reduced", None
        for p, a in enumerate(st.axes):
            if a in last:
                return "kept", p
        return None, None
    return None, None


def pick_chunk(n: int, chunk: int, lanes: int) -> int:
    """A multiple of `lanes` near `chunk` (within a factor 2 below it) that divides n if one
    does, so the chunk split leaves no guarded tail."""
    chunk = max(lanes, chunk // lanes * lanes)
    if n <= chunk:
        return n
    c = chunk
    while c >= max(lanes, chunk // 2):
        if n % c == 0:
            return c
        c -= lanes
    return chunk


def schedule_reduction(
    s, name: str, target, *, vector: int, lanes: int, rows: int, chunk: int, parallel: bool, streams: int = 1
) -> None:
    """Schedule the reduction stage `name` as in the module docstring. Works at the root and
    for a stage computed inside another one's loop (compute_at): the splits then act on the
    region the stage computes there, and `parallel` must be False."""
    st = s.state.stage(name)
    loops = s.loops(name)
    spatial, red = list(loops[: len(st.axes)]), list(loops[len(st.axes) :])
    kind, p = contiguous_axis(st)
    if kind == "kept":
        v = spatial[p]
        n = extent(s, v)
        vec = pick_lanes(n, vector)
        c = pick_chunk(n, chunk, vec)
        if c < n:
            spatial[p], v = s.split(v, factor=c)
        else:
            del spatial[p]
        inner = list(s.split(v, factor=vec)) if vec < min(c, n) else [v]
        s.reorder(*spatial, *red, *inner)
        s.vectorize(inner[-1])
        parallelize(s, spatial, parallel)
        return
    if kind != "reduced":
        outer = [lp for lp in spatial if extent(s, lp) > 1]
        s.reorder(*outer, *(lp for lp in spatial if extent(s, lp) == 1))  # adjacent, to fuse
        parallelize(s, outer, parallel)
        return
    c = contiguous_reduce_loop(st, red)
    if not 1 < lanes < extent(s, c):  # no vector partial results
        slp_rows(s, spatial, red, rows=rows, parallel=parallel)
    elif any(extent(s, lp) > 1 for lp in spatial):
        row_partials(s, name, c, lanes=lanes, rows=rows, parallel=parallel, streams=streams)
    else:
        full_partials(s, name, c, lanes=lanes, cores=max(1, target.num_cores) if parallel else 1)


def check_lanes(template_name: str, lanes) -> None:
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 0:
        raise ScheduleError(
            f"{template_name} template: lanes must be an int >= 0 (0: no vector partial results), got {lanes!r}"
        )


def contiguous_reduce_axis(st):
    """The reduction axis that indexes the contiguous dimension of what the stage reads."""
    for r in st.reads():
        last = {n for n in walk(r.indices[-1]) if isinstance(n, IterVar)} if r.indices else set()
        for a in reversed(st.reduce_axes):
            if a in last:
                return a
    return st.reduce_axes[-1]


def contiguous_reduce_loop(st, red: list):
    """The loop (among the stage's initial reduction loops `red`) of contiguous_reduce_axis."""
    return red[st.reduce_axes.index(contiguous_reduce_axis(st))]


def default_lanes(st, target) -> int:
    """Partial results per row along the reduced contiguous axis (of extent k) of stage `st`:
    whole vectors of the target's preferred width for memory-bound code (`preferred_lanes`:
    256 bits where 512-bit operations are split in halves), four of them at most, and few
    enough that the partial loop runs at least MIN_STEPS times (the final step costs a scalar
    operation per lane and row). 0 (SLP rows) when k is under two vectors, or is not a whole
    number of vectors and under MIN_STEPS of them: the guarded last step would cost more than
    it saves."""
    kind, _ = contiguous_axis(st)
    if kind != "reduced":
        return 0
    k = contiguous_reduce_axis(st).extent
    simd = target.preferred_lanes(st.dtype)
    if k < 2 * simd or (k % simd and k < MIN_STEPS * simd):
        return 0
    return max(simd, min(default_vector(target, st.dtype), k // MIN_STEPS) // simd * simd)


def tile_rows(s, spatial: list, rows: int) -> tuple[list, object]:
    """Tile the innermost kept axis of extent > 1 (its rows are nearest in memory) by `rows`;
    returns (the other spatial loops, with the tile loop in the axis's place if it was split,
    and the loop over the rows of a tile)."""
    p = max(q for q, lp in enumerate(spatial) if extent(s, lp) > 1)
    v = spatial[p]
    t = pick_tile(extent(s, v), rows)
    if t < extent(s, v):
        spatial[p], v = s.split(v, factor=t)
    else:
        del spatial[p]
    return spatial, v


def slp_rows(s, spatial: list, red: list, *, rows: int, parallel: bool) -> None:
    """`rows` row accumulators unrolled inside the reduction loops: independent chains that
    LLVM's SLP vectorizer packs into one vector (a load per lane); for short rows."""
    if not any(extent(s, lp) > 1 for lp in spatial):
        parallelize(s, [], parallel)
        return
    spatial, v = tile_rows(s, spatial, rows)
    s.reorder(*spatial, *red, v)
    s.unroll(v)
    parallelize(s, spatial, parallel)


def vector_partials(s, c, lanes: int):
    """Split the reduction loop `c` by `lanes`, rfactor the inner part and vectorize it
    innermost in the new stage; returns the rf stage's tensor."""
    c_i = s.split(c, factor=lanes)[1] if lanes < extent(s, c) else c
    rf = s.rfactor(c_i)
    loops = s.loops(rf)
    n = len(s.state.stage(rf.name).axes)
    s.reorder(*loops[: n - 1], *loops[n:], loops[n - 1])
    s.vectorize(loops[n - 1])
    return rf


def row_partials(s, name: str, c, *, lanes: int, rows: int, parallel: bool, streams: int = 1) -> None:
    """Vector partial results per tile of `rows` rows of the innermost kept axis, then the
    final step with the tile's rows unrolled inside it (module docstring). `streams` > 1 reads
    that many rows of the tile side by side in the partial loop (module docstring)."""
    rf = vector_partials(s, c, lanes)
    *spatial, k = s.loops(name)
    spatial, v = tile_rows(s, spatial, rows)
    # the tile's rows go innermost: the other spatial loops must be adjacent to fuse, and kept
    # axes of extent 1 after the rows (keepdims: a mean over (2, 3) of NCHW) are not otherwise
    s.reorder(*spatial, k, v)
    tile = (s.fuse(*spatial) if len(spatial) > 1 else spatial[0]) if spatial else None
    if tile is not None:
        s.compute_at(rf, tile)
    s.unroll(v)
    if streams > 1:
        interleave_rows(s, rf, streams)
    parallelize(s, [tile] if tile is not None else [], parallel)


def interleave_rows(s, rf, streams: int) -> None:
    """Reorder the partial loops of the rf stage (rows, k_o, lanes) so that `streams` rows
    advance together: for each group of rows, for k_o, for the group's rows (unrolled), the
    lanes. Nothing to do for other loop nests, a tile of one row or a partial loop of one step."""
    loops = s.loops(rf)
    if len(loops) != 3:  # several kept or reduced axes: left as it is
        return
    row, k_o, lane = loops
    if extent(s, row) < 2 or extent(s, k_o) < 2:
        return
    group = pick_tile(extent(s, row), streams)
    if group < extent(s, row):
        row_o, row = s.split(row, factor=group)
        s.reorder(row_o, k_o, row, lane)
    else:
        s.reorder(k_o, row, lane)
    s.unroll(row)


def full_partials(s, name: str, c, *, lanes: int, cores: int) -> None:
    """A full reduction: vector partial results, first split `cores` ways along the outermost
    reduction loop (one parallel task each) when there is enough work for them."""
    if lanes < extent(s, c):
        c = s.split(c, factor=lanes)[1]  # the rfactor below keeps this split's inner loop
    st = s.state.stage(name)
    outer = next(lp for lp, meta in zip(s.loops(name), st.loops) if meta.reduce)
    if cores > 1 and extent(s, outer) >= 2 * cores and outer.name != c.name:
        part = s.rfactor(s.split(outer, nparts=cores)[0])
        c = next(lp for lp in s.loops(part) if lp.name == c.name)
        rf = vector_partials(s, c, extent(s, c))
        s.parallel(s.loops(rf)[len(s.state.stage(rf.name).axes) - 2])
    else:
        vector_partials(s, c, extent(s, c))


@template("reduce", REDUCE_PARAMS)
def schedule_reduce(s, out, target, vector=32, lanes=8, rows=8, chunk=CHUNK, parallel=True, streams=1):
    """sum/max/min/mean over any axes: vector lanes over the kept contiguous axis (`vector`,
    column chunks of `chunk`), or, when the contiguous axis is reduced, `lanes` vector partial
    results along it per row (0, or not less than the axis: `rows` unrolled row accumulators
    instead) per tile of `rows` rows, `streams` of them read side by side; the outer output
    loops fused and `parallel`."""
    check_int("reduce", vector=vector, rows=rows, chunk=chunk, streams=streams)
    check_lanes("reduce", lanes)
    schedule_reduction(
        s, out, target, vector=vector, lanes=lanes, rows=rows, chunk=chunk, parallel=parallel, streams=streams
    )


def input_bytes(s, name: str) -> int:
    """Bytes of the largest stage `name` reads (the data a memory-bound operator streams)."""
    sizes = [
        numel(s.state.stage(r).shape) * dtypes.bits(s.state.stage(r).dtype) // 8
        for r in s.state.stage(name).read_stages()
    ]
    return max(sizes, default=0)


def default_chunk(st, vector: int, target) -> int:
    """Column chunks as long as CHUNK_BYTES allows, but at least one per core when the kept
    contiguous axis is the only parallel work (sum over axis 0 of a matrix)."""
    chunk = CHUNK_BYTES // (dtypes.bits(st.dtype) // 8)
    kind, p = contiguous_axis(st)
    if kind != "kept":
        return chunk
    n = st.shape[p]
    cores = max(1, target.num_cores)
    if numel(st.shape) // n >= cores:
        return chunk
    lanes = pick_lanes(n, vector)
    per_core = -(-n // cores)
    return max(lanes, min(chunk, -(-per_core // lanes) * lanes))


def stream_lanes(st, target) -> int:
    """Partial results per row of a row reduction: one cache line of each row per step (at
    least a preferred vector; rows may be read side by side, `streams`), where the row allows
    vector partials."""
    lanes = default_lanes(st, target)
    if not lanes:
        return 0
    line = max(target.preferred_lanes(st.dtype), LINE_BYTES * 8 // dtypes.bits(st.dtype))
    k = contiguous_reduce_axis(st).extent
    return line if k >= MIN_STEPS * line else lanes


@defaults("reduce")
def reduce_defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    vector = default_vector(target, st.dtype)
    return {
        "vector": vector,
        "lanes": stream_lanes(st, target),
        "rows": target.preferred_lanes(st.dtype),  # the final step's rows fill a vector
        "chunk": default_chunk(st, vector, target),
        "parallel": worth_parallel(input_bytes(s, out), target),
        "streams": target.row_streams,
    }


@template("reduce_epilogue", REDUCE_PARAMS)
def schedule_reduce_epilogue(s, out, target, vector=32, lanes=8, rows=8, chunk=CHUNK, parallel=True, streams=1):
    """An elementwise output of a reduction written by hand (a variance as a sum of squares,
    then a scale: contraction.reduction_under finds it): the reduction as the reduce template
    schedules it, at the root, with these parameters; the elementwise stages between it and
    `out` inlined into `out`, which is vectorized and parallel as the elementwise template's."""
    product = reduction_under(s, out)
    inline_epilogue(s, out, product)
    schedule_reduce(s, product, target, vector, lanes, rows, chunk, parallel, streams)
    st = s.state.stage(out)
    nbytes = numel(st.shape) * dtypes.bits(st.dtype) // 8
    schedule_injective(s, out, target, vector=default_vector(target, st.dtype), parallel=worth_parallel(nbytes, target))


@defaults("reduce_epilogue")
def reduce_epilogue_defaults(s, out, target) -> dict:
    return reduce_defaults(s, reduction_under(s, out), target)
