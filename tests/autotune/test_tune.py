"""Tuning: strategies, records, resume, planted failures, and the task scheduler."""

import math

import llvmlite.binding as llvm
import numpy as np
import pytest

import minitc as tc
from minitc.autotune.database import Database
from minitc.autotune.runner import BuildResult, LocalBuilder
from minitc.autotune.search import EvolutionarySearch, NearTemplateSearch, RandomSearch, template_program
from minitc.autotune.space import Space
from minitc.autotune.task_scheduler import gradient, tune_tasks
from minitc.backends.llvm import jit
from minitc.target import parse_target


class RandomScores:
    """A stand-in cost model (the real one is tested in test_cost_model.py)."""

    def __init__(self):
        self.seen = 0

    def fit(self, workload, traces, latencies):
        self.seen += len(traces)

    def predict(self, workload, traces):
        return np.random.default_rng(len(traces)).random(len(traces))


def _matmul(n=48):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    return A, B, tc.ops.matmul(A, B)


@pytest.mark.parametrize("strategy", ["random", "evolutionary", "near-template"])
def test_tune_records_and_builds_the_best(tmp_path, strategy):
    A, B, C = _matmul()
    db = tmp_path / "r.db"
    calls = []
    r = tc.tune(
        C, trials=6, strategy=strategy, db=db, batch=3, cost_model=RandomScores(), progress=lambda *a: calls.append(a)
    )
    assert r.trials == 6 and len(r.history) == 6 and len(calls) == 6
    assert r.best_ms is not None and r.best_ms > 0
    finite = [h for h in r.history if h is not None]
    assert finite == sorted(finite, reverse=True)  # best-so-far never gets worse
    a = np.random.rand(48, 48).astype("float32")
    b = np.random.rand(48, 48).astype("float32")
    np.testing.assert_allclose(r.kernel(a, b), a @ b, rtol=1e-4)
    with Database(db) as d:
        records = d.records(r.workload)
    assert len({rec.trace for rec in records}) == 6
    assert len(records) > 6  # the finalists were re-measured, and the new timings recorded
    # tc.build now applies the best record of this workload
    tuned = tc.lower(C, target="llvm", db=db)
    assert str(tuned) == str(r.kernel.kernel)


def test_resume_never_measures_a_candidate_twice(tmp_path):
    A, B, C = _matmul(32)
    db = tmp_path / "r.db"
    first = tc.tune(C, trials=5, strategy="random", db=db, batch=5, seed=1)
    with Database(db) as d:
        after_first = [r.trace for r in d.records(first.workload)]
    second = tc.tune(C, trials=5, strategy="random", db=db, batch=5, seed=1)  # same seed: same draws
    with Database(db) as d:
        traces = [r.trace for r in d.records(first.workload)]
    assert len(set(after_first)) == 5 and set(after_first[5:]) <= set(after_first[:5])  # re-measures only
    new = traces[len(after_first) : len(after_first) + 5]
    assert len(set(new)) == 5 and not set(new) & set(after_first)
    assert second.best_ms is not None


class PlantedBuilder(LocalBuilder):
    """Replaces the first three candidates by a crashing, a hanging and a wrong kernel."""

    def __init__(self):
        super().__init__(workers=1)
        self.planted = [
            _object("store volatile i32 1, ptr null\nret void", "p_crash"),
            _object("entry:\nbr label %l\nl:\n%v = load volatile i32, ptr %a\nbr label %l", "p_hang"),
            _object("store float 0.0, ptr %c\nret void", "p_wrong"),
        ]

    def build(self, task, traces):
        built = super().build(task, traces)
        for n in range(len(built)):
            if self.planted:
                b = self.planted.pop(0)
                built[n] = BuildResult(built[n].trace, b.symbol, b.object_code, b.num_params)
        return built


