"""Mutators: a new candidate from an old one by changing one decision within its domain
(MetaSchedule never edits structure, only decisions). Each returns new decision values or None
when it finds nothing to change."""

from __future__ import annotations

from minitc.autotune.sampler import Decision
from minitc.errors import ScheduleError


def _pick(rng, decisions: list):
    return decisions[int(rng.integers(len(decisions)))] if decisions else None


def _replace(values: list, index: int, value) -> list:
    out = list(values)
    out[index] = value
    return out


def mutate_tile(decisions: list, rng):
    """Move a factor of one tile decision from one level to another (MetaSchedule's
    MutateTileSize); for template sketches, move a tile-size categorical to another value."""
    tiles = [n for n, d in enumerate(decisions) if d.kind == "tile" and len(d.domain) > 1]
    if tiles:
        n = _pick(rng, tiles)
        d: Decision = decisions[n]
        factors = list(d.value)
        src = [i for i, f in enumerate(factors) if f > 1]
        if src:
            i = _pick(rng, src)
            divisors = [x for x in range(2, factors[i] + 1) if factors[i] % x == 0]
            x = _pick(rng, divisors)
            j = _pick(rng, [k for k in range(len(factors)) if k != i])
            factors[i] //= x
            factors[j] *= x
            if tuple(factors) in d.domain:
                return _replace([e.value for e in decisions], n, tuple(factors))
        return _replace([e.value for e in decisions], n, _other(d, rng))
    numeric = [
        n
        for n, d in enumerate(decisions)
        if d.kind == "categorical"
        and len(d.domain) > 1
        and _numbers(d.domain)
        and not d.name.endswith((".unroll", ".parallel"))
    ]
    return _change(decisions, numeric, rng)


def _numbers(domain) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in domain)


def _other(d: Decision, rng):
    options = [v for v in d.domain if v != d.value]
    return _pick(rng, options) if options else d.value


def _change(decisions: list, eligible: list, rng):
    if not eligible:
        return None
    n = _pick(rng, eligible)
    return _replace([e.value for e in decisions], n, _other(decisions[n], rng))


def mutate_unroll(decisions: list, rng):
    return _change(
        decisions, [n for n, d in enumerate(decisions) if d.name.endswith(".unroll") and len(d.domain) > 1], rng
    )


def mutate_compute_location(decisions: list, rng):
    return _change(decisions, [n for n, d in enumerate(decisions) if d.kind == "location" and len(d.domain) > 1], rng)


def mutate_parallel(decisions: list, rng):
    return _change(
        decisions, [n for n, d in enumerate(decisions) if d.name.endswith(".parallel") and len(d.domain) > 1], rng
    )


def mutate_other(decisions: list, rng):
    """Any other categorical option (a template switch, the inline choice, ...)."""
    eligible = [n for n, d in enumerate(decisions) if n > 0 and d.kind == "categorical" and len(d.domain) > 1]
    return _change(decisions, eligible, rng)


# MetaSchedule's CPU probabilities (tile 0.9, compute location 0.05, unroll 0.03, parallel
# 0.02), with a little weight for the template options it does not have.
MUTATORS = (
    (mutate_tile, 0.85),
    (mutate_compute_location, 0.05),
    (mutate_unroll, 0.03),
    (mutate_parallel, 0.02),
    (mutate_other, 0.05),
)


def mutate(decisions: list, rng, attempts: int = 10):
    """Apply a mutator chosen by probability; None if no mutator could change anything."""
    fns = [m for m, _ in MUTATORS]
    weights = [w for _, w in MUTATORS]
    total = sum(weights)
    for _ in range(attempts):
        fn = fns[int(rng.choice(len(fns), p=[w / total for w in weights]))]
        values = fn(decisions, rng)
        if values is not None:
            return values
    return None


def edit(space, candidate, rng, steps: int = 1):
    """`candidate` after `steps` mutations, each replayed in `space` (values a change makes
    illegal are re-drawn); it stops at the first edit the space rejects."""
    for _ in range(steps):
        values = mutate(candidate.decisions, rng)
        if values is None:
            continue
        try:
            candidate = space.replay(values, rng, strict=False)
        except ScheduleError:
            break
    return candidate


def is_switch(d: Decision) -> bool:
    """A template's or sketch's on/off or named option (pack_a, unroll_window, pad, inline...):
    a categorical whose values are not numbers, other than the sketch itself."""
    return d.kind == "categorical" and d.name != "sketch" and len(d.domain) > 1 and not _numbers(d.domain)


def switch_flips(space, candidate, rng=None) -> list:
    """Every candidate that differs from `candidate` in one switch. The mutators above change a
    given switch in under 1% of edits (conv-resnet's unroll_window: 0.6%), though one switch can
    be worth 10% there, so a search sweeps them all around its best program. A flip that makes
    later decisions illegal (cache_write adds or drops a stage's tiles) re-draws them with
    `rng`; without one it is left out."""
    out, values = [], candidate.values
    for n, d in enumerate(candidate.decisions):
        if not is_switch(d):
            continue
        for v in d.domain:
            if v == d.value:
                continue
            flipped = _flipped(space, _replace(values, n, v), rng)
            if flipped is not None:
                out.append(flipped)
    return out


def _flipped(space, values: list, rng):
    try:
        return space.replay(values)
    except ScheduleError:  # the flip changed which later decisions exist or are legal
        pass
    try:
        return space.replay(values, rng, strict=False) if rng is not None else None
    except ScheduleError:
        return None
