"""The tuner's plug points as small base classes (MetaSchedule's SearchStrategy, Builder, Runner).
A tuning session (tuner.py) talks to its strategy, builder and runner only through the methods
below, so a class written against them plugs in:

    class MySearch(SearchStrategy):
        def ask(self, n):
            return self.queued(n) + self.random_candidates(n, set())

    tc.tune(C, strategy=MySearch(), trials=8)

docs/tuning.md ("Writing a strategy") has a complete one. The cost model's plug point is
`cost_model.CostModel`. `TuneOptions` holds the settings of one tuning (`tc.tune`'s keywords).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


class Builder:
    """Compiles candidates, given as trace JSON, for a `runner.Task` (outputs, arguments,
    inputs, expected outputs, target) into `runner.BuildResult`s a Runner measures:

        builder.start()                          # hook: start processes now, while the strategy sets up
        builder.build(task, traces)              # -> a BuildResult per trace, in order
        builder.build_one(task, trace)           # -> [BuildResult]; thread-safe (overlap mode)
        builder.close()                          # hook: release the processes

    A failure is a BuildResult with `error` set, never an exception. `workers` is how many
    candidates it builds at once (the threads overlap mode gives it). A subclass writes
    `build_one`, and `build` where it can do better than one after another. A builder may only
    pass the traces on (RayRunner builds where it measures); a session given as its runner an
    object that is also a Builder, and no builder, uses it for both.
    """

    workers = 1

    def start(self) -> None:
        """Hook: start what the builds need (processes) before the first build."""

    def build(self, task, traces: list) -> list:
        """A BuildResult per trace of `traces`, in order."""
        return [r for trace in traces for r in self.build_one(task, trace)]

    def build_one(self, task, trace: str) -> list:
        """[BuildResult] of one trace."""
        raise NotImplementedError(f"{type(self).__name__} must define build_one(task, trace)")

    def close(self) -> None:
        """Hook: release what the builder holds; called once, when its session (or owner) ends."""


class Runner:
    """Measures built candidates (`runner.BuildResult`s) of a `runner.Task`, checking each
    one's outputs against the task's expected outputs first:

        runner.prepare(task)                     # hook: set up for `task` while the caller goes on
        runner.run(task, built)                  # -> a runner.MeasureResult per built candidate, in order
        runner.fresh(repeats)                    # -> a runner for the final re-measurement
        runner.close()                           # hook: release the processes

    Errors (a build error passed on, a crash, a timeout, a wrong result) are MeasureResults
    with `error` set, never exceptions. `repeats` is how many timings a candidate gets. A
    subclass writes `run`, and `fresh` to re-measure the best with `repeats` timings (the base
    re-measures with itself).
    """

    repeats = 5

    def prepare(self, task) -> None:
        """Hook: start measuring processes and set them up for `task` before the first run."""

    def run(self, task, built: list) -> list:
        """A MeasureResult per BuildResult of `built`, in order."""
        raise NotImplementedError(f"{type(self).__name__} must define run(task, built)")

    def fresh(self, repeats: int):
        """A runner like this one taking `repeats` timings, for the final re-measurement; the
        caller closes it unless it is this runner."""
        return self

    def close(self) -> None:
        """Hook: release what the runner holds; called once, when its session (or owner) ends."""


@dataclass
class TuneOptions:
    """The settings of one tuning: `tc.tune`'s keywords, with its defaults (tuner.tune says
    what each does). A TuningSession takes them as keywords too; its `trials` may be None (a
    session its caller advances round by round, with no total)."""

    trials: int | None = 64
    strategy: object = "tlm"  # a registered name, a SearchStrategy, or a SearchStrategy subclass
    target: str = "llvm"
    db: object = None  # a path or a Database; None: the user's records database
    batch: int = 16
    seed: int = 0
    cost_model: object = None
    builder: object = None  # a Builder; None: this machine's processes (or the runner, if it builds)
    runner: object = None  # a Runner or a registered runner's name; None: "local"
    progress: object = None  # progress(done, total, errors, best_ms) after each trial
    overlap: bool | None = None  # None: on for GPU targets only
    lm: object = None
    learn: bool = False
    template_first: bool = True
    run: str | None = None
    space: object = None  # the design space's sketches (space.Space's `generators`); None: template + generic


CONTRACTS = {
    SearchStrategy: ("bind", "seed", "put_first", "ask", "tell", "decode_ahead", "stats", "finish", "close"),
    Builder: ("start", "build", "build_one", "close"),
    Runner: ("prepare", "run", "fresh", "close"),
}


def check_plug(obj, base: type, source: str):
    """`obj` if it is an instance of `base` (a class of CONTRACTS), else a ConfigError naming
    the methods of the contract it lacks; `source` says where it came from (for the message)."""
    if isinstance(obj, base):
        return obj
    missing = [name for name in CONTRACTS[base] if not callable(getattr(obj, name, None))]
    lacks = f"it lacks {', '.join(missing)}" if missing else "it has the methods but not the base class"
    raise ConfigError(
        f"{source} is a {type(obj).__name__}, not a minitc.autotune.interfaces.{base.__name__} ({lacks}); "
        f"subclass {base.__name__}, which provides the hooks"
    )
