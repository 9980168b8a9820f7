"""`tc.lower`, `tc.codegen` and `tc.build`: from a schedule, or from output tensors, to IR, to
source and to a callable.

Given output tensors rather than a Schedule, the schedule is the operator's template for the
target (minitc/templates/), or for a computation without one the generic design space's
analytical default (autotune/default_schedule.py), or the best tuning record for the workload
on this machine where records are asked for (`db=` or a `with tc.records(DB):` block) and have
one; without a target, the naive loop nest. The same call builds the same code on every machine unless records
are asked for. The backends (minitc.backends) do the rest.
"""

from __future__ import annotations

from minitc.autotune.default_schedule import default_schedule
from minitc.autotune.tuner import tuned_schedule
from minitc.backends import build_schedule, codegen_schedule, lower_schedule
from minitc.backends import lower_gpu as _lower_gpu
from minitc.errors import ScheduleError
from minitc.ir import Kernel
from minitc.schedule import Schedule
from minitc.schedule.recorder import output_tensors
from minitc.te import Tensor


def _as_schedule(what, target: str | None = None, db=None) -> Schedule:
    """A Schedule as given; for output tensors the tuned schedule of the records asked for
    (`db`, else a tc.records block's; database.applied_records), else the default for
    `target` (its template or the generic default); the naive nest when target is None."""
    if isinstance(what, Schedule):
        return what
    if isinstance(what, Tensor) or (
        isinstance(what, (list, tuple)) and what and all(isinstance(t, Tensor) for t in what)
    ):
        outputs = output_tensors(what)  # a placeholder or a repeated output is refused here
        if target is None:
            return Schedule(outputs)
        tuned = tuned_schedule(outputs, target, db)
        return tuned if tuned is not None else default_schedule(outputs, target)
    raise ScheduleError(f"expected a Schedule, an output tensor or a list of them, got {type(what).__name__}")


def lower(schedule, args=None, name: str | None = None, target: str | None = None, db=None) -> Kernel:
    """Lower a schedule to loop-nest IR; `print` it to read the loop nest. Output tensors are
    lowered naively, or with their tuned / default schedule for `target` when one is given. A
    schedule with GPU bindings lowers for a GPU unless `target` says otherwise."""
    return lower_schedule(_as_schedule(schedule, target, db), target, args, name)


def lower_gpu(schedule, target: str = "cuda", args=None, name: str | None = None, db=None):
    """Lower for a GPU and split into checked kernel launches (a GpuProgram)."""
    return _lower_gpu(_as_schedule(schedule, target, db), target, args, name)


def codegen(schedule, target: str = "llvm", args=None, name: str | None = None, db=None) -> str:
    """The source a build would compile, without compiling it or needing the hardware: LLVM IR
    for `llvm`, CUDA C for `cuda`."""
    return codegen_schedule(_as_schedule(schedule, target, db), target, args, name)


def build(schedule, target: str = "llvm", args=None, name: str | None = None, db=None):
    """Compile a schedule (or output tensors) into a callable kernel.

    `target` is `"llvm"` for the host CPU (or e.g. `"llvm -mcpu=znver1"`), `"cuda"` for an NVIDIA
    GPU through CuPy, or `"cuda-sim"` for the numpy GPU simulator (slow, exact, checks races).
    Given output tensors instead of a Schedule, the operator's default schedule (its template)
    for the target is used, or the best program of the records database `db` (or of an
    enclosing `with tc.records(DB):` block) for this workload and machine where it has one;
    `tc.build(tc.Schedule(C))` builds the naive loop nest.
    """
    return build_schedule(_as_schedule(schedule, target, db), target, args, name)
