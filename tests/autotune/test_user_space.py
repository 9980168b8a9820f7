"""Design spaces users write (issue 43, item 2): a schedule program with sampling instructions
is a space that every strategy tunes, whose records replay like any other; ScheduleRules
extend the generic space."""

import json
import math

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.generators import GenericSketch, ScheduleFn
from minitc.autotune.sampler import factorizations
from minitc.autotune.search import EvolutionarySearch, EvolutionConfig
from minitc.autotune.space import Space
from minitc.autotune.space_rules import RULES, ScheduleRule, register_rule, unregister_rule
from minitc.autotune.tuner import decode_trace, tuned_schedule
from minitc.schedule import Trace
from minitc.target import parse_target


def _workload(m=32, n=48, k=16):
    """relu(A @ B + bias) written with tc.compute: two stages (the product, the epilogue)."""
    A = tc.placeholder((m, k), name="A")
    B = tc.placeholder((k, n), name="B")
    bias = tc.placeholder((n,), name="bias")
    r = tc.reduce_axis(k, "r")
    P = tc.compute((m, n), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="P")
    Y = tc.compute((m, n), lambda i, j: tc.max(P[i, j] + bias[j], 0.0), name="Y")
    return Y, P


def _strategy(name: str):
    """A strategy by name; the evolutionary one with a small population (a fast test)."""
    return EvolutionarySearch(config=EvolutionConfig(population=16, generations=1)) if name == "evolutionary" else name


def _inputs(m=32, n=48, k=16):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    return (a, b, bias), np.maximum(a @ b + bias, 0)


def fused_space(Y, P):
    """Tile the epilogue, compute the product at a sampled loop of it, vectorize or not."""

    def fused(s):
        i, j = s.loops(Y)
        ti = s.sample_perfect_tile(i, 2)
        tj = s.sample_perfect_tile(j, 2, max_innermost=16)
        io, ii = s.split(i, factor=ti[1])
        jo, ji = s.split(j, factor=tj[1])
        s.reorder(io, jo, ii, ji)
        if s.sample_categorical([True, False], probs=[0.75, 0.25]):
            s.vectorize(ji)  # before the location: a vectorized loop is no candidate
        where = s.sample_compute_location(P)
        if where is not None:
            s.compute_at(P, where)
        s.unroll(ii) if s.sample_categorical(["unroll", "keep"], name="Y.inner") == "unroll" else None

    return fused


def test_instructions_draw_legal_values_and_replay_from_decisions():
    Y, P = _workload()
    space = Space(Y, "llvm", fused_space(Y, P))
    assert space.sketches == ("fused",)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(12):
        c = space.sample(rng)
        sketch, ti, tj, vec, where, inner = c.decisions
        assert sketch.value == "fused" and ti.value in factorizations(32, 2) and math.prod(tj.value) == 48
        assert tj.value[-1] <= 16 and tj.domain == factorizations(48, 2, 16)
        assert where.kind == "location" and where.value in where.domain and where.domain[0] == "root"
        assert vec.value in (True, False) and inner.name == "Y.inner" and inner.value in ("unroll", "keep")
        again = space.replay(c.values)  # the decisions replay exactly
        assert again.key == c.key and again.values == c.values
        steps = Trace.from_json(c.trace)  # the trace alone rebuilds the program, without the space
        assert tc.Schedule(Y).replay(steps).trace.to_json() == c.trace
        seen.add(c.key)
    assert len(seen) > 3
    assert "split" in c.trace and "sample" not in c.trace  # the instructions leave only primitives


def test_defaults_outside_tuning_are_documented_and_runnable():
    Y, P = _workload()
    s = tc.Schedule(Y)
    i, j = s.loops(Y)
    assert s.sample_perfect_tile(i, 2) == (4, 8)  # the most balanced tiling of 32, largest innermost
    assert s.sample_perfect_tile(j, 3) == (3, 4, 4)
    assert s.sample_categorical([1, 2, 3]) == 1
    assert s.sample_categorical([1, 2, 3], probs=[0.2, 0.5, 0.3]) == 2
    assert s.sample_compute_location(P) is None  # root
    s = tc.Schedule(Y)
    fused_space(Y, P)(s)
    args, expected = _inputs()
    np.testing.assert_allclose(tc.build(s)(*args), expected, rtol=1e-4, atol=1e-4)


def test_probs_weight_the_draws():
    Y, _ = _workload()
    space = Space(Y, "llvm", lambda s: s.sample_categorical(["a", "b"], probs=[0.9, 0.1], name="pick") and None)
    rng = np.random.default_rng(1)
    picks = [space.sample(rng).values[1] for _ in range(200)]
    assert 160 < picks.count("a") < 200


