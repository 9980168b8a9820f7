"""Random schedules for the differential fuzzer.

`random_schedule(output, rng)` applies a random sequence of primitives — legal or not — to a
fresh schedule. A primitive that raises ScheduleError is skipped (and counted), so what comes
back is the schedule of the primitives that were accepted; lowering it may still raise
ScheduleError (rules checked on the whole schedule). Anything that lowers must compute exactly
what numpy computes.
"""

from __future__ import annotations

import numpy as np

import minitc as tc
from minitc.errors import ScheduleError
from minitc.schedule.state import LoopRef

PRIMITIVES = (
    "split",
    "split",
    "split",
    "reorder",
    "fuse",
    "unroll",
    "parallel",
    "vectorize",
    "vectorize",
    "compute_at",
    "compute_at",
    "reverse_compute_at",
    "compute_inline",
    "cache_write",
    "cache_read",
)


def _stages(s, computes_only=True):
    return [st for st in s.state.stages if not (computes_only and st.is_placeholder) and not st.inline]


def _pick(rng, items):
    return items[int(rng.integers(len(items)))] if items else None


def _random_loop(s, rng, stage=None):
    stage = stage or _pick(rng, _stages(s))
    if stage is None or not stage.loops:
        return None
    lp = _pick(rng, list(stage.loops))
    return LoopRef(stage.name, lp.name)


def _apply(s, rng, kind: str) -> None:
    stage = _pick(rng, _stages(s))
    if stage is None:
        return
    if kind == "split":
        loop = _random_loop(s, rng, stage)
        extent = stage.loop(loop.name).extent
        value = int(rng.integers(1, extent + 3))
        if rng.random() < 0.7:
            s.split(loop, factor=value)
        else:
            s.split(loop, nparts=value)
    elif kind == "reorder":
        loops = [LoopRef(stage.name, lp.name) for lp in stage.loops]
        picked = [loops[i] for i in rng.permutation(len(loops))[: max(2, int(rng.integers(1, len(loops) + 1)))]]
        if len(picked) >= 2:
            s.reorder(*picked)
    elif kind == "fuse":
        if len(stage.loops) >= 2:
            p = int(rng.integers(len(stage.loops) - 1))
            s.fuse(LoopRef(stage.name, stage.loops[p].name), LoopRef(stage.name, stage.loops[p + 1].name))
    elif kind in ("unroll", "parallel"):
        loop = _random_loop(s, rng, stage)
        if kind == "unroll" and stage.loop(loop.name).extent > 16:
            return
        getattr(s, kind)(loop)
    elif kind == "vectorize":
        # mostly the innermost loop (legal), sometimes any loop (often illegal)
        lp = stage.loops[-1] if rng.random() < 0.8 else _pick(rng, list(stage.loops))
        if lp.extent <= 16:
            s.vectorize(LoopRef(stage.name, lp.name))
    elif kind == "compute_at":
        consumers = s.state.consumers(stage.name)
        target = _pick(rng, consumers)
        if target is not None and target.loops:
            s.compute_at(stage.name, _random_loop(s, rng, target))
    elif kind == "reverse_compute_at":
        producers = [s.state.stage(n) for n in stage.read_stages()]
        producers = [p for p in producers if not p.is_placeholder and not p.inline]
        target = _pick(rng, producers)
        if target is not None:
            s.reverse_compute_at(stage.name, _random_loop(s, rng, target))
    elif kind == "compute_inline":
        s.compute_inline(stage.name)
    elif kind == "cache_write":
        s.cache_write(stage.name, "local")
    elif kind == "cache_read":
        src = _pick(rng, _stages(s, computes_only=False))
        readers = [c.name for c in s.state.consumers(src.name)]
        if readers:
            s.cache_read(src.name, "local", readers[: int(rng.integers(1, len(readers) + 1))])


def random_schedule(output, rng, steps: int | None = None) -> tuple:
    """A random schedule of `output`; returns (schedule, number of rejected primitives)."""
    s = tc.Schedule(output)
    rejected = 0
    for _ in range(steps if steps is not None else int(rng.integers(2, 12))):
        try:
            _apply(s, rng, _pick(rng, PRIMITIVES))
        except ScheduleError:
            rejected += 1
    return s, rejected


# NaN, infinities, signed zeros and denormals. No huge finite values: whether a sum of them
# overflows depends on the summation order, which schedules are free to change.
SPECIAL_VALUES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-310], "float64")


def with_special_values(arrays, rng) -> tuple:
    """Copies of the float arrays with a random share (1-20%) of entries replaced by special
    values, and NaN, the infinities and the other special values each at least once where at
    most half the array holds them."""
    out = []
    for a in arrays:
        if a.dtype.kind == "f":
            a = a.copy()
            flat = a.reshape(-1)
            hit = rng.random(flat.size) < rng.uniform(0.01, 0.2)
            flat[hit] = rng.choice(SPECIAL_VALUES, size=int(hit.sum())).astype(a.dtype)
            count = min(len(SPECIAL_VALUES), flat.size // 2)  # NaN and the infinities first
            flat[rng.choice(flat.size, count, replace=False)] = SPECIAL_VALUES[:count]
        out.append(a)
    return tuple(out)
