"""The tuner's registries (minitc/autotune/registry.py): strategies, runners and record extras
by name, the minitc.plugins entry point that registers minitc.lm's, and their errors."""

import numpy as np
import pytest

import minitc as tc
from minitc.autotune import registry
from minitc.autotune.runner import LocalRunner
from minitc.autotune.search import EvolutionarySearch, NearTemplateSearch, RandomSearch
from minitc.autotune.space import Space
from minitc.errors import ConfigError, MinitcError


def _space():
    A = tc.placeholder((16, 16), name="A")
    B = tc.placeholder((16, 16), name="B")
    return Space(tc.ops.matmul(A, B), "llvm")


def test_builtin_and_plugin_strategies_are_registered():
    assert registry.strategy_names()[:2] == ("random", "evolutionary")
    assert "tlm" in registry.strategy_names()  # from minitc.lm, through the minitc.plugins entry point
    assert "sentence" in registry.RECORD_EXTRAS
    rng = np.random.default_rng(0)
    assert isinstance(registry.make_strategy("random", _space(), rng), RandomSearch)
    assert isinstance(registry.make_strategy("evolutionary", _space(), rng), EvolutionarySearch)
    assert isinstance(registry.make_strategy("near-template", _space(), rng), NearTemplateSearch)


def test_unknown_names_are_clear_errors():
    with pytest.raises(MinitcError, match="unknown strategy 'annealing'; choose one of random, evolutionary"):
        registry.make_strategy("annealing", _space(), np.random.default_rng(0))
    with pytest.raises(MinitcError, match="unknown runner 'ray'; choose one of local"):
        registry.make_runner("ray", "llvm")


def test_runners_by_name_or_object():
    runner = registry.make_runner("local", "llvm")
    try:
        assert isinstance(runner, LocalRunner)
    finally:
        runner.close()
    mine = LocalRunner()
    assert registry.make_runner(mine, "llvm") is mine
    with pytest.raises(
        ConfigError, match=r"the runner is a object, not a .*Runner \(it lacks prepare, run, fresh, close\)"
    ):
        registry.make_runner(object(), "llvm")


def test_registered_strategy_and_record_extras_are_used(monkeypatch):
    monkeypatch.setitem(registry.STRATEGIES, "first", lambda space, rng, cost_model=None, **_: RandomSearch(space, rng))
    monkeypatch.setattr(registry, "RECORD_EXTRAS", {"a": lambda space: lambda c: {"a": 1}, "none": lambda space: None})
    search = registry.make_strategy("first", _space(), np.random.default_rng(0))
    (candidate,) = search.ask(1)
    assert registry.record_extras(_space())(candidate) == {"a": 1}
    monkeypatch.setattr(registry, "RECORD_EXTRAS", {})
    assert registry.record_extras(_space()) is None


def test_a_broken_plugin_names_itself(monkeypatch):
    class Broken:
        name, value = "oops", "somepkg.plugin:register"

        def load(self):
            raise ImportError("No module named 'somepkg'")

    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "entry_points", lambda group: [Broken()])
    with pytest.raises(MinitcError, match=r"plug-in 'oops' \(somepkg.plugin:register\) failed to load"):
        registry.strategy_names()
