"""Timing: warm-up, interleaved repeats, median and spread; and thread control for all three
libraries at once.

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
"""

from __future__ import annotations

import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import minitc as tc

SETTLE_S = 0.25  # at most this long of untimed calls before a sample
SETTLE_CALLS = 50
SETTLE_SLACK = 1.3  # a call within 1.3x of the expected time counts as warm
QUIESCE_S = 0.5  # longest wait for other thread pools to stop spinning
QUIESCE_POLL_S = 0.0005
CALIBRATE_S = 0.03  # warm-up calls of at least this long set the expected time per call


@dataclass
class Timing:
    """Samples in seconds per call (one per round); `number` calls were timed per sample."""

    samples: list
    number: int

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
    before_tc = tc.get_num_threads()
    before_torch = torch.get_num_threads() if torch else None
    tc.set_num_threads(n)
    if torch:
        torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        tc.set_num_threads(before_tc)
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
