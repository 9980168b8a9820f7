"""Timing, the one module everything that times a kernel uses (the benchmark suites, `tc.explain`,
a compiled model's `benchmark`, the experiments): on the CPU `measure` (warm-up, interleaved
repeats, median and spread) and `thread_limit` (thread control for all three libraries at
once); on the GPU `Timer` (CUDA events); and `alternate` (whole systems in turn, the zoo's
speed table).

    with thread_limit(2):
        timings = measure({"minitc": f1, "numpy": f2, "torch": f3}, repeats=10)
    timings["numpy"].median  # seconds per call

`measure` takes one sample of every implementation per round, rotating who goes first, so a
clock or load drift on this shared machine hits all of them alike. A sample times `number`
back-to-back calls, `number` chosen so that a sample lasts at least `min_sample_s`, and is
preceded by untimed calls until one runs at the speed seen during warm-up (`settle`): while
another library ran, this one's worker threads went to sleep, and on this 2-core VM a woken
worker is often placed on the CPU of the thread that waits for it, so the first few calls
after a pause (of torch's OpenMP pool, OpenBLAS or minitc's pool alike) can take 5-15 ms
longer. Timing steady state is what a back-to-back benchmark of one library sees. Slow calls
get fewer rounds (`budget_s` per implementation, but never fewer than `min_repeats`).

Interleaving has its own hazard: after a call, a library's idle workers keep spinning for a
while (OpenBLAS ~0.1 s, torch's OpenMP ~10 ms, minitc ~0.15 ms), and on two cores they steal
the CPU that the next implementation's second thread needs. So before each sample (and each
warm-up) `quiesce` waits until no other thread of this process is running.

A process of someone else's that keeps one of the two cores busy wrecks multi-threaded
timings (a library's spin barrier then waits for scheduler ticks: torch calls of 0.1 ms take
8 ms); `BackgroundLoad` measures that, and the report flags the rows it affected.

On the GPU (the GPU suites, gpu_core.py) `Timer` follows `triton.testing.do_bench`: each sample
flushes L2, then times one call between two CUDA events; the callables of a workload are sampled
interleaved, rotating who goes first each round.
"""

from __future__ import annotations

import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from minitc.backends.llvm.runtime import get_num_threads, set_num_threads

SETTLE_S = 0.25  # at most this long of untimed calls before a sample
SETTLE_CALLS = 50
SETTLE_SLACK = 1.3  # a call within 1.3x of the expected time counts as warm
QUIESCE_S = 0.5  # longest wait for other thread pools to stop spinning
QUIESCE_POLL_S = 0.0005
CALIBRATE_S = 0.03  # warm-up calls of at least this long set the expected time per call


# L2 flush per GPU sample. Zeroing it keeps the GPU busy (~0.7 ms on an H100) while Python
# enqueues the timed call; 512 MiB (0.17 ms) was shorter than enqueueing minitc's 4-launch
# softmax, so the start event fired early and the gap counted as kernel time.
FLUSH_MIB = 2048
MAX_GPU_SAMPLES = 1000
ALTERNATE_CALL_S = 0.05  # `alternate`: calls per turn enough to fill this much time, at least 5
ALTERNATE_WARMUP_S = 1.0  # `alternate`: calls of each system before the rounds


@dataclass
class Timing:
    """Samples per call, one per round: seconds (`measure`) or ms (`Timer.measure`, CUDA
    events). `number` calls were timed per sample; `host`: the ms Python took to enqueue each
    GPU sample."""

    samples: list
    number: int = 1
    host: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def best(self) -> float:
        return float(min(self.samples))

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.02 = 2 %)."""
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float((q3 - q1) / self.median) if self.median > 0 else 0.0


def _time_calls(fn, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def settle(
    fn, expected: float | None = None, min_s: float = 0.0, max_s: float = SETTLE_S, max_calls: int = SETTLE_CALLS
) -> list:
    """Untimed (for the results) calls until `fn` runs warm: until a call takes at most
    SETTLE_SLACK x `expected`, or, with no expectation, until two calls in a row agree within
    that factor after at least `min_s` seconds of calls; stops after `max_s` seconds or
    `max_calls` calls. Returns the call times."""
    times, start = [], time.perf_counter()
    while True:
        times.append(_time_calls(fn, 1))
        t, elapsed = times[-1], time.perf_counter() - start
        if expected is not None and t <= SETTLE_SLACK * expected:
            break
        if (
            expected is None
            and elapsed >= min_s
            and len(times) >= 2
            and max(t, times[-2]) <= SETTLE_SLACK * min(t, times[-2])
        ):
            break
        if len(times) >= max_calls or elapsed >= max_s:
            break
    return times


def _running_threads():
    """How many threads of this process, other than the calling one, are running (state R), or
    None where /proc/self/task cannot be read."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    running = 0
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                running += f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            pass  # the thread just exited
    return running


