"""Sampling instructions: where a design space takes its decisions.

A design space (space.py) is a function that schedules a computation and asks a `Sampler` for
every number it needs: `perfect_tile` (a factorisation of a loop extent), `categorical` (one of
a few candidates: unroll depth, vector width, a template option) and `compute_location` (a loop
to attach a stage to, or root/inline). The sampler records each answer with its domain, so a
program is (sketch, decisions), decisions can be mutated one at a time within their domains,
and the language model can be constrained to legal values slot by slot.

    sampler = Sampler(rng)                    # fresh random decisions
    sampler = Sampler(forced=[...])           # replay recorded decisions
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from minitc.errors import ScheduleError


@dataclass(frozen=True)
class Decision:
    kind: str  # "tile" | "categorical" | "location"
    name: str  # the slot, e.g. "matmul.j.tile"
    domain: tuple  # every legal value, in a fixed order
    value: object

    @property
    def index(self) -> int:
        return self.domain.index(self.value)


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

    def _take(self, kind: str, name: str, domain: tuple):
        if not domain:
            raise ScheduleError(f"decision {name}: no legal value")
        n = len(self.decisions)
        if self.forced is not None and n < len(self.forced):
            value = self.forced[n]
            if value not in domain:
                if self.on_invalid != "random":
                    raise ScheduleError(f"decision {n} ({name}): {value!r} is not one of its legal values")
                value = domain[int(self.rng.integers(len(domain)))]
        elif self.forced is not None and self.on_invalid != "random":
            raise ScheduleError(
                f"decision {n} ({name}) was not recorded: the trace has only {len(self.forced)} decisions"
            )
        else:
            value = domain[int(self.rng.integers(len(domain)))]
        self.decisions.append(Decision(kind, name, domain, value))
        return value

    def perfect_tile(self, name: str, extent: int, parts: int, max_innermost: int | None = None) -> tuple:
        """Factors (outermost first) that multiply to exactly `extent`."""
        return self._take("tile", name, factorizations(int(extent), int(parts), max_innermost))

    def categorical(self, name: str, candidates) -> object:
        return self._take("categorical", name, tuple(_plain(c) for c in candidates))

    def compute_location(self, name: str, candidates) -> object:
        """One of `candidates`: loop names, or "root" / "inline"."""
        return self._take("location", name, tuple(candidates))

    @property
    def values(self) -> list:
        return [d.value for d in self.decisions]
