"""The tuner's plug points (minitc/autotune/interfaces.py): every strategy is a SearchStrategy
and works without the tuner setting anything on it; a builder and runner written against the
base classes tune a workload; anything else is refused by name."""

import re
from pathlib import Path

import numpy as np
import pytest

import minitc as tc
from minitc.autotune import registry
from minitc.autotune.database import Database
from minitc.autotune.interfaces import Builder, Runner, SearchStrategy, TuneOptions
from minitc.autotune.runner import BuildResult, MeasureResult
from minitc.autotune.search import EvolutionarySearch, NearTemplateSearch, RandomSearch
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.errors import ConfigError


def _matmul(n=16):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    return tc.ops.matmul(A, B)


class Scores:
    """A cost model that records what it is told and prefers short traces."""

    trained = 1  # as if pretrained: a tlm search trusts it from the first round

    def __init__(self):
        self.registered, self.workloads = [], set()

    def register(self, workload, outputs):
        self.registered.append((workload, outputs))

    def fit(self, workload, traces, latencies_ms):
        self.workloads.add(workload)

    def predict(self, workload, traces):
        self.workloads.add(workload)
        return np.array([-float(len(t)) for t in traces])


def test_the_builtin_strategies_are_search_strategies_that_know_their_workload():
    space = Space(_matmul(), "llvm")
    rng = np.random.default_rng(0)
    for name in ("random", "evolutionary", "near-template"):
        search = registry.make_strategy(name, space, rng, Scores())
        assert isinstance(search, SearchStrategy) and search.workload == workload_key(space.outputs), name
    model = Scores()
    search = EvolutionarySearch(space, model, rng)
    first = search.ask(4)
    search.tell(first, [1.0, 2.0, 3.0, 4.0])
    assert model.registered == [(search.workload, space.outputs)] and model.workloads == {search.workload}


def test_a_strategy_made_without_a_space_is_bound_by_make_strategy():
    space = Space(_matmul(), "llvm")
    for given in (RandomSearch(), NearTemplateSearch, EvolutionarySearch(cost_model=Scores())):
        search = registry.make_strategy(given, space, np.random.default_rng(0))
        assert isinstance(search, SearchStrategy) and search.space is space
        assert len(search.ask(3)) == 3
    mine = RandomSearch(rng=np.random.default_rng(5))
    assert registry.make_strategy(mine, space, np.random.default_rng(0)).rng is mine.rng  # its own rng kept


def test_put_first_candidates_come_first_once():
    space = Space(_matmul(), "llvm")
    search = RandomSearch(space, np.random.default_rng(0))
    default = space.replay(space.default_values())
    search.put_first([default])
    first = search.ask(3)
    assert first[0].key == default.key and default.key not in {c.key for c in search.ask(3)}


def test_what_is_not_a_search_strategy_is_refused_by_name(monkeypatch):
    space, rng = Space(_matmul(), "llvm"), np.random.default_rng(0)

    class AskTell:
        def ask(self, n):
            return []

        def tell(self, candidates, latencies_ms):
            pass

    with pytest.raises(ConfigError, match=r"AskTell, not a .*SearchStrategy \(it lacks bind, seed, put_first, "):
        registry.make_strategy(AskTell(), space, rng)
    monkeypatch.setitem(registry.STRATEGIES, "duck", lambda space, rng, cost_model=None, **_: AskTell())
    with pytest.raises(ConfigError, match=r"strategy 'duck' is a AskTell"):
        registry.make_strategy("duck", space, rng)
    with pytest.raises(ConfigError, match="EvolutionarySearch.*another workload"):
        registry.make_strategy(EvolutionarySearch(Space(_matmul(8), "llvm"), Scores()), space, rng)
    with pytest.raises(ConfigError, match="cost_model=: options of the strategies chosen by name"):
        registry.make_strategy(RandomSearch(), space, rng, Scores())

    class Needs(SearchStrategy):
        def __init__(self, width):
            super().__init__()

    with pytest.raises(ConfigError, match="Needs cannot be made without arguments"):
        registry.make_strategy(Needs, space, rng)
    with pytest.raises(NotImplementedError, match="SearchStrategy must define ask"):
        SearchStrategy(space).ask(1)