def _object(body, name):
    target = parse_target("llvm")
    mod = llvm.parse_assembly(f"define void @{name}(ptr %a, ptr %b, ptr %c) {{\n{body}\n}}")
    mod.triple = target.triple
    return BuildResult(name, name, jit._target_machine(target).emit_object(mod), 3)


def test_planted_failures_become_error_records_and_tuning_finishes(tmp_path):
    A, B, C = _matmul(32)
    from minitc.autotune.runner import LocalRunner

    runner = LocalRunner(timeout=3, repeats=2, min_repeat_ms=1)  # the caller's: tune leaves it open
    try:
        db = tmp_path / "r.db"
        r = tc.tune(C, trials=6, strategy="random", db=db, batch=6, builder=PlantedBuilder(), runner=runner)
    finally:
        runner.close()
    assert r.errors == 3 and r.trials == 6 and r.best_ms is not None
    with Database(tmp_path / "r.db") as d:
        errors = sorted(rec.error.split(":")[0] for rec in d.records(r.workload) if not rec.ok)
    assert errors == ["crash", "timeout", "wrong"]


def test_strategies_ask_only_new_candidates():
    A, B, C = _matmul(64)
    space = Space(C, "llvm")
    for search in (
        RandomSearch(space, np.random.default_rng(0)),
        EvolutionarySearch(space, RandomScores(), np.random.default_rng(0)),
        NearTemplateSearch(space, np.random.default_rng(0)),
    ):
        first = search.ask(8)
        assert len(first) == 8 and len({c.key for c in first}) == 8
        search.tell(first, [1.0 + n for n in range(8)])
        second = search.ask(8)
        assert not {c.key for c in first} & {c.key for c in second}
        assert search.best[0][0] == 1.0


def test_near_template_search_starts_at_the_template_and_stays_near_it():
    _, _, C = _matmul(64)
    space = Space(C, "llvm -mcpu=znver4 -num-cores=2")
    default = template_program(space)
    search = NearTemplateSearch(space, np.random.default_rng(0))
    first = search.ask(8)
    assert first[0].key == default.key and len({c.key for c in first}) == 8
    # every other program is a few decisions from the default, not a uniform sample
    changed = [sum(a != b for a, b in zip(c.values, default.values)) for c in first[1:]]
    assert all(c.values[0] == "template" for c in first) and max(changed) <= 4
    search.tell(first, [1.0] * 8)
    assert default.key not in {c.key for c in search.ask(8)}
    # a workload without a template gets random programs
    x = tc.placeholder((64,), name="x")
    plain = Space(tc.compute((64,), lambda i: x[i] * 2.0, name="double"), "llvm")
    assert template_program(plain) is None
    assert len(NearTemplateSearch(plain, np.random.default_rng(0)).ask(4)) == 4


def test_gradient_scheduler(tmp_path):
    assert gradient(1.0, [None]) == math.inf
    assert gradient(2.0, [3.0, 2.0, 1.5, 1.4, 1.3]) > gradient(1.0, [3.0, 2.0, 1.5, 1.4, 1.3])
    A, B, C = _matmul(32)
    X = tc.placeholder((64, 32), name="X")
    results = tune_tasks(
        [(C, 1.0), (tc.ops.softmax(X), 3.0)], trials=8, strategy="random", db=tmp_path / "t.db", batch=2
    )
    assert sum(r.trials for r in results) == 8 and all(r.trials >= 2 for r in results)