@pytest.mark.parametrize("strategy", ["random", "evolutionary", "tlm"])
def test_tune_a_user_space_and_replay_its_records(strategy, tmp_path):
    if strategy == "tlm":
        pytest.importorskip("torch")
    Y, P = _workload()
    db = tmp_path / "r.db"
    space = fused_space(Y, P)
    with pytest.warns() if strategy == "tlm" else _nothing():
        r = tc.tune(Y, space=space, strategy=_strategy(strategy), trials=4, batch=2, db=db, seed=0)
    assert r.trials == 4 and r.errors == 0 and r.best_ms > 0
    args, expected = _inputs()
    np.testing.assert_allclose(r.kernel(*args), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tc.build(Y, db=db)(*args), expected, rtol=1e-4, atol=1e-4)
    record = json.loads(r.best_trace)
    assert record["sketch"] == "fused" and record["decisions"][0] == "fused"
    values, steps = decode_trace(r.best_trace)
    assert Space(Y, "llvm", space).replay(values).trace == steps.to_json()
    best = tuned_schedule(Y, "llvm", db)
    assert best.trace.to_json() == steps.to_json()
    assert len(tc.explain(best).steps) == len(steps) + 1  # the naive nest, then each step
    if strategy == "tlm":  # the string categorical cannot be written: drawn at random, counted
        assert r.search_stats["unwritable"] > 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_records_of_two_spaces_share_the_workload(tmp_path):
    """A trace is a trace: the default space's tuning reads the user space's records (its
    programs count as measured; their decisions are not replayed in another space)."""
    from minitc.autotune.database import Database

    Y, P = _workload()
    db = tmp_path / "r.db"
    first = tc.tune(Y, space=fused_space(Y, P), strategy="random", trials=2, batch=2, db=db, seed=0)
    with Database(db) as d:
        fused = {rec.trace for rec in d.records(first.workload)}
    r = tc.tune(Y, strategy=_strategy("evolutionary"), trials=2, batch=2, db=db, seed=0)
    assert r.trials == 2 and r.workload == first.workload  # one workload, whatever the space
    with Database(db) as d:
        records = d.records(r.workload)
        (best,) = d.best(r.workload, parse_target("llvm").string)
    later = {rec.trace for rec in records} - fused
    assert {decode_trace(t)[0][0] for t in fused} == {"fused"}
    assert later and {decode_trace(t)[0][0] for t in later} <= {"template", "generic"}  # never the fused space's
    assert r.best_trace == best.trace  # the fastest program of both spaces
    args, expected = _inputs()
    np.testing.assert_allclose(r.kernel(*args), expected, rtol=1e-4, atol=1e-4)


class _Blocked(ScheduleRule):
    """A toy rule: a sampled block size for the epilogue's inner loop."""

    name = "test-blocked"

    def applies(self, s, out, target):
        return not s.state.stage(out).reduce_axes

    def apply(self, s, out, target, sampler):
        loop = s.loops(out)[-1]
        factor = sampler.categorical(f"{out}.block", (1, 2, 4))
        if factor > 1 and s.state.stage(out).loops[-1].kind == "serial":
            s.split(loop, factor=factor)


def test_a_registered_rule_shows_up_in_the_generic_space():
    Y, _ = _workload()
    register_rule(_Blocked(), before="compute-location")
    try:
        assert list(RULES)[-2:] == ["test-blocked", "compute-location"]
        c = Space(Y, "llvm").sample(np.random.default_rng(0), sketch="generic")
        assert "Y.block" in [d.name for d in c.decisions]
    finally:
        unregister_rule("test-blocked")
    c = Space(Y, "llvm").sample(np.random.default_rng(0), sketch="generic")
    assert "Y.block" not in [d.name for d in c.decisions]
    # or for one space only: the generic sketch with rules of one's own
    only = Space(Y, "llvm", GenericSketch(rules=[_Blocked()]))
    assert [d.name for d in only.sample(np.random.default_rng(0)).decisions] == ["sketch", "Y.block"]


def test_bad_input_is_a_clear_error():
    Y, P = _workload()
    other = tc.Schedule(Y)
    s = tc.Schedule(Y)
    with pytest.raises(tc.ScheduleError, match="belongs to another Schedule"):
        s.sample_perfect_tile(other.loops(Y)[0], 2)
    with pytest.raises(tc.ScheduleError, match="sum to 1"):
        s.sample_categorical([1, 2], probs=[0.5, 0.6])
    with pytest.raises(tc.ScheduleError, match="one per value"):
        s.sample_categorical([1, 2], probs=[1.0])
    with pytest.raises(tc.ScheduleError, match="not a number, string"):
        s.sample_categorical([object()])
    with pytest.raises(tc.ScheduleError, match="exactly one|output"):
        s.sample_compute_location(Y)

    def broken(s):
        raise KeyError("oops")

    with pytest.raises(tc.ConfigError, match="the design space broken raised KeyError"):
        tc.tune(Y, space=broken, strategy="random", trials=1)

    def illegal(s):
        s.compute_inline(Y)  # an output cannot be inlined

    with pytest.raises(tc.ScheduleError, match="the design space illegal is illegal with its default decisions"):
        Space(Y, "llvm", illegal)
    with pytest.raises(tc.ConfigError, match="built-in sketches"):
        Space(Y, "llvm", "mine")
    with pytest.raises(tc.ConfigError, match="distinct names"):
        Space(Y, "llvm", [ScheduleFn(lambda s: None, "a"), ScheduleFn(lambda s: None, "a")])
    with pytest.raises(tc.ConfigError, match="ScheduleRule"):
        register_rule(lambda s: None)
