"""Measuring GPU candidates: the builder lowers and renders them and, where NVRTC is installed,
compiles them to a cubin (no GPU needed; the builders compile in parallel while the GPU
measures); the runner loads them (or compiles the source itself), checks and times them with
CUDA events in its own process, so a kernel that crashes or hangs takes down only that process.

With target `cuda-sim` the runner executes candidates in the numpy simulator instead: the
"timings" are then the simulator's wall time and mean nothing about a GPU, but the whole
tuning pipeline (space, build, check, records) runs on a machine without one, as in the tests.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

from minitc.autotune.runner import TARGET_BUILDERS, BuildResult, LocalRunner, mismatch, tolerances
from minitc.autotune.worker import WorkerCrashed, register_handler
from minitc.backends import build_schedule, lower_gpu
from minitc.errors import MinitcError
from minitc.schedule import Schedule, Trace
from minitc.target import is_gpu, target_kind


def build_gpu_candidate(outputs, args, target: str, trace: str) -> BuildResult:
    """Replay a trace, lower it for the GPU, render its CUDA C and compile that to a cubin (in a
    builder process). The result's symbol names the module (module_key) and its first kernel."""
    start = time.perf_counter()
    s = Schedule(outputs).replay(Trace.from_json(trace))
    program = lower_gpu(s, target, args=args)
    symbol, cubin = "gpu", None
    if target_kind(target) == "cuda":
        from minitc.backends.cuda.codegen import render_program, sanitize
        from minitc.backends.cuda.nvrtc import compile_cubin
        from minitc.backends.cuda.runtime import module_key
        from minitc.target.gpu import parse_cuda_target

        source = render_program(program)
        cubin = compile_cubin(source, parse_cuda_target(target).arch)
        if cubin is not None:
            symbol = json.dumps([module_key(source), sanitize(program.launches[0].name)])
    return BuildResult(trace, symbol, cubin, len(program.buffers), None, time.perf_counter() - start)


# -- in the runner process -------------------------------------------------------------------

_GPU: dict = {}


def gpu_runner_setup(inputs, expected, rtol, target: str) -> bool:
    atols = tolerances(expected, rtol)
    _GPU.update(inputs=inputs, expected=expected, rtol=rtol, atols=atols, target=target, device_inputs=None)
    if target_kind(target) == "cuda":
        import cupy

        _GPU["device_inputs"] = [cupy.asarray(a) for a in inputs]
        _GPU["device_expected"] = [cupy.asarray(e) for e in expected]  # checked on the GPU
        cupy.RawKernel('extern "C" __global__ void minitc_warm() {}', "minitc_warm").compile()  # loads NVRTC
    return True


def gpu_runner_run(outputs, args, trace: str, repeats: int, min_repeat_ms: float, symbol="gpu", cubin=None):
    """Build a candidate for the device (loading the builder's cubin if it made one), check it
    against the expected outputs, time it."""
    target, rtol, atols = _GPU["target"], _GPU["rtol"], _GPU["atols"]
    if cubin:
        _preload(symbol, cubin)
    try:
        f = build_schedule(Schedule(outputs).replay(Trace.from_json(trace)), target, args=args)
    except MinitcError as e:
        return ("error", f"build: {e}")
    simulated = _GPU["device_inputs"] is None
    inputs = _GPU["inputs"] if simulated else _GPU["device_inputs"]
    start = time.perf_counter()
    got = f(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    if simulated:
        once = time.perf_counter() - start
        wrong = mismatch(got, _GPU["expected"], rtol, atols)
    else:
        import cupy

        cupy.cuda.get_current_stream().synchronize()  # `once` is the kernel's time, not its launch's
        once = time.perf_counter() - start
        wrong = mismatch(got, _GPU["device_expected"], rtol, atols, xp=cupy)
    if wrong:
        return ("error", wrong)
    if simulated:
        return ("ok", ((once * 1e3,) * repeats, once))
    number = max(1, int(min_repeat_ms / 1e3 / max(once, 1e-6)))
    latencies = tuple(f.time_ms(*inputs, number=number, repeat=repeats))
    return ("ok", (latencies, once + sum(latencies) * number / 1e3))


TARGET_BUILDERS.append((is_gpu, build_gpu_candidate))
register_handler("gpu_setup", gpu_runner_setup)
register_handler("gpu_run", gpu_runner_run)


def _preload(symbol: str, cubin: bytes) -> None:
    from minitc.backends.cuda.runtime import has_module, preload_module

    key, kernel = json.loads(symbol)
    if has_module(key):  # measured before (the final re-measurement)
        return
    fd, path = tempfile.mkstemp(suffix=".cubin", prefix="minitc-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        preload_module(key, path, kernel)
    finally:
        os.unlink(path)


class GpuRunner(LocalRunner):
    """Runs built GPU candidates one at a time in a separate process (see LocalRunner). A
    failure inside the worker (a CUDA error, a missing CuPy) is recorded as the candidate's.
    Each repeat is one pair of CUDA events around back-to-back runs lasting `min_repeat_ms`:
    the events resolve about half a microsecond, so a millisecond is plenty."""

    CRASHES = (WorkerCrashed, MinitcError)

    def __init__(self, timeout: float = 30.0, repeats: int = 5, min_repeat_ms: float = 1.0, target: str = "cuda"):
        super().__init__(timeout, repeats, min_repeat_ms)
        self.target = target

    def fresh(self, repeats: int) -> GpuRunner:
        """A runner for the final re-measurement that shares this one's process: a new process
        would pay the CUDA context and NVRTC's start again, seconds of a short search."""
        other = GpuRunner(self.timeout, repeats, self.min_repeat_ms, self.target)
        other._worker, other._task, other._owner = self._worker, self._task, self
        return other

    def _setup_request(self, task) -> tuple:
        return ("gpu_setup", task.inputs, task.expected, task.rtol, self.target)

    def close(self) -> None:
        owner = getattr(self, "_owner", None)
        if owner is None:
            super().close()
        else:  # a fresh() runner: its process is its owner's, whose task it may have set up again
            owner._task = self._task if owner._worker.proc is not None else None

    def _call(self, b):
        return self._worker.call(
            "gpu_run",
            self._task.outputs,
            self._task.args,
            b.trace,
            self.repeats,
            self.min_repeat_ms,
            b.symbol,
            b.object_code,
            timeout=self.timeout,
        )