def quiesce(max_s: float = QUIESCE_S) -> float:
    """Wait until the other threads of this process (library thread pools spinning after their
    last job) are idle, at most `max_s`; returns the seconds waited."""
    start = time.perf_counter()
    while _running_threads() and time.perf_counter() - start < max_s:
        time.sleep(QUIESCE_POLL_S)
    return time.perf_counter() - start


def measure(
    fns: dict,
    repeats: int = 10,
    warmup: int = 0,
    min_sample_s: float = 0.01,
    budget_s: float = 2.0,
    min_repeats: int = 3,
) -> dict:
    """Interleaved timing of zero-argument callables; returns {name: Timing}.

    Each callable is warmed up (`warmup` plain calls, then `settle`: at least one call, more
    until two agree), and its fastest warm-up call sets `number` and its round count: `repeats`
    rounds, fewer when that would take more than `budget_s`, but at least
    `min(min_repeats, repeats)`. Calls longer than SETTLE_S are not re-warmed between rounds."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    plan = {}
    for name, fn in fns.items():
        quiesce()
        for _ in range(warmup):
            fn()
        once = max(min(settle(fn, min_s=CALIBRATE_S)), 1e-7)
        number = min(10_000, max(1, math.ceil(min_sample_s / once)))
        rounds = max(min(min_repeats, repeats), min(repeats, int(budget_s / (once * number))))
        plan[name] = (number, rounds, once)
    samples = {name: [] for name in fns}
    names, previous = list(fns), None
    for r in range(max(rounds for _, rounds, _ in plan.values())):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            number, rounds, once = plan[name]
            if r >= rounds:
                continue
            if name != previous:
                quiesce()
            previous = name
            if once < SETTLE_S:
                settle(fns[name], expected=once)
            samples[name].append(_time_calls(fns[name], number))
    return {name: Timing(samples[name], plan[name][0]) for name in fns}


def torch_module():
    """torch, or None when it is not installed (its column is then left empty)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


@contextmanager
def thread_limit(n: int):
    """Run minitc's pool, torch's intra-op pool and numpy's BLAS with `n` threads; restores
    the previous settings afterwards. BLAS is limited at run time with threadpoolctl."""
    from threadpoolctl import threadpool_limits

    torch = torch_module()
    before_tc = get_num_threads()
    before_torch = torch.get_num_threads() if torch else None
    set_num_threads(n)
    if torch:
        torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        set_num_threads(before_tc)
        if torch:
            torch.set_num_threads(before_torch)


