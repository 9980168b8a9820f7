"""softmax and layer_norm templates: the per-row statistics are computed per tile of rows
inside the output's parallel row loop (compute_at), so each tile is read from memory once
and every intermediate stays in L1.

softmax over the last axis (layer_norm is the same with mean/var for max/exp/sum):

    for r_o in parallel(R / rows):
        mx_rf[rows, L] = max over k_o of x[.., k_o*L + k_i]   vectorized along k_i (reduce.py)
        mx[rows]       = max over k_i of mx_rf, rows unrolled inside k_i
        e[rows, N]     = exp(x - mx)                          vectorized along the row
        sm_rf[rows, L], sm[rows]: the same for the sum of e
        for r_i in range(rows):
            for j_o, j_i in vectorized(vector): y[...] = e[r_i, j] / sm[r_i]

L is the `lanes` parameter: the statistics' vector partial results per row (`rfactor`; whole
registers of the target by default, reduce.py's `default_lanes`). Short rows get `lanes=0`:
the rows unrolled inside the reduction loop instead (SLP-vectorized by LLVM).

softmax over another axis: tiles of `chunk` columns of the last axis instead of row tiles;
each statistic is then vectorized along the columns with the softmax axis as its reduction
loop (reduce.py's "kept" case).
"""

from __future__ import annotations

from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.templates.elementwise import (
    PARALLEL,
    VECTOR,
    check_int,
    default_vector,
    extent,
    inline_producers,
    parallelize,
    pick_lanes,
    pick_tile,
    worth_parallel,
)
from minitc.templates.params import Ints, Param
from minitc.templates.reduce import (
    CHUNK_PARAM,
    PARTIALS,
    check_lanes,
    default_lanes,
    input_bytes,
    pick_chunk,
    schedule_reduction,
)
from minitc.templates.registry import defaults, template

ROWS = 8
SOFTMAX_ROWS = 32  # a tile of short rows (attention's 128) is mostly per-tile overhead at 8 rows
CHUNK = 64
TILE_BYTES = 32 * 1024  # the exp tile of softmax stays in L1 (with the input rows, in L2)


def _rows(default: str) -> Param:
    return Param("rows", "rows per tile of the statistics", Ints(1, 1024), default, candidates=(1, 2, 4, 8, 16))


SOFTMAX_PARAMS = (
    _rows("as many as keep the exp tile within TILE_BYTES, up to 32"),
    VECTOR,
    PARTIALS,
    CHUNK_PARAM,
    PARALLEL,
)
LAYER_NORM_PARAMS = (_rows(f"{ROWS}"), VECTOR, PARTIALS, PARALLEL)


def producer(s, name: str, tag: str) -> str:
    """The stage with `tag` that `name` reads (directly or through one stage of the op)."""
    todo, seen = [name], set()
    while todo:
        n = todo.pop(0)
        for r in s.state.stage(n).read_stages():
            if r in seen:
                continue
            seen.add(r)
            st = s.state.stage(r)
            if st.tag == tag:
                return r
            if not st.is_placeholder:
                todo.append(r)
    raise ScheduleError(f"{s.state.stage(name).tag} template: {name} reads no {tag} stage")


def vectorize_last(s, name: str, vector: int) -> None:
    """Vectorize the last loop of an elementwise stage (split by the lanes)."""
    last = s.loops(name)[-1]
    lanes = pick_lanes(extent(s, last), vector)
    if lanes < extent(s, last):
        last = s.split(last, factor=lanes)[1]
    if lanes > 1:
        s.vectorize(last)


def row_tiles(
    s, out: str, target, stats: list, elementwise: list, *, rows: int, vector: int, lanes: int, parallel: bool
):
    """Statistics over the last axis: a parallel loop over tiles of `rows` rows; the
    statistic stages (reductions) and the elementwise intermediates computed per tile."""
    loops = s.loops(out)
    if len(loops) == 1:  # 1-D: one row, nothing to tile
        vectorize_last(s, out, vector)
        for name in elementwise:
            vectorize_last(s, name, vector)
        for name in stats:
            schedule_reduction(s, name, target, vector=vector, lanes=lanes, rows=rows, chunk=1, parallel=False)
        return
    *batch, r, j = loops
    t = pick_tile(extent(s, r), rows)
    ro, ri = s.split(r, factor=t)
    lanes = pick_lanes(extent(s, j), vector)
    if lanes < extent(s, j):
        jo, ji = s.split(j, factor=lanes)
    else:
        ji = j
    if lanes > 1:
        s.vectorize(ji)
    outer = batch + [ro]
    tile = s.fuse(*outer) if len(outer) > 1 else ro
    for name in stats + elementwise:
        s.compute_at(name, tile)
    for name in elementwise:
        vectorize_last(s, name, vector)
    for name in stats:  # vector partial results along the row, then the rows' final step
        schedule_reduction(s, name, target, vector=vector, lanes=lanes, rows=t, chunk=1, parallel=False)
    parallelize(s, [tile], parallel)


