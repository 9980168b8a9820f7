"""Backends: from a schedule to code for a target, and to a callable that runs it.

    lower_schedule(s, target)       # the loop-nest IR (Kernel) lowered for the target's kind
    lower_gpu(s, "cuda")            # a GPU lowering split into checked launches (GpuProgram)
    codegen_schedule(s, target)     # the source a build compiles: LLVM IR, or CUDA C
    build_schedule(s, target)       # a callable: Function (llvm), GpuFunction (cuda), SimFunction (cuda-sim)

BUILDERS maps a target kind to the function that builds a schedule for it; a new backend
registers its kind here and its target strings in minitc.target.KINDS. Choosing the schedule
of output tensors (a tuned record or a template) happens above, in minitc/driver.py.
"""

from __future__ import annotations

from minitc.errors import BuildError
from minitc.ir import GPU_TAGS, Kernel
from minitc.lowering import lower_state
from minitc.lowering.gpu import plan_launches
from minitc.schedule import Schedule
from minitc.target import is_gpu, parse_cuda_target, parse_target, target_kind


def _binds(s: Schedule) -> bool:
    return any(lp.kind in GPU_TAGS for st in s.state.stages for lp in st.loops)


def lower_schedule(s: Schedule, target=None, args=None, name: str | None = None) -> Kernel:
    """Lower a schedule to loop-nest IR, for a GPU when the target is one (or, without a
    target, when the schedule binds GPU indices)."""
    inputs, outputs = s.arguments(args)
    gpu = is_gpu(target) if target is not None else _binds(s)
    return lower_state(s.state, inputs, outputs, name or f"{outputs[0]}_kernel", gpu=gpu)


def lower_gpu(s: Schedule, target="cuda", args=None, name: str | None = None):
    """Lower for a GPU and split into checked kernel launches (a GpuProgram)."""
    return plan_launches(lower_schedule(s, target, args, name), parse_cuda_target(target).limits)


def _build_llvm(s: Schedule, target, args, name):
    from minitc.backends.function import Function
    from minitc.backends.llvm.jit import compile_kernel

    kernel = lower_schedule(s, target, args, name)
    return Function(kernel, compile_kernel(kernel, parse_target(target)))


def _build_cuda(s: Schedule, target, args, name):
    from minitc.backends.cuda.device import device_target
    from minitc.backends.cuda.runtime import build_program

    tgt = device_target(target)  # compile for the GPU that is here
    return build_program(lower_gpu(s, target, args, name), tgt)


def _build_sim(s: Schedule, target, args, name):
    from minitc.backends.cuda.sim import SimFunction

    return SimFunction(lower_gpu(s, target, args, name))


BUILDERS = {"llvm": _build_llvm, "cuda": _build_cuda, "cuda-sim": _build_sim}


def build_schedule(s: Schedule, target="llvm", args=None, name: str | None = None):
    """Compile a schedule for `target` into a callable kernel."""
    kind = target_kind(target)
    if kind not in BUILDERS:
        raise BuildError(f"no backend builds target kind {kind!r}; backends: {', '.join(BUILDERS)}")
    return BUILDERS[kind](s, target, args, name)


def codegen_schedule(s: Schedule, target="llvm", args=None, name: str | None = None) -> str:
    """The source a build would compile, without compiling it or needing the hardware: LLVM IR
    for `llvm`, CUDA C for `cuda`."""
    kind = target_kind(target)
    if kind == "llvm":
        from minitc.backends.llvm.codegen import render

        return render(lower_schedule(s, target, args, name), target)
    if kind == "cuda-sim":
        raise BuildError("target 'cuda-sim' runs loop nests in numpy and generates no source; use target='cuda'")
    from minitc.backends.cuda.codegen import render_program

    return render_program(lower_gpu(s, target, args, name))