class BackgroundLoad:
    """CPUs kept busy by *other* processes while the block ran (Linux /proc/stat minus this
    process's own CPU time), e.g. 0.9 = about one core taken by someone else: a sign that the
    timings of the block, especially multi-threaded ones, are unreliable. None elsewhere.

        with BackgroundLoad() as load: ...
        load.cpus
    """

    def __enter__(self):
        self.cpus = None
        self._start = (_busy_seconds(), _own_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        busy0, own0, t0 = self._start
        busy1, wall = _busy_seconds(), time.perf_counter() - t0
        if busy0 is not None and busy1 is not None and wall > 0:
            self.cpus = max(0.0, ((busy1 - busy0) - (_own_seconds() - own0)) / wall)
        return False


def _busy_seconds():
    """CPU seconds all CPUs spent not idle since boot (None without /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def wait_for_quiet(max_s: float, threshold: float = 0.25, window_s: float = 0.5) -> float | None:
    """Wait (at most `max_s`) until other processes use fewer than `threshold` CPUs over a
    `window_s` window; returns the last window's load (None without /proc/stat)."""
    start = time.perf_counter()
    while True:
        with BackgroundLoad() as load:
            time.sleep(window_s)
        if load.cpus is None or load.cpus < threshold or time.perf_counter() - start >= max_s:
            return load.cpus


# ---------------------------------------------------------------------------------------------
# the GPU


class Timer:
    """do_bench-style samples: flush L2, then one call between two CUDA events."""

    def __init__(self, torch, flush_mib: int | None = None, device: str = "cuda"):
        self.torch = torch
        self.cache = torch.empty((flush_mib or FLUSH_MIB) * 2**20 // 4, dtype=torch.int32, device=device)
        self.flush_ms = float(np.median(self._flush_times(5)))

    def _flush_times(self, n: int) -> list:
        ev = [(self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in ev:
            start.record()
            self.cache.zero_()
            end.record()
        self.torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in ev]

    def _sample(self, fn):
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        self.cache.zero_()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        return start, end, (time.perf_counter() - t0) * 1e3

    @staticmethod
    def _resolve(sample):
        start, end, host = sample
        return start.elapsed_time(end), host

    def estimate(self, fn, warmup_s: float = 0.025) -> float:
        """Warm `fn` up (at least 3 calls, until `warmup_s` has passed), then the median ms of
        3 samples."""
        start = time.perf_counter()
        for i in range(1000):
            fn()
            self.torch.cuda.synchronize()  # wall time, not enqueue time, decides when to stop
            if i >= 2 and time.perf_counter() - start >= warmup_s:
                break
        samples = [self._sample(fn) for _ in range(3)]
        self.torch.cuda.synchronize()
        return float(np.median([self._resolve(s)[0] for s in samples]))

    def measure(self, fns: dict, repeats: int = 100, budget_s: float = 2.0, min_repeats: int = 3) -> dict:
        """Interleaved samples of every callable: up to `repeats` each, fewer when that would
        take more than `budget_s` of GPU time, never fewer than `min_repeats`."""
        rounds = {}
        for name, fn in fns.items():
            est = self.estimate(fn)
            fit = int(budget_s * 1e3 / max(est + self.flush_ms, 1e-3))
            rounds[name] = max(min(min_repeats, repeats), min(repeats, fit, MAX_GPU_SAMPLES))
        out = {name: Timing([]) for name in fns}
        names = list(fns)
        for r in range(max(rounds.values(), default=0)):
            order = names[r % len(names) :] + names[: r % len(names)]
            pending = [(name, self._sample(fns[name])) for name in order if r < rounds[name]]
            self.torch.cuda.synchronize()
            for name, sample in pending:
                gpu_ms, host_ms = self._resolve(sample)
                out[name].samples.append(gpu_ms)
                out[name].host.append(host_ms)
        return out


# ---------------------------------------------------------------------------------------------
# whole systems in turn


def median_call_s(fn, calls: int) -> float:
    """The median seconds of `calls` calls of `fn`, each timed alone."""
    return float(np.median([_time_calls(fn, 1) for _ in range(calls)]))


def alternate(fns: dict, rounds: int) -> dict:
    """Each callable in turn, `rounds` times: {name: [ms, one per round]}, each the median of
    enough calls to fill ALTERNATE_CALL_S (at least 5), after ALTERNATE_WARMUP_S of warm-up
    calls of each (eager PyTorch's first calls at 2 threads ran up to 1000x slower)."""
    for fn in fns.values():
        start = time.perf_counter()
        while time.perf_counter() - start < ALTERNATE_WARMUP_S:
            fn()
    once = max(median_call_s(fn, 3) for fn in fns.values())
    calls = max(5, int(ALTERNATE_CALL_S / max(once, 1e-6)))
    ms = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            ms[name].append(1e3 * median_call_s(fn, calls))
    return ms