def column_tiles(
    s, out: str, target, axis: int, stats: list, elementwise: list, *, chunk: int, vector: int, parallel: bool
):
    """Statistics over a non-contiguous axis: tiles of `chunk` columns of the last axis."""
    loops = list(s.loops(out))
    last, ax = loops[-1], loops[axis]
    n = extent(s, last)
    lanes = pick_lanes(n, vector)
    c = pick_chunk(n, chunk, lanes)
    lc, rest = s.split(last, factor=c)
    inner = list(s.split(rest, factor=lanes)) if lanes < c else [rest]
    outer = [lp for lp in loops[:-1] if lp != ax] + [lc]
    s.reorder(*outer, ax, *inner)
    s.vectorize(inner[-1])
    tile = s.fuse(*outer) if len(outer) > 1 else lc
    for name in stats + elementwise:
        s.compute_at(name, tile)
    for name in elementwise:
        vectorize_last(s, name, vector)
    for name in stats:  # vectorized along the columns; huge chunk: no further split
        schedule_reduction(s, name, target, vector=lanes, lanes=0, rows=1, chunk=c, parallel=False)
    parallelize(s, [tile], parallel)


@template("softmax", SOFTMAX_PARAMS)
def schedule_softmax(s, out, target, rows=ROWS, vector=32, lanes=8, chunk=CHUNK, parallel=True):
    """softmax: max, exp and sum computed per tile of `rows` rows (last axis; `lanes` vector
    partial results per row for max and sum, 0 for none) or of `chunk` columns (other axes)
    inside the `parallel` tile loop; elementwise stages vectorized with `vector` lanes."""
    check_int("softmax", rows=rows, vector=vector, chunk=chunk)
    check_lanes("softmax", lanes)
    e = producer(s, out, "softmax_exp")
    stats = [producer(s, e, "softmax_max"), producer(s, out, "softmax_sum")]
    inline_producers(s, stats[0])  # a prologue (attention's mask add) is recomputed per read
    st = s.state.stage(out)
    axis = softmax_axis(s, out)
    if axis == len(st.shape) - 1 or len(st.shape) == 1:
        row_tiles(s, out, target, stats, [e], rows=rows, vector=vector, lanes=lanes, parallel=parallel)
    else:
        column_tiles(s, out, target, axis, stats, [e], chunk=chunk, vector=vector, parallel=parallel)


def softmax_axis(s, out: str) -> int:
    """The softmax axis: attrs["axis"] of tc.ops.softmax, else the output axis along which
    the sum stage is not indexed."""
    op = getattr(s.tensor(out), "op", None)
    if op is not None and isinstance(getattr(op, "attrs", None), dict) and "axis" in op.attrs:
        return op.attrs["axis"]
    st = s.state.stage(out)
    ssum = producer(s, out, "softmax_sum")
    for r in st.reads():
        if r.stage == ssum:
            used = {a for i in r.indices for a in st.axes if a is i}
            missing = [d for d, a in enumerate(st.axes) if a not in used]
            if len(missing) == 1:
                return missing[0]
    return len(st.shape) - 1


def _softmax_vector(target, dtype: str, row: int) -> int:
    """The elementwise vector: a short row (four iterations of the usual vector or fewer, as
    attention's 128) runs two registers per iteration instead of four, which measured faster
    there and slower on long rows (Zen 5, native and AVX2 code)."""
    vector = default_vector(target, dtype)
    return max(1, vector // 2) if row <= 4 * vector else vector


@defaults("softmax")
def softmax_defaults(s, out, target) -> dict:
    """Tiles whose exp stage fits TILE_BYTES: rows x the last axis, or the softmax axis x a
    column chunk."""
    st = s.state.stage(out)
    item = dtypes.bits(st.dtype) // 8
    along = st.shape[softmax_axis(s, out)]
    return {
        "rows": max(1, min(SOFTMAX_ROWS, TILE_BYTES // (item * st.shape[-1]))),
        "vector": _softmax_vector(target, st.dtype, st.shape[-1]),
        "lanes": default_lanes(s.state.stage(producer(s, out, "softmax_sum")), target),
        "chunk": max(8, min(CHUNK, TILE_BYTES // (item * along)) // 8 * 8),
        "parallel": worth_parallel(input_bytes(s, out), target),
    }


@template("layer_norm", LAYER_NORM_PARAMS)
def schedule_layer_norm(s, out, target, rows=ROWS, vector=32, lanes=8, parallel=True):
    """layer_norm over the last axis: mean and variance per tile of `rows` rows (`lanes`
    vector partial results per row, 0 for none) in the `parallel` row-tile loop; the
    normalisation vectorized with `vector` lanes."""
    check_int("layer_norm", rows=rows, vector=vector)
    check_lanes("layer_norm", lanes)
    var = producer(s, out, "layer_norm_var")
    mean = producer(s, out, "layer_norm_mean")
    row_tiles(s, out, target, [mean, var], [], rows=rows, vector=vector, lanes=lanes, parallel=parallel)


@defaults("layer_norm")
def layer_norm_defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    return {
        "rows": ROWS,
        "vector": default_vector(target, st.dtype),
        "lanes": default_lanes(s.state.stage(producer(s, out, "layer_norm_mean")), target),
        "parallel": worth_parallel(input_bytes(s, out), target),
    }
