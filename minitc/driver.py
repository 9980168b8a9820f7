"""`tc.lower` and `tc.build`: from a schedule (or output tensors) to IR and to a callable."""
from __future__ import annotations

from .errors import BuildError, ScheduleError
from .ir import Kernel
from .lower import lower_state
from .schedule.schedule import Schedule
from .te import Tensor


def _as_schedule(what, target: str | None = None, db=None) -> Schedule:
    """A Schedule as given, or for output tensors: the best tuning record for this workload,
    target and machine if the records database (`db`, default: the user's) has one, else the
    operator's default schedule for `target`; the naive nest when target is None."""
    if isinstance(what, Schedule):
        return what
    if isinstance(what, Tensor) or (isinstance(what, (list, tuple)) and what and all(isinstance(t, Tensor) for t in what)):
        if target is None:
            return Schedule(what)
        if db is not False:
            from .tune.tuner import best_schedule

            tuned = best_schedule(what, target, db)
            if tuned is not None:
                return tuned
        from .schedules import default_schedule

        return default_schedule(what, target)
    raise ScheduleError(f"expected a Schedule, an output tensor or a list of them, got {type(what).__name__}")


def _arguments(s: Schedule, args) -> tuple[list, list]:
    """Input and output stage names in argument order. By default the inputs are the
    placeholders in the order they were created and the outputs follow in schedule order."""
    outputs = list(s.state.outputs)
    if args is None:
        placeholders = [t for t, n in s._names.items() if s.state.has(n) and s.state.stage(n).is_placeholder]
        placeholders.sort(key=lambda t: t.order)
        return [s._names[t] for t in placeholders], outputs
    names = [s.stage_name(a) for a in args]
    inputs = [n for n in names if s.state.stage(n).is_placeholder]
    given_outputs = [n for n in names if not s.state.stage(n).is_placeholder]
    missing = [n for n, st in ((n, s.state.stage(n)) for n in s._names.values() if s.state.has(n)) if st.is_placeholder and n not in inputs]
    if missing:
        raise ScheduleError(f"args is missing input(s) {', '.join(missing)} that the computation reads")
    if sorted(given_outputs) != sorted(outputs):
        raise ScheduleError(f"args must list the outputs {', '.join(outputs)}, got {', '.join(given_outputs) or 'none'}")
    return inputs, given_outputs


def lower(schedule, args=None, name: str | None = None, target: str | None = None, db=None) -> Kernel:
    """Lower a schedule to loop-nest IR; `print` it to read the loop nest. Output tensors are
    lowered naively, or with their tuned / default schedule for `target` when one is given."""
    s = _as_schedule(schedule, target, db)
    inputs, outputs = _arguments(s, args)
    return lower_state(s.state, inputs, outputs, name or f"{outputs[0]}_kernel")


def build(schedule, target: str = "llvm", args=None, name: str | None = None, db=None):
    """Compile a schedule (or output tensors) into a callable kernel.

    `target` is `"llvm"` for the host CPU, or e.g. `"llvm -mcpu=znver1"`. Given output tensors
    instead of a Schedule, the operator's default schedule (its template) is used;
    `tc.build(tc.Schedule(C))` builds the naive loop nest.
    """
    if not isinstance(target, str) or not target.split() or target.split()[0] != "llvm":
        raise BuildError(f"unknown target {target!r}; this build supports 'llvm' (host CPU) and 'llvm -mcpu=...'")
    kernel = lower(schedule, args, name, target=target, db=db)
    from backends.llvm.jit import compile_kernel
    from backends.llvm.target import parse_target

    from .function import Function

    compiled = compile_kernel(kernel, parse_target(target))
    return Function(kernel, compiled)
