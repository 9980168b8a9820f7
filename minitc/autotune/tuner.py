"""`tc.tune`: search a workload's design space, measuring candidates safely and recording every
result in the tuning database, then build the best program.

    r = tc.tune(C, trials=64, strategy="tlm", target="llvm", db=None)
    r.kernel(a, b); r.best_ms; r.trials; r.errors; r.history

Strategies come by name from the registry (registry.py): "evolutionary" (MetaSchedule's, with
the TLP cost model), "random", and "tlm", the default, which minitc.lm registers (the shipped
language model proposes, the cost model re-ranks; see lm/strategy.py), or as SearchStrategy
objects. The session talks to strategy, builder and runner through their base classes
(interfaces.py); `TuneOptions` there are tune's keywords.
Running the same call again continues from the records: candidates already in the database
are not measured again, and the evolutionary search starts from the best of them. With `run=`
(what `minitc tune` passes), `trials` is the run's total and a rerun measures only the trials
an interrupted run left unmeasured.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minitc.autotune.database import Database, DatabaseError, Record, RecordsDatabase, applied_records
from minitc.autotune.interfaces import Builder, TuneOptions, check_plug
from minitc.autotune.registry import make_runner, make_strategy, record_extras
from minitc.autotune.runner import LocalBuilder, Task
from minitc.autotune.space import Space
from minitc.autotune.workload import Workload
from minitc.autotune.workload_key import workload_key
from minitc.backends import build_schedule
from minitc.backends.cuda.device import device_target
from minitc.errors import ConfigError, ScheduleError, warn_user
from minitc.schedule import Schedule, Trace
from minitc.target import hardware_fingerprint, parse_target, target_kind


def encode_trace(candidate, extras: dict | None = None) -> str:
    """What a record stores: the decisions (to replay and mutate in the space), the primitive
    steps (to rebuild the program without the space) and the extras registered plug-ins add
    (minitc.lm: the program's tensor-language sentence)."""
    data = {"sketch": candidate.sketch, "decisions": candidate.values, "steps": json.loads(candidate.trace)}
    return json.dumps({**data, **(extras or {})})


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
    phases: dict = field(default_factory=dict)  # seconds per phase: search, build, run, record, model, kernel
    times: list = field(default_factory=list)  # seconds since the start after each trial
    search_stats: dict = field(default_factory=dict)  # what the strategy reports (tlm: programs sampled, invalid)
    resumed: int = 0  # trials of the same run recorded by earlier calls (see `run` in tune)

    def to_json(self) -> dict:
        return {
            "workload": self.workload,
            "best_ms": self.best_ms,
            "trials": self.trials,
            "errors": self.errors,
            "history": self.history,
            "seconds": self.seconds,
            "overhead_s_per_trial": self.overhead_s_per_trial,
            "phases": self.phases,
            "times": self.times,
            "search_stats": self.search_stats,
            "resumed": self.resumed,
        }


def _open_db(db) -> RecordsDatabase:
    """`db` if it is a RecordsDatabase (any subclass), else the SQLite file at the path `db`."""
    if isinstance(db, RecordsDatabase):
        return db
    return Database(db)


def check_count(value, name: str) -> int:
    """`value` if it is an int >= 1 (not a bool), else a ConfigError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def run_key(workload: str, target: str, hardware: str, run: str) -> str:
    """The key under which the database counts the trials of one tuning run: a workload on a
    target and machine, with a search setting named by `run` (e.g. strategy and seed)."""
    return hashlib.sha256("\n".join((workload, target, hardware, run)).encode()).hexdigest()[:24]


def recorded_trials(outputs, target, db, run: str) -> int:
    """Trials that earlier `tune(outputs, target=target, db=db, run=run)` calls recorded on this
    machine (what a rerun of an interrupted run counts toward `trials`)."""
    if target_kind(target) == "cuda":
        target = device_target(target)
    t = parse_target(target)
    key = run_key(workload_key(outputs), t.string, hardware_fingerprint(t), run)
    if isinstance(db, RecordsDatabase):
        return db.run_trials(key)
    with Database(db) as database:
        return database.run_trials(key)


class TuningSession:
    """Tuning of one workload, advanced a round at a time (the task scheduler interleaves
    sessions; `tune` runs one to the end)."""

    def __init__(self, outputs, strategy="tlm", target="llvm", db=None, **keywords):
        """`strategy`, `target`, `db` and `keywords` are TuneOptions (tc.tune's keywords);
        `trials` defaults to None here (no total: the caller advances the session)."""
        o = self.options = TuneOptions(strategy=strategy, target=target, db=db, **{"trials": None, **keywords})
        self.start = time.perf_counter()
        if target_kind(o.target) == "cuda":
            o.target = device_target(o.target)  # tune for the GPU that is here
        self.workload = Workload(outputs)  # described once: the space, the key, the records and the task read it
        self.space = Space(self.workload, o.target, o.space)
        self.key = self.workload.key
        self.hw = hardware_fingerprint(self.space.target)
        self.target = self.space.target.string
        self.db = _open_db(o.db)
        self.db.add_workload(self.key, self.workload.description, self.workload.form)
        self.run = run_key(self.key, self.target, self.hw, o.run) if o.run is not None else None
        self.resumed = self.db.run_trials(self.run) if self.run else 0
        self.task = Task.from_workload(self.workload, self.target)
        builder = o.builder
        if builder is None and isinstance(o.runner, Builder):
            builder = o.runner  # a runner that builds on its own nodes (RayRunner): no local build
        self.own = (builder is None, o.runner is None)
        self.builder = check_plug(builder or LocalBuilder(workers=builder_workers(self.space.gpu)), Builder, "builder")
        self.runner = make_runner(o.runner or "local", self.target)
        # the session's own processes start (and a GPU's context with them) while the strategy
        # loads its models and makes its first proposals; shared ones (tune_tasks) are set up
        # for each task when it is measured
        if self.own[0]:
            self.builder.start()
        if self.own[1]:
            self.runner.prepare(self.task)
        self.search = None
        try:
            self._start_search(o)
        except BaseException:  # no process outlives a session that could not start
            self.close()
            raise
        self.batch, self.progress, self.trials = o.batch, o.progress, o.trials
        self.overlap = self.space.gpu if o.overlap is None else o.overlap  # a GPU's timings ignore the host's load
        self.best, self.history, self.errors, self.done, self.kernel_s = math.inf, [], 0, 0, 0.0
        self.times: list = []
        self.exhausted = False
        self.phases = {"search": 0.0, "build": 0.0, "run": 0.0, "record": 0.0, "model": 0.0}

    def _start_search(self, o: TuneOptions) -> None:
        """The strategy, told of this workload and seeded with the database's records."""
        rng = np.random.default_rng(o.seed)
        self.search = make_strategy(o.strategy, self.space, rng, o.cost_model, lm=o.lm, learn=o.learn)
        self.extras_of = record_extras(self.space)
        for rec in self.db.programs(self.key, self.target, self.hw):
            values, steps = decode_trace(rec.trace)
            ckey = hashlib.sha256(steps.to_json().encode()).hexdigest()[:24]
            if values and values[0] not in self.space.sketches:
                values = None  # another space's decisions: the program counts as measured, nothing replays
            self.search.seed(ckey, values, rec.median_ms if rec.ok else math.inf)
        first = self.space.first_program() if o.template_first else None
        self.first = first  # tc.build's program: measured first, and again beside the finalists
        if first is not None:  # never lose to tc.build
            self.search.put_first([first])

    def round(self, n: int | None = None) -> int:
        """Measure up to n (default: the batch size) new candidates; returns how many."""
        t0 = time.perf_counter()
        cands = self.search.ask(n or self.batch)
        t1 = time.perf_counter()
        self.phases["search"] += t1 - t0
        if not cands:
            self.exhausted = True
            return 0
        self._decode_ahead(len(cands))
        results = self._measure([c.trace for c in cands])
        t3 = time.perf_counter()
        latencies = []
        for c, res in zip(cands, results):
            ms = res.median_ms
            text = encode_trace(c, self.extras_of(c) if self.extras_of else None)
            self.db.add(Record(self.key, self.target, self.hw, text, res.latencies_ms, ms, res.error), run=self.run)
            self.errors += res.error is not None
            latencies.append(ms if ms is not None else math.inf)
            if ms is not None:
                self.best = min(self.best, ms)
                self.kernel_s += res.kernel_s
            self.done += 1
            self.history.append(self.best if math.isfinite(self.best) else None)
            self.times.append(round(time.perf_counter() - self.start, 3))
            if self.progress is not None:
                done = self.resumed + self.done
                self.progress(done, self.trials or done, self.errors, self.history[-1])
        t4 = time.perf_counter()
        self.search.tell(cands, latencies)
        self.phases["record"] += t4 - t3
        self.phases["model"] += time.perf_counter() - t4
        return len(cands)

    def _decode_ahead(self, measuring: int) -> None:
        """On a GPU the host's cores wait while a round is measured: a strategy that can
        (tlm) writes the next round's proposals meanwhile, if another round will follow. On a
        CPU that work would disturb the timings."""
        if not (self.space.gpu and self.trials is not None):
            return
        left = self.trials - self.resumed - self.done - measuring
        if left > 0:
            self.search.decode_ahead(min(self.batch, left))

    def _measure(self, traces: list) -> list:
        """Build and run candidates. With `overlap`, the next candidates compile (in the
        builder's workers) while one is measured; the final best is re-measured on a quiet machine."""
        if not self.overlap:
            t = time.perf_counter()
            built = self.builder.build(self.task, traces)
            self.phases["build"] += time.perf_counter() - t
            t = time.perf_counter()
            results = self.runner.run(self.task, built)
            self.phases["run"] += time.perf_counter() - t
            return results
        results = []
        with ThreadPoolExecutor(self.builder.workers) as pool:
            futures = [pool.submit(self.builder.build_one, self.task, trace) for trace in traces]
            for fut in futures:
                t = time.perf_counter()
                built = fut.result()
                self.phases["build"] += time.perf_counter() - t  # only the part not hidden
                t = time.perf_counter()
                results.extend(self.runner.run(self.task, built))
                self.phases["run"] += time.perf_counter() - t
        return results

    def finish(self) -> TuneResult:
        """Re-measure the best record, build it, release the workers."""
        try:
            builder = self.builder if isinstance(self.builder, LocalBuilder) else None
            db, key = self.db, self.key
            default = [self.first.trace] if self.first is not None else []
            best_ms, best_trace = remeasure_best(
                db, key, self.space, self.hw, self.task, self.runner, builder, include=default
            )
            self.search.finish()
        finally:
            self.close()
        kernel = _build_best(self.space, best_trace) if best_trace else None
        seconds = time.perf_counter() - self.start
        overhead = max(0.0, seconds - self.kernel_s) / max(self.done, 1)
        return TuneResult(
            kernel=kernel,
            best_ms=best_ms,
            trials=self.done,
            errors=self.errors,
            history=self.history,
            best_trace=best_trace,
            workload=self.key,
            seconds=seconds,
            overhead_s_per_trial=overhead,
            phases=dict(self.phases, kernel=self.kernel_s, total=seconds),
            times=self.times,
            search_stats=self.search.stats(),
            resumed=self.resumed,
        )

    def close(self) -> None:
        if self.search is not None:  # None: the strategy could not be made
            self.search.close()
        if self.own[0]:
            self.builder.close()
        if self.own[1]:
            self.runner.close()


def tune(
    outputs,
    trials: int = 64,
    strategy="tlm",
    target: str = "llvm",
    db=None,
    *,
    batch: int = 16,
    seed: int = 0,
    cost_model=None,
    builder=None,
    runner=None,
    progress=None,
    overlap: bool | None = None,
    lm=None,
    learn: bool = False,
    template_first: bool = True,
    run: str | None = None,
    space=None,
) -> TuneResult:
    """Tune the computation of `outputs` (a tensor or a list) for `target` with `trials`
    measured candidates. `strategy` is a registered name (registry.py), a SearchStrategy or a
    SearchStrategy subclass (interfaces.py). `db` is a path or Database (default: the user's
    records database, see database.py). `progress(done, total, errors, best_ms)` is called after each trial.
    A batch is compiled by parallel builder workers, then measured on the idle machine; with
    `overlap`, compiling goes on while measuring (faster, but on a CPU the compiles disturb the
    timings the search learns from; the final best is re-measured alone either way). By
    default it is on for GPU targets only, whose kernels the host's load does not slow.
    `template_first` measures the hand template before anything else (so tuning never ends
    slower than `tc.build`); evaluations of the search itself turn it off. `lm` and `learn`
    configure the tlm strategy (a checkpoint path; fine-tune on this run and keep the model).
    `runner` is a Runner (interfaces.py) or the name of a registered one (default "local": a
    process of this machine; registry.py); `builder` a Builder (default: this machine's
    processes, or the runner if it is a Builder too). `run` names the run (e.g. "tlm seed=0"): `trials` is then
    the total of the run, and trials an earlier call of the same run recorded in `db` for this
    workload, target and machine count toward it (`result.resumed`), so rerunning an
    interrupted run measures only the rest. `space` replaces the design space
    (docs/tuning.md, *Design spaces of your own*): a function `fn(s)` of a Schedule whose
    sampling instructions (`s.sample_perfect_tile`, `s.sample_categorical`,
    `s.sample_compute_location`) are the decisions, a SpaceGenerator, "template", "generic", or a
    list of them; its records are the workload's like any other. Raises ConfigError for `trials` or `batch` that is
    not a whole number >= 1."""
    trials, batch = check_count(trials, "tc.tune: trials"), check_count(batch, "tc.tune: batch")
    options = {name: value for name, value in locals().items() if name != "outputs"}  # TuneOptions' fields
    session = TuningSession(outputs, **options)
    try:
        while session.resumed + session.done < trials and not session.exhausted:
            session.round(min(batch, trials - session.resumed - session.done))
    except BaseException:
        session.close()
        raise
    return session.finish()


def builder_workers(gpu: bool) -> int:
    """Builder processes of a session: two on a CPU (their compiles wait while a batch is
    measured); on a GPU machine half its cores, up to 8: NVRTC takes 0.1-1.4 s a candidate,
    many times what measuring it takes."""
    return max(2, min(8, (os.cpu_count() or 2) // 2)) if gpu else 2


# the finalists' re-measurement runs them in these orders, one pass each (1 forwards, -1
# backwards): on a shared machine a program timed second in a pair ran up to 2% faster, and a
# load burst during one pass moves only that pass's median
REMEASURE_ORDERS = (1, -1, 1)


def remeasure_best(database, key, space, hw, task, runner, builder=None, k: int = 5, rounds: int = 3, include=()):
    """The final best is measured again before it is reported: the k fastest records are re-run
    one after another on an otherwise idle machine (no overlapping builds) and the new timings
    are recorded, superseding the first ones (REMEASURE_ORDERS: three passes, the second
    backwards; a program's time is the median of its passes'). If that demotes them below a record not yet
    re-measured, that one is re-measured too (a few rounds at most). The records of the programs
    `include` names (their steps' JSON: tc.build's default) are re-run beside the first round's,
    so a finalist that was lucky once cannot pass a default measured at a worse moment. The
    result is the database's best afterwards, so `tc.build` later applies exactly this program.
    `builder`: the session's LocalBuilder (its processes are running), else one of its own."""
    target = space.target.string
    confirmed: set = set()
    own = builder is None
    builder = builder or LocalBuilder(workers=1)
    extra = _records_of(database, key, target, hw, set(include)) if include else []
    try:
        for _ in range(rounds):
            records = [r for r in database.best(key, target, hw, k=k) if r.trace not in confirmed]
            records += [r for r in extra if r.trace not in confirmed | {x.trace for x in records}]
            extra = []
            if not records:
                break
            built = builder.build(task, [decode_trace(r.trace)[1].to_json() for r in records])
            fresh = runner.fresh(max(runner.repeats, 10))
            try:
                # each pass's results back in the finalists' order
                passes = [fresh.run(task, built[::step])[::step] for step in REMEASURE_ORDERS]
            finally:
                if fresh is not runner:
                    fresh.close()
            for rec, *runs in zip(records, *passes):
                latencies, median, error = _combined(runs)
                database.add(Record(key, target, hw, rec.trace, latencies, median, error))
                confirmed.add(rec.trace)
    finally:
        if own:
            builder.close()
    best = database.best(key, target, hw)
    return (best[0].median_ms, best[0].trace) if best else (None, None)


def _combined(results: list) -> tuple:
    """(latencies, median, error) of one program over the re-measurement's passes: every
    latency, the median of the passes' medians (a pass that another process slowed counts
    once), or the first error."""
    errors = [r.error for r in results if r.error]
    if errors:
        return (), None, errors[0]
    latencies = tuple(ms for r in results for ms in r.latencies_ms)
    return latencies, float(np.median([r.median_ms for r in results])), None


def _records_of(database, key, target, hw, steps: set) -> list:
    """The latest successful record of each program whose steps' JSON is in `steps`."""
    found = {}
    for r in database.records(key, target, hw):
        if r.median_ms is not None and decode_trace(r.trace)[1].to_json() in steps:
            found[r.trace] = r
    return list(found.values())


def _build_best(space: Space, trace_text: str):
    _, steps = decode_trace(trace_text)
    return build_schedule(Schedule(space.outputs).replay(steps), space.target.string)


def tuned_schedule(outputs, target, db=None) -> Schedule | None:
    """The schedule of the best record for this workload on this machine in the records
    database a build reads (database.applied_records: `db`, else a `tc.records` block's), if
    any."""
    source = applied_records(db)
    if source is None or (isinstance(source, Path) and not source.exists()):
        return None
    space_key = workload_key(outputs)
    hw = hardware_fingerprint(target)
    try:
        if isinstance(source, RecordsDatabase):
            recs = source.best(space_key, parse_target(target).string, hw)
        else:
            with Database(source) as database:
                recs = database.best(space_key, parse_target(target).string, hw)
    except DatabaseError as e:  # building must not fail because of a bad records file
        warn_user(f"ignoring tuning records: {e}")
        return None
    if not recs:
        return None
    _, steps = decode_trace(recs[0].trace)
    try:
        return Schedule(outputs).replay(steps)
    except ScheduleError:
        return None  # a record from an older minitc whose primitives changed
