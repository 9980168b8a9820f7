"""Generic schedule rules (MetaSchedule's, for any computation): auto-inline, multi-level
tiling "SSRSRS" with an optional local write cache, epilogue fusion, random compute location,
parallelize / vectorize / unroll. Every number comes from the sampler.

Multi-level tiling of a stage with spatial axes S and reduction axes R: each spatial axis is
split into four levels and each reduction axis into two, and the loops are ordered

    S0 S1 R0 S2 R1 S3        (all spatial level-0 loops, then level 1, ...)

Leading S0 loops are fused into the parallel loop, S3 of the last axis is vectorized, and the
innermost loops are unrolled up to the sampled unroll step. With the write cache, the stage is
computed into a local tile attached under S1 (the register tile: loops R0 S2 R1 S3), and the
copy-out carries the elementwise epilogue.
"""

from __future__ import annotations

from minitc.autotune.sampler import Sampler

UNROLL_STEPS = (0, 16, 64, 512)
MAX_LANES = 64


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def split_levels(s, loop, factors) -> list:
    """Split `loop` into len(factors) loops with those extents (outermost first)."""
    parts, rest = [], loop
    for n in range(len(factors) - 1):
        outer, rest = s.split(rest, factor=_product(factors[n + 1 :]))
        parts.append(outer)
    return parts + [rest]


def auto_inline(s, sampler: Sampler) -> None:
    """Elementwise intermediate stages: inline into their consumers, or keep (sampled)."""
    for st in list(s.state.stages):
        if st.is_placeholder or st.output or st.reduce_axes or st.inline or not s.state.consumers(st.name):
            continue
        if sampler.categorical(f"{st.name}.inline", (True, False)):
            s.compute_inline(st.name)


def _loop_groups(s, stage: str):
    st = s.state.stage(stage)
    loops = s.loops(stage)
    spatial = [lp for lp, meta in zip(loops, st.loops) if not meta.reduce]
    reduce = [lp for lp, meta in zip(loops, st.loops) if meta.reduce]
    return st, spatial, reduce


def tile(s, stage: str, sampler: Sampler, s_levels: int, r_levels: int, prefix: str = "") -> tuple:
    """Split every spatial loop into `s_levels` and every reduction loop into `r_levels`
    perfect tiles; returns (spatial levels, reduction levels), each a list of loop lists."""
    st, spatial, reduce = _loop_groups(s, stage)
    S = [[] for _ in range(s_levels)]
    R = [[] for _ in range(r_levels)]
    for n, lp in enumerate(spatial):
        cap = MAX_LANES if n == len(spatial) - 1 else None
        factors = sampler.perfect_tile(f"{prefix}{stage}.{lp.name}", st.loop(lp.name).extent, s_levels, cap)
        for level, part in enumerate(split_levels(s, lp, factors)):
            S[level].append(part)
    for lp in reduce:
        factors = sampler.perfect_tile(f"{prefix}{stage}.{lp.name}", st.loop(lp.name).extent, r_levels)
        for level, part in enumerate(split_levels(s, lp, factors)):
            R[level].append(part)
    return S, R


def parallelize(s, outer: list, sampler: Sampler, name: str) -> None:
    """Fuse the first n of the outer spatial loops (n sampled, 0 = serial) into a parallel loop."""
    n = sampler.categorical(f"{name}.parallel", tuple(range(len(outer) + 1)))
    if n:
        s.parallel(s.fuse(*outer[:n]) if n > 1 else outer[0])


def vectorize_and_unroll(s, stage: str, sampler: Sampler, name: str) -> None:
    """Vectorize the innermost loop if it is spatial and short enough; unroll the innermost
    loops whose iteration count stays within the sampled unroll step."""
    st = s.state.stage(stage)
    loops = s.loops(stage)
    inner = st.loops[-1]
    vectorized = not inner.reduce and 1 < inner.extent <= MAX_LANES
    if vectorized:
        s.vectorize(loops[-1])
    step = sampler.categorical(f"{name}.unroll", UNROLL_STEPS)
    body = inner.extent if vectorized else 1
    for lp, meta in reversed(list(zip(loops, st.loops))[: len(loops) - int(vectorized)]):
        if body * meta.extent > step:
            break
        body *= meta.extent
        if meta.extent > 1:
            s.unroll(lp)


def multi_level_tiling(s, stage: str, sampler: Sampler) -> None:
    """SSRSRS on `stage`, optionally through a local write cache (sampled)."""
    st = s.state.stage(stage)
    use_cache = bool(st.reduce_axes) and sampler.categorical(f"{stage}.cache_write", (True, False))
    if not use_cache:
        S, R = tile(s, stage, sampler, 4, 2)
        s.reorder(*S[0], *S[1], *R[0], *S[2], *R[1], *S[3])
        parallelize(s, S[0], sampler, stage)
        vectorize_and_unroll(s, stage, sampler, stage)
        return
    cache = s.cache_write(stage, "local")
    S, _ = tile(s, stage, sampler, 2, 0)  # the copy-out: tiles of the S0 x S1 levels
    s.reorder(*S[0], *S[1])
    s.compute_at(cache, S[0][-1])
    S2, R = tile(s, cache.name, sampler, 2, 2, prefix="cache.")
    s.reorder(*R[0], *S2[0], *R[1], *S2[1])
    parallelize(s, S[0][:-1] or S[0], sampler, stage)
    vectorize_and_unroll(s, stage, sampler, stage)
    vectorize_and_unroll(s, cache.name, sampler, cache.name)


def compute_locations(s, anchor: str, sampler: Sampler) -> None:
    """Every other stage with a single consumer goes at a sampled loop of that consumer (or
    stays at the root)."""
    for st in reversed(list(s.state.stages)):
        if st.is_placeholder or st.inline or st.output or st.name == anchor or st.attach is not None:
            continue
        consumers = s.state.consumers(st.name)
        if len(consumers) != 1 or consumers[0].inline:
            continue
        consumer = consumers[0]
        loops = [lp.name for lp in consumer.loops if lp.kind != "vectorized"]
        where = sampler.compute_location(f"{st.name}.location", ("root",) + tuple(loops))
        if where != "root":
            s.compute_at(st.name, s.loops(consumer.name)[[lp.name for lp in consumer.loops].index(where)])
            _, spatial, reduce = _loop_groups(s, st.name)
            if reduce and spatial:
                s.reorder(*reduce, *spatial)
            vectorize_and_unroll(s, st.name, sampler, st.name)


def generic_sketch(s, out: str, target, sampler: Sampler) -> None:
    """The rule-based design space for any single-output computation."""
    auto_inline(s, sampler)
    multi_level_tiling(s, out, sampler)
    compute_locations(s, out, sampler)
