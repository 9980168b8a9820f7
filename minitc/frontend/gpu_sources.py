"""The CUDA C of every kernel `tc.compile(model, inputs, target="cuda")` would build, rendered
without compiling or running anything (no GPU, no CuPy): the same import, graph passes, tasks
and template traces as a compile, stopped at code generation.

    for task, source in model_sources(model, inputs):   # one translation unit per fused group
        ...                                            # e.g. nvcc -arch=sm_90 --ptx (tests/gpu/test_gpu_nvcc.py)

Each task's kernels are named `g<k>` (with the launch suffixes of a multi-launch program), so the
sources of one model concatenate into one file with distinct names (the helpers are guarded).
"""

from __future__ import annotations

from minitc.backends import lower_gpu
from minitc.backends.cuda.codegen import render_program
from minitc.frontend.compiler import model_tasks, template_trace_or_naive
from minitc.schedule import Schedule


def model_sources(model, example_inputs, target: str = "cuda", layout: str = "auto") -> list:
    """[(ModelTask, CUDA C)] for every distinct kernel of the model, in first-use order; each
    task's `trace` is set to the template trace its source was rendered from."""
    sources = []
    for k, task in enumerate(model_tasks(model, example_inputs, target, layout)):
        task.trace = template_trace_or_naive(task, target)
        program = lower_gpu(Schedule(task.outputs).replay(task.trace), target, name=f"g{k}")
        sources.append((task, render_program(program)))
    return sources
