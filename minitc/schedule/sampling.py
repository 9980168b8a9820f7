"""Sampling instructions of a `Schedule` (MetaSchedule's): a schedule program that asks for its
numbers instead of writing them is a design space.

    def my_space(s):
        i, j = s.loops(C)
        jo, ji = s.split(j, factor=s.sample_perfect_tile(j, 2)[1])
        s.unroll(ji) if s.sample_categorical([True, False]) else None

    tc.tune(C, space=my_space)            # the tuner's Sampler answers every instruction
    s = tc.Schedule(C); my_space(s)       # outside tuning: the documented defaults below

Each instruction computes its slot's legal values from the schedule (divisor tilings of the
loop's extent, the values given, the consumer's loops) and asks `s.sampler`, which the tuner
sets (minitc.autotune.sampler.Sampler: random draws, or a recorded decision replayed). With no
sampler it returns the slot's default, `default_choice`:

- `sample_perfect_tile`: the most balanced tiling (the largest factor as small as possible,
  then the largest innermost factor), e.g. 64 in 2 parts -> (8, 8), 12 -> (3, 4);
- `sample_categorical`: the most probable value, the first one on ties (no `probs`: the first);
- `sample_compute_location`: "root" (the stage stays where it is; the instruction returns None).

An instruction is not a step: the trace records only the primitives its answers feed (the
sampled numbers appear as the steps' arguments), so a tuned program replays without its space.
"""

from __future__ import annotations

import math
from functools import lru_cache

from minitc.errors import ScheduleError

PLAIN = (bool, int, float, str, type(None))  # what a decision value may be (records store JSON)


@lru_cache(maxsize=4096)
def factorizations(extent: int, parts: int, max_innermost: int | None = None) -> tuple:
    """Every ordered tuple of `parts` positive ints whose product is `extent` (outermost
    first), optionally with the innermost factor at most `max_innermost`."""
    if parts == 1:
        return ((extent,),) if max_innermost is None or extent <= max_innermost else ()
    out = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out.extend((d,) + rest for rest in factorizations(extent // d, parts - 1, max_innermost))
    return tuple(out)


def default_choice(kind: str, domain: tuple, probs=None):
    """The value a sampling instruction takes outside tuning (see the module's docstring)."""
    if kind == "tile":
        return min(domain, key=lambda t: (sorted(t, reverse=True), -t[-1]))
    if kind == "categorical" and probs is not None:
        return domain[max(range(len(domain)), key=lambda n: (probs[n], -n))]
    return domain[0]


def check_probs(values: tuple, probs) -> tuple | None:
    """`probs` as a tuple of floats, or a ScheduleError saying what is wrong with them."""
    if probs is None:
        return None
    try:
        probs = tuple(float(p) for p in probs)
    except (TypeError, ValueError):
        raise ScheduleError(f"sample_categorical: probs must be numbers, got {probs!r}") from None
    if len(probs) != len(values):
        raise ScheduleError(f"sample_categorical: {len(values)} values but {len(probs)} probs; give one per value")
    if any(not math.isfinite(p) or p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        raise ScheduleError(f"sample_categorical: probs must be >= 0 and sum to 1, got {probs} (sum {sum(probs):g})")
    return probs


def check_values(values) -> tuple:
    """The candidates of sample_categorical as a tuple (lists become tuples), checked."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ScheduleError(f"sample_categorical: values must be a list of candidates, got {values!r}")
    out = tuple(tuple(v) if isinstance(v, list) else v for v in values)
    if not out:
        raise ScheduleError("sample_categorical: no values to choose from")
    for v in out:
        items = v if isinstance(v, tuple) else (v,)
        if not all(isinstance(x, PLAIN) for x in items):
            raise ScheduleError(
                f"sample_categorical: value {v!r} is not a number, string, boolean, None or tuple of them "
                "(decisions are stored in the tuning records as JSON)"
            )
    if len(set(out)) != len(out):
        raise ScheduleError(f"sample_categorical: values {out} repeat; list each candidate once")
    return out


class SamplingInstructions:
    """The sampling instructions of `Schedule` (a mixin: it uses the schedule's loops and
    stages). `sampler`: what answers them (None: the defaults)."""

    sampler = None

    def _slot(self, name, default: str) -> str:
        return default if name is None else str(name)

    def sample_perfect_tile(self, loop, n: int, max_innermost: int | None = None, name=None) -> tuple:
        """`n` factors (outermost first) whose product is `loop`'s extent, e.g. for
        `s.split`: `outer, inner = s.split(loop, factor=tile[1])`. `max_innermost` caps the
        last factor. Default: the most balanced tiling."""
        ref = self._loop(loop)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScheduleError(f"sample_perfect_tile of loop {ref.name}: n must be a whole number >= 1, got {n!r}")
        extent = self.state.stage(ref.stage).loop(ref.name).extent
        domain = factorizations(int(extent), n, max_innermost)
        if not domain:
            raise ScheduleError(
                f"sample_perfect_tile of loop {ref.name}: no tiling of {extent} in {n} parts has an innermost "
                f"factor <= {max_innermost}"
            )
        slot = self._slot(name, f"{ref.stage}.{ref.name}")
        if self.sampler is None:
            return default_choice("tile", domain)
        return tuple(self.sampler.perfect_tile(slot, extent, n, max_innermost))

    def sample_categorical(self, values, probs=None, name=None):
        """One of `values` (numbers, strings, booleans, None or tuples of them), drawn with
        `probs` (non-negative, summing to 1; default uniform) when tuning. Default: the most
        probable value (the first one on ties)."""
        domain = check_values(values)
        probs = check_probs(domain, probs)
        slot = self._slot(name, f"choice{len(getattr(self.sampler, 'decisions', ()))}")
        if self.sampler is None:
            return default_choice("categorical", domain, probs)
        return self.sampler.categorical(slot, domain, probs=probs)

    def sample_compute_location(self, tensor, name=None):
        """A loop of the single consumer of `tensor`'s stage to compute it at (pass it to
        `s.compute_at`), or None for "root" (the stage stays where it is). The candidates are
        the consumer's loops that are not vectorized. Default: None."""
        stage = self.stage_name(tensor)
        st = self.state.stage(stage)
        if st.is_placeholder or st.output or st.inline:
            what = "an input" if st.is_placeholder else "an output" if st.output else "inlined"
            raise ScheduleError(f"sample_compute_location of {stage}: the stage is {what}; it has no compute location")
        consumers = self.state.consumers(stage)
        if len(consumers) != 1:
            raise ScheduleError(
                f"sample_compute_location of {stage}: it has {len(consumers)} consumers "
                f"({', '.join(c.name for c in consumers) or 'none'}); it must have exactly one"
            )
        consumer = consumers[0]
        domain = ("root",) + tuple(lp.name for lp in consumer.loops if lp.kind != "vectorized")
        slot = self._slot(name, f"{stage}.location")
        where = domain[0] if self.sampler is None else self.sampler.compute_location(slot, domain)
        return None if where == "root" else self._ref(consumer.name, where)
