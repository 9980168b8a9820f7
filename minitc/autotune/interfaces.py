"""The tuner's plug points as small base classes (MetaSchedule's SearchStrategy, Builder, Runner).
A tuning session (tuner.py) talks to its strategy only through the methods below, so a class
written against them plugs in:

    class MySearch(SearchStrategy):
        def ask(self, n):
            return self.queued(n) + self.random_candidates(n, set())

    tc.tune(C, strategy=MySearch(), trials=8)

docs/tuning.md ("Writing a strategy") has a complete one. The cost model's plug point is
`cost_model.CostModel`.
"""

from __future__ import annotations

import math

import numpy as np

from minitc.autotune.workload_key import workload_key
from minitc.errors import ConfigError, ScheduleError


class SearchStrategy:
    """A search of one workload's design space (a `space.Space`), driven by a tuning session:

        strategy.bind(space, rng)            # once, unless the constructor was given the space
        strategy.seed(key, values, ms)       # each program the records database already holds
        strategy.put_first([candidate])      # the hand template's program (tune's template_first)
        repeat:
            candidates = strategy.ask(n)     # up to n candidates never measured nor seeded; [] ends
            strategy.tell(candidates, ms)    # their median latencies, inf for errors
        strategy.finish(); strategy.stats(); strategy.close()

    A subclass writes `ask`, and `tell` if it learns from measurements (calling super().tell,
    which keeps the bookkeeping). The base class keeps:

    - `space`, `rng` (a numpy Generator) and `workload` (the workload key cost models are given);
    - `measured`: candidate key -> latency ms (inf: an error) of every candidate seeded or told;
    - `best`: (latency ms, decision values) of the successful ones, fastest first;
    - `queue`: candidates to propose before anything else (`put_first`), taken by `queued(n)`.

    `cost_model`: a strategy that ranks with a cost model sets it before the base constructor
    runs; `bind` tells it the workload's tensors (its features need the shapes). The remaining
    hooks (`decode_ahead`, `finish`, `stats`, `close`) do nothing unless overridden.
    """

    cost_model = None
    max_failures = 200  # failed random draws (illegal or already measured) before giving up

    def __init__(self, space=None, rng=None):
        self.space = None
        self.workload = ""
        self.rng = rng
        self.measured: dict = {}  # candidate key -> latency ms (inf: error)
        self.best: list = []  # (latency ms, decision values), fastest first
        self.queue: list = []  # candidates to measure first (the hand template's default)
        if space is not None:
            self.bind(space)

    def bind(self, space, rng=None) -> None:
        """Make this the search of `space`: the session calls it for a strategy made without
        one. `rng` is used when the constructor was given none. Subclasses that prepare
        per-workload state override it and call super().bind first."""
        self.space = space
        self.workload = workload_key(space.outputs)
        if self.rng is None:
            self.rng = rng if rng is not None else np.random.default_rng()
        if self.cost_model is not None:
            register = getattr(self.cost_model, "register", None)  # optional in the protocol
            if register is not None:
                register(self.workload, space.outputs)

    # -- what a subclass writes --------------------------------------------------------------

    def ask(self, n: int) -> list:
        """Up to `n` new candidates (`space.Candidate`) to measure, none measured or seeded
        before; an empty list ends the search."""
        raise NotImplementedError(f"{type(self).__name__} must define ask(n), the candidates to measure next")

    def tell(self, candidates: list, latencies_ms: list) -> None:
        """The measured median latencies of the candidates `ask` returned (inf for errors)."""
        for c, ms in zip(candidates, latencies_ms):
            self.seed(c.key, c.values, ms)

    # -- what the session calls besides ------------------------------------------------------

    def seed(self, key: str, values: list | None, latency_ms: float) -> None:
        """Record an already measured candidate (from the database): its key, its decision
        values (None when the record has only the primitive steps) and its latency."""
        self.measured[key] = latency_ms
        if values is not None and math.isfinite(latency_ms):
            self.best.append((latency_ms, values))
            self.best.sort(key=lambda b: b[0])

    def put_first(self, candidates: list) -> None:
        """Candidates to propose before any other (`queued` hands them out)."""
        self.queue.extend(candidates)

    def decode_ahead(self, n: int) -> None:
        """Hook: a round is being measured and another of `n` candidates will follow; a
        strategy may prepare it meanwhile (the session calls this only on a GPU, whose timings
        the host's load does not disturb)."""

    def stats(self) -> dict:
        """Hook: numbers about the search for `TuneResult.search_stats`."""
        return {}

    def finish(self) -> None:
        """Hook: the session has ended normally (e.g. keep what was learned)."""

    def close(self) -> None:
        """Hook: release what the strategy holds (threads, processes); called on every exit."""

    # -- helpers for ask ---------------------------------------------------------------------

    def queued(self, n: int) -> list:
        """Up to `n` queued candidates not measured since they were queued; empties the queue."""
        out = [c for c in self.queue if c.key not in self.measured][:n]
        self.queue = []
        return out

    def random_candidates(self, n: int, exclude: set) -> list:
        """Up to `n` uniform random legal candidates, none measured and none whose key is in
        `exclude` (which gains the keys drawn)."""
        out, failures = [], 0
        while len(out) < n and failures < self.max_failures:
            try:
                c = self.space.sample(self.rng)
            except ScheduleError:
                failures += 1
                continue
            if c.key in self.measured or c.key in exclude:
                failures += 1
                continue
            exclude.add(c.key)
            out.append(c)
        return out


CONTRACT = ("bind", "seed", "put_first", "ask", "tell", "decode_ahead", "stats", "finish", "close")


def check_strategy(search, source: str):
    """`search` if it is a SearchStrategy, else a ConfigError naming what it lacks; `source`
    says where it came from (for the message)."""
    if isinstance(search, SearchStrategy):
        return search
    missing = [name for name in CONTRACT if not callable(getattr(search, name, None))]
    lacks = f"it lacks {', '.join(missing)}" if missing else "it has the methods but not the base class"
    raise ConfigError(
        f"{source} is a {type(search).__name__}, not a minitc.autotune.interfaces.SearchStrategy ({lacks}); "
        "subclass SearchStrategy, which provides everything but ask"
    )
