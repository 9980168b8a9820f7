"""minitc: a small tensor compiler. Define with `placeholder/compute/reduce_axis`, schedule with
`Schedule`, inspect with `lower`, compile with `build`."""
from . import dtypes
from .errors import BuildError, DTypeError, IRError, LayoutError, MinitcError, RaceError, ScheduleError, ShapeError
from .expr import cast, maximum, minimum, select
from .te import Tensor, compute, max, min, placeholder, reduce_axis, sum

if_then_else = select


def _intrinsic(name):
    from .expr import call

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

from . import ops  # noqa: E402
from .driver import build, codegen, lower  # noqa: E402
from .schedule.schedule import Schedule  # noqa: E402
from .schedule.trace import Step, Trace  # noqa: E402


def tune(outputs, trials: int = 64, strategy: str = "tlm", target: str = "llvm", db=None, **options):
    """Search for a fast schedule of `outputs` for `target` ("llvm", or "cuda" on an NVIDIA
    GPU); see minitc/autotune/tuner.py. Returns a TuneResult with .kernel, .best_ms, .trials,
    .errors and .history."""
    from .autotune.tuner import tune as _tune

    return _tune(outputs, trials=trials, strategy=strategy, target=target, db=db, **options)


def set_num_threads(n: int) -> None:
    """Threads used by parallel loops (default: MINITC_NUM_THREADS, else the usable CPUs)."""
    from backends.llvm.runtime import set_num_threads as _set

    _set(n)


def get_num_threads() -> int:
    from backends.llvm.runtime import get_num_threads as _get

    return _get()
