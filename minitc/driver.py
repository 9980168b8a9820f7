"""`tc.lower` and `tc.build`: from a schedule (or output tensors) to IR and to a callable."""
from __future__ import annotations

from .errors import BuildError, ScheduleError
from .ir import Kernel
from .lowering import lower_state
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
            from .autotune.tuner import best_schedule

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


GPU_TARGETS = ("cuda", "cuda-sim")


def target_kind(target: str) -> str:
    """"llvm", "cuda" or "cuda-sim": the first word of a target string."""
    words = target.split() if isinstance(target, str) else []
    if not words or words[0] not in ("llvm",) + GPU_TARGETS:
        raise BuildError(
            f"unknown target {target!r}; use 'llvm' (host CPU, or 'llvm -mcpu=...'), 'cuda' (an NVIDIA GPU, "
            "or 'cuda -arch=sm_90'), or 'cuda-sim' (the GPU simulated with numpy)"
        )
    return words[0]


def _binds(s: Schedule) -> bool:
    from .ir import GPU_TAGS

    return any(lp.kind in GPU_TAGS for st in s.state.stages for lp in st.loops)


def lower(schedule, args=None, name: str | None = None, target: str | None = None, db=None) -> Kernel:
    """Lower a schedule to loop-nest IR; `print` it to read the loop nest. Output tensors are
    lowered naively, or with their tuned / default schedule for `target` when one is given. A
    schedule with GPU bindings lowers for a GPU unless `target` says otherwise."""
    s = _as_schedule(schedule, target, db)
    inputs, outputs = _arguments(s, args)
    gpu = target_kind(target) in GPU_TARGETS if target is not None else _binds(s)
    return lower_state(s.state, inputs, outputs, name or f"{outputs[0]}_kernel", gpu=gpu)


def lower_gpu(schedule, target: str = "cuda", args=None, name: str | None = None, db=None):
    """Lower for a GPU and split into checked kernel launches (a GpuProgram)."""
    from backends.cuda.target import parse_cuda_target

    from .lowering.gpu import plan_launches

    tgt = parse_cuda_target(target)
    return plan_launches(lower(schedule, args, name, target=target, db=db), tgt.limits)


def codegen(schedule, target: str = "llvm", args=None, name: str | None = None, db=None) -> str:
    """The source a build would compile, without compiling it or needing the hardware: LLVM IR
    for `llvm`, CUDA C for `cuda`."""
    kind = target_kind(target)
    if kind == "llvm":
        from backends.llvm.codegen import render

        return render(lower(schedule, args, name, target=target, db=db), target)
    if kind == "cuda-sim":
        raise BuildError("target 'cuda-sim' runs loop nests in numpy and generates no source; use target='cuda'")
    from backends.cuda.codegen import render_program

    return render_program(lower_gpu(schedule, target, args, name, db))


def build(schedule, target: str = "llvm", args=None, name: str | None = None, db=None):
    """Compile a schedule (or output tensors) into a callable kernel.

    `target` is `"llvm"` for the host CPU (or e.g. `"llvm -mcpu=znver1"`), `"cuda"` for an NVIDIA
    GPU through CuPy, or `"cuda-sim"` for the numpy GPU simulator (slow, exact, checks races).
    Given output tensors instead of a Schedule, the operator's default schedule (its template)
    for the target is used; `tc.build(tc.Schedule(C))` builds the naive loop nest.
    """
    kind = target_kind(target)
    if kind == "cuda-sim":
        from backends.cuda.sim import SimFunction

        return SimFunction(lower_gpu(schedule, target, args, name, db))
    if kind == "cuda":
        from backends.cuda.target import parse_cuda_target

        tgt = parse_cuda_target(target, query_device=True)
        from backends.cuda.runtime import build_program

        return build_program(lower_gpu(schedule, target, args, name, db), tgt)
    kernel = lower(schedule, args, name, target=target, db=db)
    from backends.llvm.jit import compile_kernel
    from backends.llvm.target import parse_target

    from .function import Function

    compiled = compile_kernel(kernel, parse_target(target))
    return Function(kernel, compiled)
