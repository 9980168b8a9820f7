"""Sampling instructions: where a design space takes its decisions.

A design space (space.py) is a function that schedules a computation and asks a `Sampler` for
every number it needs: `perfect_tile` (a factorisation of a loop extent), `categorical` (one of
a few candidates: unroll depth, vector width, a template option) and `compute_location` (a loop
to attach a stage to, or root/inline). The sampler records each answer with its domain, so a
program is (sketch, decisions), decisions can be mutated one at a time within their domains,
and the language model can be constrained to legal values slot by slot.

    sampler = Sampler(rng)                    # fresh random decisions
    sampler = Sampler(forced=[...])           # replay recorded decisions
    sampler = DefaultSampler()                # every slot's default (what tc.build runs)

A user's schedule program asks the same questions through the schedule's sampling
instructions (`s.sample_perfect_tile`, ...: minitc/schedule/sampling.py), which call the
sampler the space sets on the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitc.errors import ScheduleError
from minitc.schedule.sampling import default_choice, factorizations

__all__ = ["Decision", "DefaultSampler", "Sampler", "factorizations"]


@dataclass(frozen=True)
class Decision:
    kind: str  # "tile" | "categorical" | "location"
    name: str  # the slot, e.g. "matmul.j.tile"
    domain: tuple  # every legal value, in a fixed order
    value: object

    @property
    def index(self) -> int:
        return self.domain.index(self.value)


def _plain(value):
    """Numpy scalars and lists from JSON become plain Python values / tuples."""
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


class Sampler:
    """Answers sampling instructions at random, or from `forced` decisions (one value per slot,
    in order). With `on_invalid="random"`, a forced value outside its slot's domain (an earlier
    decision changed the domain) is replaced by a random one instead of raising."""

    def __init__(self, rng=None, forced: list | None = None, on_invalid: str = "raise"):
        self.rng = rng if rng is not None else np.random.default_rng()
        self.forced = [_plain(v) for v in forced] if forced is not None else None
        self.on_invalid = on_invalid
        self.decisions: list = []
        self._probs = None  # the weights of the categorical being drawn (None: uniform)
        self._default = None  # the rule's analytical default for the slot being drawn (DefaultSampler's answer)

    def _draw(self, kind: str, domain: tuple):
        """A random value of the slot (weighted by `probs` for a categorical that has them)."""
        if self._probs is not None:
            return domain[int(self.rng.choice(len(domain), p=np.asarray(self._probs) / sum(self._probs)))]
        return domain[int(self.rng.integers(len(domain)))]

    def _take(self, kind: str, name: str, domain: tuple):
        if not domain:
            raise ScheduleError(f"decision {name}: no legal value")
        n = len(self.decisions)
        if self.forced is not None and n < len(self.forced):
            value = self.forced[n]
            if value not in domain:
                if self.on_invalid != "random":
                    raise ScheduleError(f"decision {n} ({name}): {value!r} is not one of its legal values")
                value = self._draw(kind, domain)
        elif self.forced is not None and self.on_invalid != "random":
            raise ScheduleError(
                f"decision {n} ({name}) was not recorded: the trace has only {len(self.forced)} decisions"
            )
        else:
            value = self._draw(kind, domain)
        self.decisions.append(Decision(kind, name, domain, value))
        return value

    def recorded(self, name: str):
        """The value the next decision (slot `name`) replays, or None when drawing: a design
        space offers a recorded value that is legal beyond what this machine derives (a template
        parameter's domain, templates/params.py)."""
        n = len(self.decisions)
        return self.forced[n] if self.forced is not None and n < len(self.forced) else None

    def perfect_tile(self, name: str, extent: int, parts: int, max_innermost: int | None = None, default=None) -> tuple:
        """Factors (outermost first) that multiply to exactly `extent`. `default`: the factors
        the rule derives from the target, which DefaultSampler takes (a random draw ignores it)."""
        self._default = _plain(list(default)) if default is not None else None
        try:
            return self._take("tile", name, factorizations(int(extent), int(parts), max_innermost))
        finally:
            self._default = None

    def categorical(self, name: str, candidates, probs=None, default=None) -> object:
        """One of `candidates`, drawn with weights `probs` (default uniform); `default` as for
        perfect_tile."""
        self._probs = tuple(probs) if probs is not None else None
        self._default = _plain(default)
        try:
            return self._take("categorical", name, tuple(_plain(c) for c in candidates))
        finally:
            self._probs = self._default = None

    def compute_location(self, name: str, candidates) -> object:
        """One of `candidates`: loop names, or "root" / "inline"."""
        return self._take("location", name, tuple(candidates))

    @property
    def values(self) -> list:
        return [d.value for d in self.decisions]


class DefaultSampler(Sampler):
    """Answers every slot with its default: the rule's analytical default where the rule gives
    one (space_rules.py derives them from the target), else sampling.default_choice (the most
    balanced tiling, the most probable categorical, the root location), as a schedule program
    gets outside tuning; its decisions are the program `tc.build` runs."""

    def __init__(self, first=None):
        super().__init__(forced=None)
        self.first = first  # the value of the first slot (a space's sketch), if given

    def _take(self, kind: str, name: str, domain: tuple):
        if not domain:
            raise ScheduleError(f"decision {name}: no legal value")
        if self.first is not None and not self.decisions:
            value = self.first
            if value not in domain:
                raise ScheduleError(f"decision 0 ({name}): {value!r} is not one of its legal values {domain}")
        elif self._default is not None and self._default in domain:
            value = self._default
        else:
            value = default_choice(kind, domain, self._probs)
        self.decisions.append(Decision(kind, name, domain, value))
        return value
