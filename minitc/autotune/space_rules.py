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

Each rule is a `ScheduleRule`, and the generic space applies the registered rules in order
(`RULES`: auto-inline, multi-level tiling, compute location). A user adds one for every
workload of the generic space (e.g. for a new operator family) with `register_rule`, or
passes a list of rules to one space (`GenericSketch(rules=...)`, generators.py).
"""

from __future__ import annotations

from minitc.autotune import rule_defaults
from minitc.autotune.rule_defaults import NO_TILE, RegisterTile
from minitc.autotune.sampler import Sampler
from minitc.errors import ConfigError

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


def tile(
    s, stage: str, sampler: Sampler, s_levels: int, r_levels: int, prefix: str = "", regs: RegisterTile = NO_TILE
) -> tuple:
    """Split every spatial loop into `s_levels` and every reduction loop into `r_levels`
    perfect tiles; returns (spatial levels, reduction levels), each a list of loop lists. The
    defaults: `regs`'s extent innermost and the rest outermost; reductions whole in the last
    level (inside the register tile)."""
    st, spatial, reduce = _loop_groups(s, stage)
    S = [[] for _ in range(s_levels)]
    R = [[] for _ in range(r_levels)]
    for n, lp in enumerate(spatial):
        cap = MAX_LANES if n == len(spatial) - 1 else None
        extent, inner = st.loop(lp.name).extent, regs.of(lp.name)
        default = (extent // inner,) + (1,) * (s_levels - 2) + (inner,)
        factors = sampler.perfect_tile(f"{prefix}{stage}.{lp.name}", extent, s_levels, cap, default=default)
        for level, part in enumerate(split_levels(s, lp, factors)):
            S[level].append(part)
    for lp in reduce:
        extent = st.loop(lp.name).extent
        default = (1,) * (r_levels - 1) + (extent,)
        factors = sampler.perfect_tile(f"{prefix}{stage}.{lp.name}", extent, r_levels, default=default)
        for level, part in enumerate(split_levels(s, lp, factors)):
            R[level].append(part)
    return S, R


def parallelize(s, outer: list, sampler: Sampler, name: str, target=None, work: int = 0) -> None:
    """Fuse the first n of the outer spatial loops (n sampled, 0 = serial) into a parallel loop;
    by default as many as spread `work` bytes over the target's cores (rule_defaults.py)."""
    st = s.state.stage(name)
    default = rule_defaults.parallel_loops([st.loop(lp.name).extent for lp in outer], target, work)
    n = sampler.categorical(f"{name}.parallel", tuple(range(len(outer) + 1)), default=default)
    if n:
        s.parallel(s.fuse(*outer[:n]) if n > 1 else outer[0])


def vectorize_and_unroll(s, stage: str, sampler: Sampler, name: str, regs: RegisterTile = NO_TILE) -> None:
    """Vectorize the innermost loop if it is spatial and short enough; unroll the innermost
    loops whose iteration count stays within the sampled unroll step (by default, the
    register tile's)."""
    st = s.state.stage(stage)
    loops = s.loops(stage)
    inner = st.loops[-1]
    vectorized = not inner.reduce and 1 < inner.extent <= MAX_LANES
    if vectorized:
        s.vectorize(loops[-1])
    default = rule_defaults.unroll_step(UNROLL_STEPS, regs.size) if regs.inner else None
    step = sampler.categorical(f"{name}.unroll", UNROLL_STEPS, default=default)
    body = inner.extent if vectorized else 1
    for lp, meta in reversed(list(zip(loops, st.loops))[: len(loops) - int(vectorized)]):
        if body * meta.extent > step:
            break
        body *= meta.extent
        if meta.extent > 1:
            s.unroll(lp)


