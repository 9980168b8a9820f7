"""Reduction template (sum/max/min/mean over any axes), and the reduction helper that the
softmax and layer_norm templates reuse for their per-row statistics.

A vectorized loop must be spatial, so the vector lanes always run over *output* elements.
Which output axis depends on where the input's contiguous (last) axis went:

kept (e.g. sum over axis 0): vectorize it; the reduction loops sit between a parallel chunk
loop and the vector loop, so each task streams whole rows of its column chunk and keeps the
chunk of accumulators in L1:

    for [outer, c] in parallel(...):          # column chunks of `chunk` elements
        for k in range(K):                    # reduction loops
            for j_m in range(chunk / lanes):
                for j_i in vectorized(lanes):
                    y[.., c*chunk + j_m*lanes + j_i] += x[k, .., c*chunk + j_m*lanes + j_i]

reduced (e.g. row sums): run `rows` independent accumulators, one per output row, with the
reduction loop outside them. The unrolled rows are `rows` independent chains that LLVM's SLP
vectorizer packs into one vector (a per-lane load each, with constant row offsets), so the
reduction runs at the load rate instead of the add latency:

    for r_o in parallel(R / rows):
        for k in range(K):
            for r_i in unrolled(rows):
                y[r_o*rows + r_i] += x[r_o*rows + r_i, k]

No output axis of extent > 1 (a full reduction): a serial loop (needs an rfactor-style
intermediate stage to vectorize, which the primitives do not offer).
"""

from __future__ import annotations

from minitc import dtypes
from minitc.expr import IterVar, walk
from minitc.templates import defaults, template
from minitc.templates.elementwise import (
    check_int,
    default_vector,
    extent,
    numel,
    parallelize,
    pick_lanes,
    pick_tile,
    worth_parallel,
)

CHUNK_BYTES = 16 * 1024  # accumulators per column chunk: a whole 16 KiB row segment per pass
# (long contiguous runs keep the prefetchers streaming; the chunk of accumulators stays in L1)
CHUNK = CHUNK_BYTES // 4
ROWS = 8  # independent row accumulators (one AVX2 vector of float32)


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


def schedule_reduction(s, name: str, *, vector: int, rows: int, chunk: int, parallel: bool) -> None:
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
        lanes = pick_lanes(n, vector)
        c = pick_chunk(n, chunk, lanes)
        if c < n:
            spatial[p], v = s.split(v, factor=c)
        else:
            del spatial[p]
        inner = list(s.split(v, factor=lanes)) if lanes < min(c, n) else [v]
        s.reorder(*spatial, *red, *inner)
        s.vectorize(inner[-1])
    else:
        wide = [q for q, lp in enumerate(spatial) if extent(s, lp) > 1]
        if kind != "reduced" or not wide:
            parallelize(s, [lp for lp in spatial if extent(s, lp) > 1], parallel)
            return
        p = wide[-1]  # the innermost kept axis: its rows are nearest in memory
        v = spatial[p]
        n = extent(s, v)
        t = pick_tile(n, rows)
        if t < n:
            spatial[p], v = s.split(v, factor=t)
        else:
            del spatial[p]
        s.reorder(*spatial, *red, v)
        s.unroll(v)
    parallelize(s, spatial, parallel)


@template("reduce")
def schedule_reduce(s, out, target, vector=32, rows=ROWS, chunk=CHUNK, parallel=True):
    """sum/max/min/mean over any axes: vector lanes over the kept contiguous axis (`vector`,
    column chunks of `chunk`), or `rows` unrolled row accumulators when the contiguous axis is
    reduced; the outer output loops fused and `parallel`."""
    check_int("reduce", vector=vector, rows=rows, chunk=chunk)
    schedule_reduction(s, out, vector=vector, rows=rows, chunk=chunk, parallel=parallel)


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


@defaults("reduce")
def reduce_defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    vector = default_vector(target, st.dtype)
    return {
        "vector": vector,
        "rows": ROWS,
        "chunk": default_chunk(st, vector, target),
        "parallel": worth_parallel(input_bytes(s, out), target),
    }
