"""The tuner's plug points, by name: search strategies, runners, and the extras stored with
each record. Built in: strategies `random`, `evolutionary` and `near-template`, runner `local`. Packages above
the tuner add their own without the tuner importing them: a package names a function in the
entry-point group `minitc.plugins` (pyproject.toml), and the first lookup calls it. minitc.lm
registers the `tlm` strategy and the tensor-language sentence every record stores that way.

    register_strategy("mine", factory)   # factory(space, rng, cost_model, **options) -> SearchStrategy
    make_strategy("evolutionary", space, rng)
    make_strategy(MySearch(), space, rng)  # a SearchStrategy (or subclass) of the caller's: bound to space
    register_runner("mine", factory)     # factory(target) -> Runner (interfaces.py)
    register_record_extras("sentence", factory)  # factory(space) -> fn(candidate) -> dict, or None
"""

from __future__ import annotations

from importlib.metadata import entry_points

from minitc.autotune.gpu_runner import GpuRunner
from minitc.autotune.interfaces import Runner, SearchStrategy, check_plug
from minitc.autotune.runner import LocalRunner
from minitc.autotune.search import EvolutionarySearch, NearTemplateSearch, RandomSearch
from minitc.autotune.workload_key import workload_key
from minitc.errors import ConfigError, MinitcError
from minitc.target import is_gpu

STRATEGIES: dict = {}
RUNNERS: dict = {}
RECORD_EXTRAS: dict = {}
_loaded = False


def _load_plugins() -> None:
    global _loaded
    if _loaded:
        return
    for ep in entry_points(group="minitc.plugins"):
        try:
            ep.load()()
        except Exception as e:  # a broken plug-in must say which one it is, on every lookup
            raise MinitcError(f"the minitc plug-in {ep.name!r} ({ep.value}) failed to load: {e}") from e
    _loaded = True


def register_strategy(name: str, factory) -> None:
    STRATEGIES[name] = factory


def register_runner(name: str, factory) -> None:
    RUNNERS[name] = factory


def register_record_extras(name: str, factory) -> None:
    RECORD_EXTRAS[name] = factory


def strategy_names() -> tuple:
    _load_plugins()
    return tuple(STRATEGIES)


def make_strategy(strategy, space, rng, cost_model=None, **options):
    """The search strategy for `space`: `strategy` is a registered name (options such as `lm`
    and `learn` go to its factory), a SearchStrategy (bound to `space` and `rng` unless made
    with a space of its own) or a SearchStrategy subclass (made without arguments, then bound)."""
    if not isinstance(strategy, str):
        return _own_strategy(strategy, space, rng, cost_model, options)
    _load_plugins()
    if strategy not in STRATEGIES:
        raise MinitcError(
            f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)} (strategies of other packages, "
            "such as minitc.lm's tlm, register through the entry point group minitc.plugins when installed), "
            "or pass a SearchStrategy"
        )
    return check_plug(STRATEGIES[strategy](space, rng, cost_model, **options), SearchStrategy, f"strategy {strategy!r}")


def _own_strategy(strategy, space, rng, cost_model, options: dict):
    """A caller's strategy object or class, bound to `space`."""
    given = [name for name, value in {"cost_model": cost_model, **options}.items() if value]
    if given:
        raise ConfigError(
            f"{', '.join(name + '=' for name in given)}: options of the strategies chosen by name; "
            "a strategy object or class is configured by its own constructor"
        )
    if isinstance(strategy, type) and issubclass(strategy, SearchStrategy):
        try:
            strategy = strategy()
        except TypeError as e:
            raise ConfigError(
                f"strategy class {strategy.__name__} cannot be made without arguments ({e}); pass an instance instead"
            ) from e
    search = check_plug(strategy, SearchStrategy, "the strategy")
    if search.space is None:
        search.bind(space, rng)
    elif (search.workload, search.space.target.string) != (workload_key(space.outputs), space.target.string):
        raise ConfigError(
            f"the strategy {type(search).__name__} searches another workload or target ({search.workload}, "
            f"{search.space.target.string}); make it without a space and the tuner binds it"
        )
    return search


def make_runner(runner, target):
    """A Runner object as given, or the registered runner `runner` (a name) for `target`;
    anything else is a ConfigError naming what it lacks."""
    if not isinstance(runner, str):
        return check_plug(runner, Runner, "the runner")
    _load_plugins()
    if runner not in RUNNERS:
        raise MinitcError(f"unknown runner {runner!r}; choose one of {', '.join(RUNNERS)}")
    return check_plug(RUNNERS[runner](target), Runner, f"runner {runner!r}")


def record_extras(space):
    """One function of a candidate giving the extra fields its record stores (every
    registered factory's, merged), or None when no factory has any for this space."""
    _load_plugins()
    writers = [w for w in (factory(space) for factory in RECORD_EXTRAS.values()) if w is not None]
    if not writers:
        return None
    return lambda candidate: {k: v for w in writers for k, v in w(candidate).items()}


def _random(space, rng, cost_model=None, **_):
    return RandomSearch(space, rng)


def _near_template(space, rng, cost_model=None, **_):
    return NearTemplateSearch(space, rng)


def _evolutionary(space, rng, cost_model=None, **_):
    return EvolutionarySearch(space, cost_model, rng)


def _local_runner(target):
    return GpuRunner(target=target) if is_gpu(target) else LocalRunner()


register_strategy("random", _random)
register_strategy("evolutionary", _evolutionary)
register_strategy("near-template", _near_template)
register_runner("local", _local_runner)
