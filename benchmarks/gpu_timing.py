"""GPU timing for the GPU suites (benchmarks/gpu_core.py), `triton.testing.do_bench`'s method:
each sample flushes L2, then times one call between two CUDA events; the callables of a
workload are sampled interleaved, rotating who goes first each round."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

# L2 flush per sample. Zeroing it keeps the GPU busy (~0.7 ms on an H100) while Python enqueues
# the timed call; 512 MiB (0.17 ms) was shorter than enqueueing minitc's 4-launch softmax, so
# the start event fired early and the gap counted as kernel time.
FLUSH_MIB = 2048
MAX_SAMPLES = 1000


@dataclass
class GpuTiming:
    samples: list  # ms per call, one per round
    host: list  # ms Python took to enqueue each call

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def spread(self) -> float:
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float((q3 - q1) / self.median) if self.median > 0 else 0.0


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
            rounds[name] = max(min(min_repeats, repeats), min(repeats, fit, MAX_SAMPLES))
        out = {name: GpuTiming([], []) for name in fns}
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
