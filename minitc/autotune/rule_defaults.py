"""The generic rules' analytical defaults: the decisions multi-level tiling takes outside tuning
(sampler.DefaultSampler), derived from the target description the way the GEMM templates
derive theirs (templates/gemm_blocking.py). A computation that has no template therefore
builds as a register-blocked, vectorized, parallel program, not as the naive loop nest.

For a stage with spatial axes S and reduction axes R:

- the last spatial axis is the vector axis, and another gives the rows of a register tile of
  rows x vectors accumulators: the innermost axis that the reads loaded as vectors do not
  index (or index only as `axis // k`, then at most k rows), so each vector loaded serves every
  row; else a contraction's innermost M axis (templates/contraction.py), else the spatial axis
  before the vector one. The tile is the one of `gemm_blocking.register_tiles` whose extents
  divide the axes' and that `gemm_blocking.efficiency` rates best;
- the whole reduction runs inside that tile, so its accumulators stay in registers;
- the outer tiles are fused into the parallel loop until every core has several chunks,
  where the work pays for the threads (the elementwise template's rule);
- the register tile is unrolled.

Search samples every other value of the same slots; these are only where it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minitc import dtypes
from minitc.expr import Binary, Const, IterVar
from minitc.target import is_gpu
from minitc.templates.contraction import find_contraction
from minitc.templates.elementwise import worth_parallel
from minitc.templates.gemm_blocking import efficiency, register_tiles

CHUNKS_PER_CORE = 4  # parallel iterations per core, so uneven chunks still balance


@dataclass(frozen=True)
class RegisterTile:
    """The inner extent of each spatial axis in the register tile (1 for axes not named)."""

    inner: dict

    def of(self, axis: str) -> int:
        return self.inner.get(axis, 1)

    @property
    def size(self) -> int:
        out = 1
        for n in self.inner.values():
            out *= n
        return out


NO_TILE = RegisterTile({})


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def register_tile(stage, target, max_lanes: int) -> RegisterTile:
    """The register tile of `stage` (a schedule state's Stage, before tiling) on `target`."""
    spatial = [lp for lp in stage.loops if not lp.reduce]
    if target is None or is_gpu(target) or not spatial:
        return NO_TILE
    hw, lanes = target.hardware, target.lanes(stage.dtype)
    vector = spatial[-1]
    rows, cap = _rows_axis(stage, spatial)
    best = None
    for tile_rows, vecs in register_tiles(hw):
        cols = vecs * lanes
        if vector.extent % cols or cols > max_lanes:
            continue
        r = _largest_divisor(rows.extent, min(tile_rows, cap)) if rows is not None else 1
        score = (efficiency(hw, r, vecs), r * vecs)
        if best is None or score > best[0]:
            best = (score, r, cols)
    if best is None:  # no whole vectors divide the axis: a part of one, and rows as for one vector
        cols = _largest_divisor(vector.extent, min(lanes, max_lanes))
        one_vector = [t for t, v in register_tiles(hw) if v == 1] or [1]
        r = _largest_divisor(rows.extent, min(max(one_vector), cap)) if rows is not None else 1
        best = (None, r, cols)
    _, r, cols = best
    inner = {vector.name: cols}
    if rows is not None:
        inner[rows.name] = r
    return RegisterTile(inner)


def work_bytes(stage) -> int:
    """The stage's loop iterations (reductions included, before any split) times its element
    size: what a parallel launch has to pay for."""
    out = dtypes.bits(stage.dtype) // 8
    for lp in stage.loops:
        out *= lp.extent
    return out


def _reuse(index, axis: str) -> float:
    """How many consecutive values of `axis` read the same element through `index`: 1 where the
    index uses the axis itself, k where it uses only `axis // k`, unbounded where it does not."""
    if isinstance(index, IterVar):
        return 1 if index.name == axis else math.inf
    if isinstance(index, Binary) and index.op == "floordiv" and isinstance(index.a, IterVar):
        if index.a.name == axis and isinstance(index.b, Const):
            return int(index.b.value)
    return min((_reuse(child, axis) for child in index.children()), default=math.inf)


def _rows_axis(stage, spatial: list) -> tuple:
    """(the axis of the register tile's rows, the most rows it may take). The innermost spatial
    axis that the reads loaded as vectors (those indexing the vector axis) do not index, or
    index only as `axis // k` (then at most k rows, which read the same vectors: a grouped
    convolution's output channels), so each vector loaded serves every row; else the innermost
    M axis of a contraction, else the axis before the vector one."""
    vector = spatial[-1].name
    loaded = [r for r in stage.reads() if any(_reuse(index, vector) == 1 for index in r.indices)]
    for lp in reversed(spatial[:-1]):
        cap = min((_reuse(index, lp.name) for r in loaded for index in r.indices), default=math.inf)
        if lp.extent > 1 and cap > 1:
            return lp, cap
    row_axes = _row_axes(stage)
    rows = next((lp for lp in reversed(spatial[:-1]) if lp.extent > 1 and lp.name in row_axes), None)
    return rows, math.inf


def _row_axes(stage) -> set:
    """The axes a register tile's rows may take: a contraction's M and batch axes (not read by
    the operand loaded as vectors), else any spatial axis."""
    found = find_contraction(stage)
    if found is None or not (found.m or found.batch):
        return {ax.name for ax in stage.axes}
    return set(found.m) | set(found.batch)


def parallel_loops(extents: list, target, work_bytes: int) -> int:
    """How many of the outer loops (of these extents, outermost first) to fuse into the parallel
    loop: none where `work_bytes` (an iteration's element per iteration) does not pay for a
    thread-pool launch, else the fewest that give every core CHUNKS_PER_CORE iterations, else
    all of them."""
    if target is None or not worth_parallel(work_bytes, target):
        return 0
    cores = target.num_cores
    product = 1
    for n, extent in enumerate(extents, 1):
        product *= extent
        if product >= cores * CHUNKS_PER_CORE:
            return n
    return len(extents)


def unroll_step(steps: tuple, body: int) -> int:
    """The smallest unroll step that unrolls a register tile of `body` elements (the largest
    step where none does)."""
    return next((step for step in steps if step >= body), steps[-1])
