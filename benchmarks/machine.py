"""Measure the machine the benchmarks run on: peak FMA rate, STREAM-triad bandwidth (the probe
kernels of minitc/backends/llvm/probe.py) and the parallel runtime's launch overhead.

    peak = measure_machine(threads=(1, 2))
    peak.fma_gflops[2], peak.triad_gbps[1], peak.launch_overhead_us[2]

Launch overhead: `minitc.backends.llvm.runtime.launch_overhead_us`, with empty tasks (what a
launch costs when the launcher can do the work itself) and as a full fork/join round trip.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from dataclasses import asdict, dataclass, field

from minitc.backends.llvm import runtime
from minitc.backends.llvm.probe import check_kernels, measure_fma, measure_triad, triad_arrays
from minitc.backends.llvm.runtime import get_num_threads, set_num_threads
from minitc.target import host_cpu_name
from minitc.target.host import read_host_facts
from minitc.timing import BackgroundLoad


@dataclass
class Machine:
    """What `measure_machine` found; keys of the dicts are thread counts."""

    cpu: str
    cpus: int
    llvm_cpu: str = ""  # the LLVM cpu name the host's code is built for (znver2, sapphirerapids, ...)
    fma_gflops: dict = field(default_factory=dict)  # best sample
    fma_gflops_median: dict = field(default_factory=dict)
    triad_gbps: dict = field(default_factory=dict)  # best sample
    triad_gbps_median: dict = field(default_factory=dict)
    launch_overhead_us: dict = field(default_factory=dict)  # empty tasks
    fork_join_us: dict = field(default_factory=dict)  # full round trip (EPCC style)
    seconds: float = 0.0
    background_cpus: float | None = None  # CPUs other processes used meanwhile

    def peak(self, kind: str, threads: int):
        """The peak a workload of `kind` ("compute"/"memory") is compared with, or None."""
        table = self.fma_gflops if kind == "compute" else self.triad_gbps
        return table.get(threads)

    def to_json(self) -> dict:
        """JSON form: the per-thread tables become lists of {"threads": n, ...} rows."""
        d = asdict(self)
        tables = (
            "fma_gflops",
            "fma_gflops_median",
            "triad_gbps",
            "triad_gbps_median",
            "launch_overhead_us",
            "fork_join_us",
        )
        rows = [{"threads": n, **{k: _round(d[k].get(n)) for k in tables}} for n in sorted(self.fma_gflops)]
        return {
            "cpu": self.cpu,
            "llvm_cpu": self.llvm_cpu,
            "cpus": self.cpus,
            "peaks": rows,
            "seconds": round(self.seconds, 2),
            "background_cpus": _round(self.background_cpus, 2),
        }


def _round(x, digits=3):
    return None if x is None else round(float(x), digits)


@functools.lru_cache(maxsize=None)
def host_cpu() -> dict:
    """The CPU this process runs on: its model name and the LLVM cpu name its target is built
    for (what the records call the host, whatever target the kernels were built for)."""
    return {"cpu": cpu_name(), "llvm_cpu": host_cpu_name()}


def cpu_name() -> str:
    """The CPU model (Linux /proc/cpuinfo, read once per process), else platform.processor()."""
    return read_host_facts().model_name or platform.processor() or platform.machine()


def measure_machine(threads=(1, 2), progress=None) -> Machine:
    """Peak FMA rate, triad bandwidth and launch overhead for each thread count."""
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    before = get_num_threads()
    check_kernels()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    m = Machine(cpu=cpu_name(), cpus=cpus, llvm_cpu=host_cpu_name())
    tasks = max(threads)
    arrays = triad_arrays()
    try:
        with BackgroundLoad() as load:
            for n in threads:
                say(f"machine: {n} thread(s): FMA peak")
                m.fma_gflops[n], m.fma_gflops_median[n] = measure_fma(n, tasks)
                say(f"machine: {n} thread(s): STREAM triad")
                m.triad_gbps[n], m.triad_gbps_median[n] = measure_triad(n, arrays)
                say(f"machine: {n} thread(s): launch overhead")
                set_num_threads(n)
                m.launch_overhead_us[n] = max(0.0, runtime.launch_overhead_us())
                m.fork_join_us[n] = max(0.0, runtime.launch_overhead_us(task_spin=200))
    finally:
        set_num_threads(before)
    m.background_cpus = load.cpus
    m.seconds = time.perf_counter() - start
    return m