def multi_level_tiling(s, stage: str, sampler: Sampler, target=None) -> None:
    """SSRSRS on `stage`, optionally through a local write cache (sampled). The defaults
    (rule_defaults.py): through the cache, a register tile for `target`, parallel outer tiles."""
    st = s.state.stage(stage)
    regs, work = rule_defaults.register_tile(st, target, MAX_LANES), rule_defaults.work_bytes(st)
    use_cache = bool(st.reduce_axes) and sampler.categorical(f"{stage}.cache_write", (True, False), default=True)
    if not use_cache:
        S, R = tile(s, stage, sampler, 4, 2, regs=regs)
        s.reorder(*S[0], *S[1], *R[0], *S[2], *R[1], *S[3])
        parallelize(s, S[0], sampler, stage, target, work)
        vectorize_and_unroll(s, stage, sampler, stage, regs)
        return
    cache = s.cache_write(stage, "local")
    S, _ = tile(s, stage, sampler, 2, 0, regs=regs)  # the copy-out: tiles of the S0 x S1 levels
    s.reorder(*S[0], *S[1])
    s.compute_at(cache, S[0][-1])
    S2, R = tile(s, cache.name, sampler, 2, 2, prefix="cache.", regs=regs)
    s.reorder(*R[0], *S2[0], *R[1], *S2[1])
    parallelize(s, S[0][:-1] or S[0], sampler, stage, target, work)
    vectorize_and_unroll(s, stage, sampler, stage, regs)
    vectorize_and_unroll(s, cache.name, sampler, cache.name, regs)


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


class ScheduleRule:
    """One rule of the generic design space (MetaSchedule's ScheduleRule). A rule schedules the
    workload further and takes every number it needs from the sampler, so its choices become
    decisions that search, mutation and the language model work on:

        class MyRule(ScheduleRule):
            name = "my-rule"
            def applies(self, s, out, target):      # optional: default True
                return s.state.stage(out).tag == "softmax"
            def apply(self, s, out, target, sampler):
                ...  # primitives on `s`; numbers from sampler.perfect_tile / categorical / compute_location

    `s` is the Schedule being built (the earlier rules have run), `out` the output stage's name,
    `target` the parsed Target. A rule's slot names (`f"{out}.my_choice"`) should be unique and
    stable: they label its decisions. An illegal combination raises ScheduleError (the search
    draws again). `name` identifies the rule in the registry."""

    name = ""

    def applies(self, s, out: str, target) -> bool:
        """Whether the rule has anything to do for this workload (default: always)."""
        return True

    def apply(self, s, out: str, target, sampler: Sampler) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define apply(s, out, target, sampler)")


class AutoInline(ScheduleRule):
    name = "auto-inline"

    def apply(self, s, out, target, sampler):
        auto_inline(s, sampler)


class MultiLevelTiling(ScheduleRule):
    name = "multi-level-tiling"

    def apply(self, s, out, target, sampler):
        multi_level_tiling(s, out, sampler, target)


class ComputeLocation(ScheduleRule):
    name = "compute-location"

    def apply(self, s, out, target, sampler):
        compute_locations(s, out, sampler)


RULES: dict = {}  # name -> ScheduleRule, in the order the generic space applies them


def register_rule(rule: ScheduleRule, before: str | None = None) -> None:
    """Add `rule` to the generic space of every workload (last, or before the rule named
    `before`); a rule of the same name is replaced in place."""
    if not isinstance(rule, ScheduleRule) or not rule.name:
        raise ConfigError(f"register_rule takes a ScheduleRule with a name, got {rule!r}")
    if before is not None and before not in RULES:
        raise ConfigError(f"register_rule: no rule named {before!r}; the rules are {', '.join(RULES)}")
    if rule.name in RULES or before is None:
        RULES[rule.name] = rule
        return
    items = list(RULES.items())
    at = [name for name, _ in items].index(before)
    RULES.clear()
    RULES.update(items[:at] + [(rule.name, rule)] + items[at:])


def unregister_rule(name: str) -> None:
    """Remove the rule `name` from the generic space (a ConfigError if there is none)."""
    if name not in RULES:
        raise ConfigError(f"unregister_rule: no rule named {name!r}; the rules are {', '.join(RULES)}")
    del RULES[name]


def apply_rules(s, out: str, target, sampler: Sampler, rules) -> None:
    """Apply each of `rules` that applies, in order."""
    for rule in rules:
        if rule.applies(s, out, target):
            rule.apply(s, out, target, sampler)


def generic_sketch(s, out: str, target, sampler: Sampler) -> None:
    """The rule-based design space for any single-output computation: the registered rules."""
    apply_rules(s, out, target, sampler, list(RULES.values()))


for _rule in (AutoInline(), MultiLevelTiling(), ComputeLocation()):
    register_rule(_rule)
