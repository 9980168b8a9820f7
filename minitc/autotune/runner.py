"""Safe measurement of candidate programs: build in worker processes, run in an isolated runner
process, with timeouts. Nothing a candidate does (crash, hang, wrong result, compile error) can
take the tuner down; each failure becomes a result with an error string instead.

    task = Task.from_outputs(C)                      # inputs, expected outputs, argument order
    builder, runner = LocalBuilder(), LocalRunner()
    built = builder.build(task, [trace_json, ...])   # BuildResult per trace (object code or error)
    results = runner.run(task, built)                # MeasureResult per candidate

Builder and runner are small base classes (interfaces.py: `build(task, traces)`, `run(task,
built)`) over plain picklable data, so they spread over a cluster (ray_runner.py) unchanged.
"""

from __future__ import annotations

import hashlib
import os
import queue
import secrets
import shutil
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from minitc.autotune.interfaces import Builder, Runner
from minitc.autotune.worker import Worker, WorkerCrashed, WorkerTimeout, register_handler
from minitc.autotune.workload import Workload
from minitc.backends import lower_schedule
from minitc.backends.cuda.nvrtc import CACHE_ENV
from minitc.backends.llvm.aot import compile_object, load_object
from minitc.backends.llvm.runtime import get_num_threads, set_num_threads
from minitc.errors import MinitcError, ScheduleError
from minitc.schedule import Schedule, Trace
from minitc.target import is_gpu
from minitc.te_eval import evaluate


@dataclass(frozen=True)
class BuildResult:
    trace: str
    symbol: str | None = None
    object_code: bytes | None = None
    num_params: int = 0
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class MeasureResult:
    trace: str
    latencies_ms: tuple = ()
    error: str | None = None
    build_s: float = 0.0
    run_s: float = 0.0
    kernel_s: float = 0.0  # time spent inside the kernel itself (check + timed calls)

    @property
    def median_ms(self):
        return float(np.median(self.latencies_ms)) if self.latencies_ms and self.error is None else None


@dataclass
class Task:
    """What the workers need to build and check one workload: the output tensors (pickled with
    their expression graphs), the argument order, input arrays and the expected outputs."""

    outputs: list
    args: list  # tensors in kernel argument order: inputs then outputs
    inputs: list  # numpy arrays for the input arguments
    expected: list  # numpy arrays, one per output
    target: str = "llvm"
    rtol: float = 1e-3
    key: str = ""  # the workload key (workload.py)
    meta: dict = field(default_factory=dict)
    cold: tuple = ()  # indices of the inputs flushed from the caches before each timed call

    @staticmethod
    def from_outputs(outputs, target: str = "llvm", seed: int = 0) -> Task:
        """Random inputs (standard normal) and expected outputs from the numpy evaluator."""
        return Task.from_workload(Workload(outputs), target, seed)

    @staticmethod
    def from_workload(workload, target: str = "llvm", seed: int = 0) -> Task:
        """from_outputs for a Workload (workload.py) whose arguments and key are known."""
        args, n = workload.arguments, workload.num_inputs
        rng = np.random.default_rng(seed)
        inputs = [random_array(t, rng) for t in args[:n]]
        expected = evaluate(workload.outputs, dict(zip(args, inputs)))
        cold = tuple(k for k, t in enumerate(args[:n]) if getattr(t.op, "constant", False))
        return Task(workload.outputs, args, inputs, expected, target, key=workload.key, cold=cold)


def random_array(t, rng):
    """Random inputs for a placeholder `t`: standard normal floats, small integers."""
    if t.dtype.startswith("float"):
        return rng.standard_normal(t.shape).astype(t.dtype)
    return rng.integers(-8, 8, t.shape).astype(t.dtype)


# ---------------------------------------------------------------------------------------------
# building


# builders for other kinds of target: (accepts(target), build(outputs, args, target, trace));
# gpu_runner.py adds the GPU's, so that this module need not import it
TARGET_BUILDERS: list = []


