"""Generic GPU schedule rules: MetaSchedule's CUDA multi-level tiling, for any computation.

The anchor stage (the output, or the reduction under an elementwise output) is tiled in the
spirit of MetaSchedule's CUDA "SSSRRSRS" (without the virtual-thread level, and with the
register tile kept innermost): every spatial axis is split into three levels and every
reduction axis into three, ordered

    S0 S1 | R0 R1 R2 S2
    block   thread: its S2 tile accumulates in a local (register) cache computed at S1

S0 loops are fused and bound to blockIdx.x, S1 loops fused and bound to threadIdx.x. Each input
of the anchor is staged in shared memory per R0 step (sampled), filled cooperatively by all
the block's threads. Stages without a reduction are flat-bound with a sampled block size.

Every factor is drawn from a short list of values that divide what is left of the extent, so
the sampled tiles are bounded (at most 1024 threads and 64 registers of tile per thread, checked
before anything is lowered) and nearly every draw is a legal program.
"""

from __future__ import annotations

from minitc.arith import affine
from minitc.autotune.sampler import Sampler
from minitc.autotune.space_rules import split_levels
from minitc.dtypes import bits
from minitc.errors import ScheduleError
from minitc.templates.elementwise import inline_producers
from minitc.templates.gpu import MAX_THREADS, SHARED_BYTES, bind_flat, bind_unbound
from minitc.templates.gpu.gemm import cooperative_fetch

THREAD_FACTORS = (1, 2, 4, 8, 16, 32, 64)
REGISTER_FACTORS = (1, 2, 4, 8)
BLOCK_SIZES = (64, 128, 256, 512, 1024)
REDUCE_STEPS = (1, 2, 4, 8, 16, 32)
MAX_REGISTER_TILE = 64


def _within(values: tuple, budget: int) -> tuple:
    return tuple(v for v in values if v <= budget)


def _divisors_in(extent: int, values: tuple) -> tuple:
    return tuple(v for v in values if extent % v == 0) or (1,)


