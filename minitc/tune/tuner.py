"""`tc.tune`: search a workload's design space, measuring candidates safely and recording every
result in the tuning database, then build the best program.

    r = tc.tune(C, trials=256, strategy="evolutionary", target="llvm", db=None)
    r.kernel(a, b); r.best_ms; r.trials; r.errors; r.history

Running the same call again resumes: candidates already in the database are not measured
again, and the evolutionary search starts from the best of them.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import MinitcError, ScheduleError
from ..schedule.schedule import Schedule
from ..schedule.trace import Trace
from .database import Database, Record
from .measure import LocalBuilder, LocalRunner, Task
from .search import STRATEGIES, EvolutionarySearch, RandomSearch
from .space import Space
from .workload import canonical, describe, workload_key


def hardware_fingerprint(target) -> str:
    """The CPU model, core count and feature set of the target, e.g. `znver2-2c-1a2b3c4d`."""
    from backends.llvm.target import parse_target

    t = parse_target(target) if isinstance(target, str) else target
    digest = hashlib.sha256(t.features.encode()).hexdigest()[:8]
    return f"{t.cpu}-{t.num_cores}c-{digest}"


def encode_trace(candidate) -> str:
    """What a record stores: the decisions (to replay and mutate in the space) and the
    primitive steps (to rebuild the program without the space)."""
    return json.dumps({"sketch": candidate.sketch, "decisions": candidate.values, "steps": json.loads(candidate.trace)})


def decode_trace(text: str) -> tuple:
    """(decision values or None, Trace) from a record's trace text."""
    data = json.loads(text)
    if isinstance(data, list):  # a bare primitive trace
        return None, Trace.from_json(text)
    return data.get("decisions"), Trace.from_json(json.dumps(data["steps"]))


@dataclass
class TuneResult:
    kernel: object  # the built tc.Function of the best program (None if nothing succeeded)
    best_ms: float | None  # its re-measured median latency
    trials: int  # candidates measured in this call
    errors: int  # error records in this call
    history: list = field(default_factory=list)  # best-so-far ms after each trial of this call
    best_trace: str | None = None
    workload: str = ""
    seconds: float = 0.0
    overhead_s_per_trial: float = 0.0  # build + bookkeeping time per trial, not the kernel's own

    def to_json(self) -> dict:
        return {
            "workload": self.workload, "best_ms": self.best_ms, "trials": self.trials, "errors": self.errors,
            "history": self.history, "seconds": self.seconds, "overhead_s_per_trial": self.overhead_s_per_trial,
        }


def _open_db(db) -> Database:
    if isinstance(db, Database):
        return db
    return Database(db)


def _strategy(name: str, space: Space, rng, cost_model):
    if name == "random":
        return RandomSearch(space, rng)
    if name == "evolutionary":
        if cost_model is None:
            from .cost_model import default_cost_model

            cost_model = default_cost_model()
        return EvolutionarySearch(space, cost_model, rng)
    raise MinitcError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")


def tune(
    outputs, trials: int = 256, strategy: str = "evolutionary", target: str = "llvm", db=None, *,
    batch: int = 16, seed: int = 0, cost_model=None, builder=None, runner=None, progress=None,
) -> TuneResult:
    """Tune the computation of `outputs` (a tensor or a list) for `target` with `trials`
    measured candidates. `db` is a path or Database (default: the user's records database,
    see database.py). `progress(done, total, errors, best_ms)` is called after each trial."""
    start = time.perf_counter()
    space = Space(outputs, target)
    key = workload_key(space.outputs)
    hw = hardware_fingerprint(space.target)
    database = _open_db(db)
    database.add_workload(key, describe(space.outputs), canonical(space.outputs))
    rng = np.random.default_rng(seed)
    search = _strategy(strategy, space, rng, cost_model)
    search.workload = key
    for rec in database.records(key, space.target.string, hw):
        values, steps = decode_trace(rec.trace)
        ckey = hashlib.sha256(steps.to_json().encode()).hexdigest()[:24]
        search.seed(ckey, values, rec.median_ms if rec.ok else math.inf)
    task = Task.from_outputs(space.outputs, space.target.string)
    own_builder, own_runner = builder is None, runner is None
    builder = builder or LocalBuilder(workers=1)
    runner = runner or LocalRunner()
    best, history, errors, done, kernel_s = math.inf, [], 0, 0, 0.0
    try:
        while done < trials:
            cands = search.ask(min(batch, trials - done))
            if not cands:
                break  # the space is exhausted
            results = runner.run(task, builder.build(task, [c.trace for c in cands]))
            latencies = []
            for c, res in zip(cands, results):
                ms = res.median_ms
                database.add(Record(key, space.target.string, hw, encode_trace(c), res.latencies_ms, ms, res.error))
                errors += res.error is not None
                latencies.append(ms if ms is not None else math.inf)
                if ms is not None:
                    best = min(best, ms)
                    kernel_s += ms * len(res.latencies_ms) * 1e-3
                done += 1
                history.append(best if math.isfinite(best) else None)
                if progress is not None:
                    progress(done, trials, errors, best if math.isfinite(best) else None)
            search.tell(cands, latencies)
        best_ms, best_trace = _remeasure_best(database, key, space, hw, task, runner)
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    kernel = _build_best(space, best_trace) if best_trace else None
    seconds = time.perf_counter() - start
    return TuneResult(
        kernel, best_ms, done, errors, history, best_trace, key, seconds,
        max(0.0, seconds - kernel_s) / max(done, 1),
    )


def _remeasure_best(database, key, space, hw, task, runner):
    """The final best is measured again (more repeats) before it is reported."""
    for rec in database.best(key, space.target.string, hw, k=3):
        _, steps = decode_trace(rec.trace)
        builder = LocalBuilder(workers=1)
        try:
            (built,) = builder.build(task, [steps.to_json()])
        finally:
            builder.close()
        (res,) = LocalRunner(repeats=max(runner.repeats, 10), timeout=runner.timeout).run(task, [built])
        if res.error is None:
            return res.median_ms, rec.trace
    return None, None


def _build_best(space: Space, trace_text: str):
    from ..driver import build

    _, steps = decode_trace(trace_text)
    return build(Schedule(space.outputs).replay(steps), target=space.target.string)


def best_schedule(outputs, target, db=None) -> Schedule | None:
    """The schedule of the best record for this workload on this machine, if any."""
    from pathlib import Path

    from .database import default_path

    path = Path(db) if db is not None else default_path()
    if not path.exists():
        return None
    space_key = workload_key(outputs)
    hw = hardware_fingerprint(target)
    from backends.llvm.target import parse_target

    from .database import DatabaseError

    try:
        with Database(path) as database:
            recs = database.best(space_key, parse_target(target).string, hw)
    except DatabaseError as e:  # building must not fail because of a bad records file
        warnings.warn(f"ignoring tuning records: {e}", stacklevel=3)
        return None
    if not recs:
        return None
    _, steps = decode_trace(recs[0].trace)
    try:
        return Schedule(outputs).replay(steps)
    except ScheduleError:
        return None  # a record from an older minitc whose primitives changed