def build_candidate(outputs, args, target: str, trace: str, key: str = "") -> BuildResult:
    """Replay a trace and compile it to object code (runs in a builder process)."""
    start = time.perf_counter()
    try:
        build = next((build for accepts, build in TARGET_BUILDERS if accepts(target)), None)
        if build is not None:
            return build(outputs, args, target, trace)
        if is_gpu(target):
            raise MinitcError(f"no builder for {target}: the GPU builder registers when gpu_runner is imported")
        s = Schedule(outputs).replay(Trace.from_json(trace))
        kernel = lower_schedule(s, args=args)
        # the runner caches loaded code by symbol: name it after workload, target and trace
        digest = hashlib.sha256("\n".join((key, target, trace)).encode()).hexdigest()[:20]
        symbol, obj = compile_object(kernel, target, name=f"cand_{digest}")
    except ScheduleError as e:
        return BuildResult(trace, error=f"schedule: {e}", seconds=time.perf_counter() - start)
    except MinitcError as e:
        return BuildResult(trace, error=f"build: {type(e).__name__}: {e}", seconds=time.perf_counter() - start)
    except Exception:  # a bug in minitc itself: keep tuning, but say so
        return BuildResult(
            trace, error=f"build: internal error: {traceback.format_exc(limit=3)}", seconds=time.perf_counter() - start
        )
    return BuildResult(trace, symbol, obj, len(kernel.params), None, time.perf_counter() - start)


class LocalBuilder(Builder):
    """Builds candidates in `workers` worker processes, overlapping with measurement."""

    def __init__(self, workers: int = 1, timeout: float = 60.0):
        self.timeout = timeout
        self.workers = max(1, workers)
        # the processes' shared cubins (GPU targets): made by the first that writes one
        self._cache = os.path.join(tempfile.gettempdir(), f"minitc-build-{secrets.token_hex(8)}")
        self._workers = [Worker({CACHE_ENV: self._cache}) for _ in range(self.workers)]
        self._threads = ThreadPoolExecutor(self.workers)
        self._idle = queue.Queue()
        for w in self._workers:
            self._idle.put(w)

    def start(self) -> None:
        """Start the worker processes now, so that their imports overlap the caller's work."""
        for w in self._workers:
            if w.proc is None:
                w.start()

    def build_one(self, task: Task, trace: str) -> list:
        """Build one candidate on whichever worker is free (thread-safe); returns [BuildResult]."""
        worker = self._idle.get()
        try:
            return self._build_on(worker, task, [trace])
        finally:
            self._idle.put(worker)

    def build(self, task: Task, traces: list) -> list:
        """Build candidates in parallel, each on whichever worker is free; results in order."""
        return [r for part in self._threads.map(lambda t: self.build_one(task, t), traces) for r in part]

    def _build_on(self, worker, task: Task, traces: list) -> list:
        out = []
        for trace in traces:
            try:
                out.append(
                    worker.call("build", task.outputs, task.args, task.target, trace, task.key, timeout=self.timeout)
                )
            except WorkerTimeout:
                out.append(BuildResult(trace, error=f"build: timed out after {self.timeout:.0f} s"))
            except MinitcError as e:
                out.append(BuildResult(trace, error=f"build: {e}"))
        return out

    def close(self) -> None:
        for w in self._workers:
            w.close()
        self._threads.shutdown(wait=False)
        shutil.rmtree(self._cache, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# running (these two functions run inside the runner process)

_RUNNER: dict = {}
COLD_SAMPLES_PER_REPEAT = 3  # single calls are noisier than the warm loops' averages


def runner_setup(inputs, expected, rtol, threads, cold=()) -> bool:

    set_num_threads(threads)
    _RUNNER.update(inputs=inputs, expected=expected, rtol=rtol, cold=[inputs[k] for k in cold])
    _RUNNER["atols"] = tolerances(expected, rtol)
    return True


def tolerances(expected, rtol: float) -> list:
    """Each expected output's absolute tolerance: `rtol` of its largest magnitude, or of 1."""
    return [rtol * max(float(np.max(np.abs(want))) if want.size else 1.0, 1.0) for want in expected]


def mismatch(outputs, expected, rtol: float, atols=None, xp=np) -> str | None:
    """Why a candidate's outputs are wrong, or None when all are close to the reference.
    `atols`: tolerances(expected, rtol), computed once per task; `xp`: the arrays' module
    (cupy compares on the GPU, without copying the outputs back)."""
    atols = atols if atols is not None else tolerances(expected, rtol)
    for got, want, atol in zip(outputs, expected, atols):
        wrong = int((~xp.isclose(got, want, rtol=rtol, atol=atol)).sum())
        if wrong:
            return f"wrong: {wrong} of {want.size} elements differ from the numpy reference"
    return None


def runner_run(symbol, obj, num_params, repeats, min_repeat_ms):
    """Load a candidate, check it against the expected outputs, then time it."""
    import ctypes

    inputs, expected, rtol = _RUNNER["inputs"], _RUNNER["expected"], _RUNNER["rtol"]
    try:
        address = load_object(symbol, obj)
    except MinitcError as e:
        return ("error", f"load: {e}")
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * num_params)(address)
    outs = [np.full(e.shape, np.nan, e.dtype) if e.dtype.kind == "f" else np.zeros(e.shape, e.dtype) for e in expected]
    ptrs = [a.ctypes.data for a in list(inputs) + outs]
    start = time.perf_counter()
    fn(*ptrs)
    once = time.perf_counter() - start
    wrong = mismatch(outs, expected, rtol, _RUNNER["atols"])
    if wrong:
        return ("error", wrong)
    cold = _RUNNER.get("cold")
    if cold:  # a model's weights: each sample is one call with them evicted from the caches
        from minitc.backends.llvm.cache_flush import flush_from_caches

        _busy(fn, ptrs, min_repeat_ms)  # single calls after an idle spell run slow: wake the cores first
        latencies = []
        for _ in range(COLD_SAMPLES_PER_REPEAT * repeats):
            flush_from_caches(cold)
            t = time.perf_counter()
            fn(*ptrs)
            latencies.append((time.perf_counter() - t) * 1e3)
        return ("ok", (tuple(latencies), once + sum(latencies) / 1e3))
    number = max(1, int(min_repeat_ms / 1e3 / max(once, 1e-7)))
    latencies = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(number):
            fn(*ptrs)
        latencies.append((time.perf_counter() - t) * 1e3 / number)
    return ("ok", (tuple(latencies), once + sum(latencies) * number / 1e3))


