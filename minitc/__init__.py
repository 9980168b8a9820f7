"""minitc: a small tensor compiler. Define with `placeholder/compute/reduce_axis`, schedule with
`Schedule`, inspect with `lower`, compile with `build`, search with `tune`.

This module is the API facade: it re-exports the public names of the layers below it (the
map is in the README); code inside minitc imports the modules themselves."""

from minitc import (
    dtypes,
    ops,
    printer,  # noqa: F401 - str(kernel): the printer lends Kernel its __str__
    target,
)
from minitc.autotune.database import records
from minitc.autotune.interfaces import TuneOptions
from minitc.autotune.tuner import tune
from minitc.backends.llvm.runtime import get_num_threads, set_num_threads
from minitc.driver import build, codegen, lower
from minitc.errors import (
    BuildError,
    CompilerFallbackWarning,
    ConfigError,
    DTypeError,
    IRError,
    LayoutError,
    MinitcError,
    RaceError,
    ScheduleError,
    ShapeError,
)
from minitc.explanation import explain
from minitc.expr import call, cast, maximum, minimum, select
from minitc.schedule import Schedule, Step, Trace
from minitc.te import Tensor, compute, max, min, placeholder, reduce_axis, sum

if_then_else = select


def compile(model, example_inputs, target: str = "llvm", db=None, **options):  # noqa: A001
    """Compile a PyTorch model for inputs like `example_inputs`; options: fallback, trials,
    strategy, scheduler, runner, space, progress, layout, dynamic_shapes
    (minitc.frontend.compile_model says what they do; imports torch)."""
    from minitc.frontend import compile_model

    return compile_model(model, example_inputs, target=target, db=db, **options)


def __getattr__(name):
    # RayRunner on first use only: `import minitc` never imports ray
    if name == "RayRunner":
        from minitc.autotune.ray_runner import RayRunner

        return RayRunner
    raise AttributeError(f"module 'minitc' has no attribute {name!r}")


def _intrinsic(name):
    def fn(x):
        return call(name, x)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}."
    return fn


exp = _intrinsic("exp")
log = _intrinsic("log")
sqrt = _intrinsic("sqrt")
tanh = _intrinsic("tanh")
erf = _intrinsic("erf")
abs = _intrinsic("abs")  # noqa: A001
floor = _intrinsic("floor")
ceil = _intrinsic("ceil")
sigmoid = _intrinsic("sigmoid")

__all__ = [
    "BuildError", "CompilerFallbackWarning", "ConfigError", "DTypeError", "IRError", "LayoutError", "MinitcError",
    "RaceError", "ScheduleError",
    "RayRunner", "ShapeError",
    "Schedule", "Step", "Tensor", "Trace", "TuneOptions",
    "abs", "build", "cast", "ceil", "codegen", "compile", "compute", "dtypes",
    "erf", "exp", "explain", "floor", "get_num_threads", "if_then_else", "log", "lower", "max", "maximum", "min",
    "minimum", "ops",
    "placeholder", "records", "reduce_axis", "select", "set_num_threads", "sigmoid", "sqrt", "sum", "tanh", "target",
    "tune",
]  # fmt: skip