def multi_level_tiling_gpu(s, out: str, anchor: str, sampler: Sampler) -> None:
    """SSRRSRS on `anchor`: tiled through a local cache computed per thread inside `out`."""
    if anchor == out:
        anchor = s.stage_name(s.cache_write(out, "local"))
    st = s.state.stage(out)
    loops = s.loops(out)
    # the output's loops: per spatial axis (block, thread, rest); the rest holds S2 x S3
    levels, threads, regs, block_extent = [], 1, 1, []
    for ref, lp in zip(loops, st.loops):
        n = lp.extent
        # only values within what is left of the thread and register budgets: legal by construction
        t = sampler.categorical(
            f"{out}.{lp.name}.threads", _divisors_in(n, _within(THREAD_FACTORS, MAX_THREADS // threads))
        )
        tile = sampler.categorical(
            f"{out}.{lp.name}.tile", _divisors_in(n // t, _within(REGISTER_FACTORS, MAX_REGISTER_TILE // regs))
        )
        threads, regs = threads * t, regs * tile
        block_extent.append(t * tile)
        levels.append(split_levels(s, ref, (n // (t * tile), t, tile)))
    if threads > MAX_THREADS or regs > MAX_REGISTER_TILE:
        raise ScheduleError(f"GPU tiling of {out}: {threads} threads per block, {regs} accumulators per thread")
    blocks, thread_loops, rest = ([lv[k] for lv in levels] for k in range(3))
    s.reorder(*blocks, *thread_loops, *rest)
    s.bind(s.fuse(*blocks) if len(blocks) > 1 else blocks[0], "blockIdx.x")
    tx = s.fuse(*thread_loops) if len(thread_loops) > 1 else thread_loops[0]
    s.bind(tx, "threadIdx.x")
    s.compute_at(anchor, tx)
    acc = s.state.stage(anchor)
    refs = s.loops(anchor)
    spatial = [r for r, lp in zip(refs, acc.loops) if not lp.reduce]
    reduce = [r for r, lp in zip(refs, acc.loops) if lp.reduce]
    if not reduce:
        return
    r_levels = []
    extents = dict(zip(acc.axes, block_extent))  # what one block covers, per axis of the anchor
    for ref, lp, axis in zip(reduce, [lp for lp in acc.loops if lp.reduce], acc.reduce_axes):
        step = sampler.categorical(f"{anchor}.{lp.name}.step", _divisors_in(lp.extent, REDUCE_STEPS))
        extents[axis] = step
        inner = sampler.categorical(f"{anchor}.{lp.name}.inner", _divisors_in(step, REGISTER_FACTORS))
        r_levels.append(split_levels(s, ref, (lp.extent // step, step // inner, inner)))
    r0, r1, r2 = ([lv[k] for lv in r_levels] for k in range(3))
    s.reorder(*r0, *r1, *r2, *spatial)
    if sampler.categorical(f"{anchor}.unroll", (True, False)):
        for ref in spatial:
            s.unroll(ref)
    budget = SHARED_BYTES
    for name in list(s.state.stage(anchor).read_stages()):
        need = _tile_bytes(s.state.stage(anchor), name, extents)
        fits = need is not None and need <= budget  # offer shared memory only while it fits
        if sampler.categorical(f"{anchor}.{name}.shared", (True, False) if fits else (False,)):
            budget -= need
            cache = s.cache_read(name, "shared", [anchor])
            s.compute_at(cache, r0[-1])
            cooperative_fetch(s, cache, (1, threads))


def _tile_bytes(stage, name: str, extents: dict):
    """Bytes of the part of `name` one block reads per reduction step, when every index of
    every read is affine in the stage's axes (else None): per dimension, the span of the
    index as each axis runs over `extents[axis]` values."""
    reads = [r for r in stage.reads() if r.stage == name]
    size = 1
    for d in range(len(reads[0].indices)):
        lo_hi = []
        for r in reads:
            form = affine(r.indices[d], atoms=False)
            if form is None or any(v not in extents for v in form.coef):
                return None
            span = sum(abs(c) * (extents[v] - 1) for v, c in form.coef.items())
            lo_hi.append((form.offset, form.offset + span))
        size *= max(h for _, h in lo_hi) - min(lo for lo, _ in lo_hi) + 1
    return size * max(1, bits(reads[0].dtype) // 8)


def _anchor(s, out: str) -> str:
    """The stage to tile: the output if it reduces, else the reduction it applies an
    elementwise epilogue to (dense + bias + gelu), else the output."""
    st = s.state.stage(out)
    if st.reduce_axes:
        return out
    for name in st.read_stages():
        p = s.state.stage(name)
        if p.reduce_axes and not p.is_placeholder and len(s.state.consumers(name)) == 1 and p.shape == st.shape:
            return name
    return out


def gpu_generic_sketch(s, out: str, target, sampler: Sampler) -> None:
    """The rule-based GPU design space for any single-output computation."""
    inline_producers(s, out)
    anchor = _anchor(s, out)
    if s.state.stage(anchor).reduce_axes:
        multi_level_tiling_gpu(s, out, anchor, sampler)
    else:
        bind_flat(s, out, sampler.categorical(f"{out}.block", BLOCK_SIZES))
    for st in list(s.state.stages):  # padding: a select in the loads (or shared fill), or its own launch
        if st.tag == "pad" and not st.output and sampler.categorical(f"{st.name}.inline", (True, False)):
            s.compute_inline(st.name)
    for st in s.state.stages:  # the other stages (softmax's statistics, padding, ...): flat
        if st.is_placeholder or st.inline or st.attach is not None or st.name == out:
            continue
        if not any(lp.kind != "serial" for lp in st.loops):
            bind_flat(s, st.name, sampler.categorical(f"{st.name}.block", BLOCK_SIZES))
    bind_unbound(s)