register_handler("build", build_candidate)
register_handler("setup", runner_setup)
register_handler("run", runner_run)


def _busy(fn, ptrs, ms: float) -> None:
    """Call the kernel for `ms` milliseconds (untimed): a shared VM's cores, idle while the
    tuner searched, run the first calls up to 2x slower."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        fn(*ptrs)


class LocalRunner(Runner):
    """Runs built candidates one at a time in a separate process. A candidate that crashes the
    process or runs past `timeout` seconds is recorded as an error and the process restarted."""

    CRASHES: tuple = (WorkerCrashed,)  # worker failures recorded as the candidate's error

    def __init__(
        self, timeout: float = 10.0, repeats: int = 5, min_repeat_ms: float = 20.0, threads: int | None = None
    ):
        self.timeout, self.repeats, self.min_repeat_ms = timeout, repeats, min_repeat_ms
        self.threads = threads
        self._worker = Worker()
        self._task = None

    def fresh(self, repeats: int) -> LocalRunner:
        """A new runner like this one, for the final re-measurement."""
        return LocalRunner(self.timeout, repeats, self.min_repeat_ms, self.threads)

    def _call(self, b: BuildResult):
        """Measure one built candidate in the worker: ("ok", (latencies, kernel s)) or ("error", why)."""
        return self._worker.call(
            "run", b.symbol, b.object_code, b.num_params, self.repeats, self.min_repeat_ms, timeout=self.timeout
        )

    def _setup_request(self, task: Task) -> tuple:
        threads = self.threads or get_num_threads()
        return ("setup", task.inputs, task.expected, task.rtol, threads, task.cold)

    def _setup(self, task: Task) -> None:
        self._worker.call(*self._setup_request(task), timeout=120)
        self._task = task

    def prepare(self, task: Task) -> None:
        """Start the measuring process and set it up for `task` while the caller goes on (the
        search's first proposals, the first builds); the first `run` waits for it."""
        self._worker.post(*self._setup_request(task))
        self._task = task

    def run(self, task: Task, built: list) -> list:
        results = []
        for b in built:
            if b.error is not None:
                results.append(MeasureResult(b.trace, error=b.error, build_s=b.seconds))
                continue
            start = time.perf_counter()
            try:
                if self._task is not task or self._worker.proc is None:
                    self._setup(task)
                status, value = self._call(b)
            except WorkerTimeout:
                status, value = "error", f"timeout: no result within {self.timeout:.1f} s"
                self._task = None
            except self.CRASHES as e:
                status, value = "error", f"crash: the kernel killed the measurement process: {e}"
                self._task = None
            run_s = time.perf_counter() - start
            if status == "ok":
                latencies, kernel_s = value
                results.append(MeasureResult(b.trace, latencies, None, b.seconds, run_s, kernel_s))
            else:
                results.append(MeasureResult(b.trace, error=value, build_s=b.seconds, run_s=run_s))
        return results

    def close(self) -> None:
        self._worker.close()
        self._task = None