def test_task_schedulers_are_a_plug_point(tmp_path):
    """Round robin shares the rounds evenly; a TaskScheduler of one's own is asked for every
    round after the first pass, with the live tasks, their weights and their bests; a name no
    scheduler has, or a choice that is no live task, is a ConfigError."""
    from minitc.autotune.task_scheduler import TASK_SCHEDULERS, TaskScheduler

    assert set(TASK_SCHEDULERS) == {"gradient", "round-robin"}
    A, B, C = _matmul(16)
    X = tc.placeholder((8, 16), name="X")
    tasks = [(C, 1.0), (tc.ops.softmax(X), 5.0)]
    even = tune_tasks(tasks, trials=6, strategy="random", db=tmp_path / "t.db", batch=1, scheduler="round-robin")
    assert [r.trials for r in even] == [3, 3]

    class Second(TaskScheduler):
        name = "second"

        def __init__(self):
            self.asked = []

        def next_task(self, live, weights, bests, rng):
            self.asked.append((list(live), list(weights), [len(b) for b in bests]))
            return live[-1]

    mine = Second()
    results = tune_tasks(tasks, trials=5, strategy="random", db=tmp_path / "t2.db", batch=1, scheduler=mine)
    assert [r.trials for r in results] == [1, 4]
    assert mine.asked[0] == ([0, 1], [1.0, 5.0], [1, 1]) and len(mine.asked) == 3
    with pytest.raises(tc.ConfigError, match="unknown task scheduler 'fastest'.*gradient, round-robin"):
        tune_tasks(tasks, trials=2, db=tmp_path / "t3.db", scheduler="fastest")

    class Wrong(TaskScheduler):
        def next_task(self, live, weights, bests, rng):
            return 7

    with pytest.raises(tc.ConfigError, match="chose 7, not a live task"):
        tune_tasks(tasks, trials=4, strategy="random", db=tmp_path / "t4.db", batch=1, scheduler=Wrong)


def test_a_task_whose_strategy_fails_stops_and_the_others_go_on(tmp_path, monkeypatch):
    from minitc.autotune import registry
    from minitc.autotune.task_scheduler import TuningWarning

    class Broken(RandomSearch):
        def ask(self, n):
            raise tc.MinitcError("this strategy cannot write programs of this workload")

    def strategy(space, rng, cost_model=None, **_):
        return Broken(space, rng) if "softmax" in str(space.outputs) else RandomSearch(space, rng)

    monkeypatch.setitem(registry.STRATEGIES, "half-broken", strategy)
    A, B, C = _matmul(32)
    X = tc.placeholder((64, 32), name="X")
    with pytest.warns(TuningWarning, match="cannot write programs"):
        results = tune_tasks(
            [(tc.ops.softmax(X), 1.0), (C, 1.0)], trials=6, strategy="half-broken", db=tmp_path / "t.db", batch=2
        )
    assert results[0].trials == 0 and results[1].trials == 6
    assert results[1].kernel is not None


def test_every_module_is_reachable_by_its_dotted_path():
    """`import minitc.autotune.tuner as t` (or `minitc.x.y` in a REPL) must find the module: no
    function or object of a package may shadow one of its submodules, as `tc.tune` once did."""
    import functools
    import importlib
    import pkgutil

    import minitc.backends
    import minitc.lm

    for package in (tc, minitc.lm, minitc.backends):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            top, *path = info.name.split(".")
            assert functools.reduce(getattr, path, importlib.import_module(top)) is module, info.name
    assert callable(tc.tune) and tc.tune.__module__ == "minitc.autotune.tuner"


def test_a_session_prepares_its_own_processes_and_leaves_shared_ones(tmp_path):
    """A session's own builder and runner start (the runner set up) before its strategy is
    made; a runner shared by several sessions (tune_tasks) is set up only when measured."""
    from minitc.autotune.runner import LocalRunner
    from minitc.autotune.tuner import TuningSession

    C, db = _matmul(16)[2], str(tmp_path / "r.db")
    shared = LocalRunner()
    session = TuningSession(C, "random", "llvm", db, runner=shared)
    assert shared._worker.proc is None
    session.close()
    own = TuningSession(C, "random", "llvm", db)
    try:
        assert own.runner._worker.proc is not None and own.runner._worker._posted == 1
        assert all(w.proc is not None for w in own.builder._workers)
        assert own.round() > 0  # the posted setup's answer is read before the first run
    finally:
        own.close()
    assert own.runner._worker.proc is None