def test_tlm_search_alone_ranks_with_a_trusted_cost_model():
    """Made directly (no tuner), a tlm search tells its cost model the workload and ranks with it."""
    torch = pytest.importorskip("torch")
    from minitc.lm.hardware import hardware
    from minitc.lm.model import ModelConfig, TensorLM
    from minitc.lm.strategy import TLMSearch
    from minitc.lm.tokenizer import Tokenizer

    torch.manual_seed(0)
    tok = Tokenizer.default()
    model = TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64))
    space, scores = Space(_matmul(64), "llvm"), Scores()
    search = TLMSearch(space, model, tok, hardware(space.target), np.random.default_rng(0), cost_model=scores)
    first = search.ask(8)
    lengths = [len(c.trace) for c in first]
    assert len(set(lengths)) > 1 and lengths == sorted(lengths)  # the cost model's order
    assert scores.registered == [(workload_key(space.outputs), space.outputs)]
    assert scores.workloads == {workload_key(space.outputs)}


class Modelled(Builder, Runner):
    """A builder and runner that compile nothing: each candidate's "latency" is a function of
    its trace (what a simulator or a remote service could answer)."""

    def __init__(self):
        self.built = self.ran = 0

    def build_one(self, task, trace):
        self.built += 1
        return [BuildResult(trace)]

    def run(self, task, built):
        self.ran += len(built)
        return [MeasureResult(b.trace, latencies_ms=(1.0 + len(b.trace) % 7,)) for b in built]


def test_a_builder_and_runner_written_against_the_base_classes_tune_a_workload(tmp_path):
    C, both = _matmul(), Modelled()
    r = tc.tune(C, trials=5, strategy="random", batch=5, db=tmp_path / "r.db", runner=both)  # builds too
    assert r.trials == 5 and r.errors == 0 and both.built == 5
    with Database(tmp_path / "r.db") as d:
        first = [rec.median_ms for rec in d.records(r.workload)][:5]
    assert r.best_ms == min(first) and both.ran > 5  # the finalists measured again by fresh() == itself
    a, b = np.ones((16, 16), "float32"), np.ones((16, 16), "float32")
    np.testing.assert_allclose(r.kernel(a, b), a @ b)
    with pytest.raises(ConfigError, match=r"builder is a object, not a .*Builder \(it lacks start, build, "):
        tc.tune(C, trials=1, db=tmp_path / "r.db", builder=object(), runner=both)


def test_tune_takes_exactly_the_tune_options_with_their_defaults():
    import dataclasses
    import inspect

    from minitc.autotune.tuner import TuningSession, tune

    params = list(inspect.signature(tune).parameters.values())[1:]  # after outputs
    assert [(p.name, p.default) for p in params] == [(f.name, f.default) for f in dataclasses.fields(TuneOptions)]
    with pytest.raises(TypeError, match="unexpected keyword argument 'trails'"):
        TuningSession(_matmul(), "random", trails=8)


def test_the_strategy_of_the_tuning_docs_tunes_a_workload():
    """docs/tuning.md, "Writing a strategy": its code block, run as written."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    section = doc.split("## Writing a strategy", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/tuning.md", "exec"), namespace)
    r, HillClimb = namespace["r"], namespace["HillClimb"]
    assert issubclass(HillClimb, SearchStrategy) and len(code.strip().splitlines()) <= 45
    assert r.trials == 8 and r.errors == 0 and r.best_ms is not None
    assert r.search_stats["edits"] >= 2  # the second round climbs from the first's best
    a, b = np.ones((32, 32), "float32"), np.ones((32, 32), "float32")
    np.testing.assert_allclose(r.kernel(a, b), a @ b)


def test_a_session_describes_its_workload_once():
    """The space, the records' key and form, and the measuring task all read one Workload."""
    from minitc.autotune.runner import Task
    from minitc.autotune.tuner import TuningSession
    from minitc.autotune.workload import Workload
    from minitc.autotune.workload_key import canonical, describe, workload_key

    A, B = tc.placeholder((8, 12), name="A"), tc.placeholder((12, 16), name="B")
    C = tc.ops.matmul(A, B)
    w = Workload(C)
    assert w.key == workload_key([C]) and w.form == canonical([C], attrs=True) and w.description == describe([C])
    assert [t.shape for t in w.arguments] == [(8, 12), (12, 16), (8, 16)] and w.num_inputs == 2
    task = Task.from_workload(w)
    assert task.key == w.key and [a.shape for a in task.inputs] == [(8, 12), (12, 16)]
    session = TuningSession(C, "random", "llvm", db=":memory:")
    try:
        assert session.workload.key == session.key == session.task.key == w.key
        assert session.space.outputs is session.workload.outputs
    finally:
        session.close()
