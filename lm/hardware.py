"""Hardware tokens: what the machine is (CPU, cores, SIMD width, caches) and what it measures
(peak FMA rate, STREAM-triad bandwidth). The measurement takes about a second and is cached
once per hardware fingerprint in the user's cache directory ($XDG_CACHE_HOME/minitc, else
~/.cache/minitc): the tokens of a machine must not change from run to run with the load.
They still differ between two machines of one kind, or one machine with a fresh cache: on this
2-core development machine the FMA peak measured 190-214 GFLOP/s idle and 100 with another
process on one core, the triad 24-44 GB/s as other tenants' traffic came and went. So
`same_machine` compares only what the machine is, not what it measured.

A GPU's tokens (`hardware cuda sm_90 sms 132 warp 32 smem 48 regs 64 threads 1024 gflops 0
gbps 0`) come from the CUDA target alone, without touching a GPU: its architecture, its limits
and the SM count it was queried with, else the architecture's usual part (an H100 for sm_90).
Its peak rates are only written when measurements are given; 0 means "not measured"."""

from __future__ import annotations

import json
from pathlib import Path

from minitc.backends.llvm.probe import measure_fma, measure_triad
from minitc.backends.llvm.runtime import get_num_threads, set_num_threads
from minitc.lm.language import GpuHardware, Hardware
from minitc.target import hardware_fingerprint, is_gpu, parse_cuda_target, parse_target, simd_width
from minitc.target.host import read_host_facts

# SM count of the usual data-center part of an architecture, for a target that was not queried
# from a device (0: the architecture has no single usual part).
ARCH_SMS = {
    "sm_60": 56,
    "sm_70": 80,
    "sm_75": 40,
    "sm_80": 108,
    "sm_90": 132,
    "sm_90a": 132,
    "sm_100": 148,
    "sm_100a": 148,
}
# 32-bit registers per thread block, in units of 1024 (64 K on every architecture since Maxwell
# but the Tegra ones: sm_53, sm_62 and sm_72 have 32 K).
ARCH_REGS_K = {"sm_53": 32, "sm_62": 32, "sm_72": 32}
WARP = 32


def is_gpu_line(line) -> bool:
    """Whether a hardware line (a string, Hardware or GpuHardware) describes a GPU."""
    return str(line).startswith("hardware cuda ")


def of_kind(entries: list, target) -> list:
    """The dataset entries measured on devices of `target`'s kind (CPUs for a CPU target): a
    CPU model learns nothing from GPU programs."""
    from minitc.target import is_gpu

    return [e for e in entries if is_gpu_line(e.hardware) == is_gpu(target)]


def cache_dir() -> Path:
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minitc"


def _cache_kib(level: int) -> int:
    """Size of the data/unified cache of `level` seen by CPU 0, in KiB (0 if unknown)."""
    cache = read_host_facts().cache(level)
    return cache.size // 1024 if cache else 0


def two_digits(x: float) -> int:
    """Round to 2 significant digits: noise in a measured rate does not change the tokens."""
    if x <= 0:
        return 0
    scale = 10 ** max(len(str(int(x))) - 2, 0)
    return int(round(x / scale) * scale)


def _measure(target) -> dict:
    """A quick version of the benchmark runner's machine measurement (the same probes), the
    FMA rate in `target`'s vectors where this host can run its code."""
    threads = target.num_cores
    runs_here = target if target.is_host_compatible else "llvm"  # else the host's own vectors
    before = get_num_threads()
    try:
        fma = measure_fma(threads, tasks=threads * 4, iters=500_000, repeats=3, target=runs_here)
        triad = measure_triad(threads, repeats=3)
    finally:
        set_num_threads(before)
    return {"gflops": fma[0], "gbps": triad[0]}


def gpu_hardware(target="cuda", measured: dict | None = None) -> GpuHardware:
    """The GpuHardware of a CUDA target (a CudaTarget, or a "cuda"/"cuda -arch=sm_XX"/"cuda-sim"
    string) from what the target says; no GPU is queried. `measured`: {"gflops": ..., "gbps": ...}
    of the device, else both are 0 (not measured). The simulator's line is that of the GPU it
    simulates, so it reads `hardware cuda ...` too."""
    t = parse_cuda_target(target)
    arch = t.arch
    sms = t.sm_count or ARCH_SMS.get(arch, 0)
    measured = measured or {}
    return GpuHardware(
        "cuda",
        arch,
        sms,
        WARP,
        t.limits.max_shared_bytes // 1024,
        ARCH_REGS_K.get(arch, 64),
        t.limits.max_threads_per_block,
        two_digits(measured.get("gflops", 0)),
        two_digits(measured.get("gbps", 0)),
    )


def hardware(target="llvm", measured: dict | None = None) -> Hardware | GpuHardware:
    """The Hardware of the host for `target` (an LLVM target string or Target), or the
    GpuHardware of a CUDA target (see gpu_hardware)."""
    if is_gpu(target):
        return gpu_hardware(target, measured)
    t = parse_target(target)
    if measured is None:
        cache = cache_dir() / f"machine-{hardware_fingerprint(t)}.json"
        try:
            measured = json.loads(cache.read_text())
        except (OSError, ValueError):
            measured = _measure(t)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(measured))
    simd = simd_width(t, "float32")
    return Hardware(
        "llvm",
        t.cpu,
        t.num_cores,
        simd,
        _cache_kib(1),
        _cache_kib(2),
        _cache_kib(3),
        two_digits(measured["gflops"]),
        two_digits(measured["gbps"]),
    )


def same_machine(line_a: str, line_b: str) -> bool:
    """Whether two hardware lines name the same kind of machine (target, CPU or GPU
    architecture, cores, SIMD width, caches), whatever their measured rates."""
    return str(line_a).split(" gflops ")[0] == str(line_b).split(" gflops ")[0]


def machine_fields(line: str) -> dict:
    """What a hardware line says the machine is, as {field: value}: its target and CPU (or GPU
    architecture) and each named quantity but the measured rates (`gflops`, `gbps`)."""
    words = str(line).split(" gflops ")[0].split()
    fields = {"target": words[1] if len(words) > 1 else "", "cpu": words[2] if len(words) > 2 else ""}
    fields.update(zip(words[3::2], words[4::2]))
    return fields


def differences(line_a: str, line_b: str) -> list:
    """The fields (machine_fields) in which two hardware lines differ, in line order."""
    a, b = machine_fields(line_a), machine_fields(line_b)
    return [name for name in {**a, **b} if a.get(name) != b.get(name)]


def closest_machine(lines, line: str) -> str:
    """Of hardware `lines` ({line: programs} or a list), the one that differs from `line` in
    the fewest fields; on a tie the one with the most programs."""
    counts = lines if isinstance(lines, dict) else dict.fromkeys(lines, 0)
    return min(counts, key=lambda other: (len(differences(other, line)), -counts[other]))


def trained_hardware(meta: dict, measured: bool = False) -> dict:
    """{hardware line: programs} a checkpoint learned from, over every stage of its meta and
    history: the machines whose measurements it was fine-tuned on (a stage's `hardware_lines`,
    else its `hardware`). A model never fine-tuned on measurements gives the line of the
    sentences it was pretrained on, unless `measured`."""
    stages = [meta] + [h for h in meta.get("history", []) if isinstance(h, dict)]
    found, pretrained = {}, {}
    for stage in stages:
        lines = stage.get("hardware_lines")
        if not isinstance(lines, dict):
            line = stage.get("hardware")
            programs = stage.get("demonstrations") or stage.get("learned_from") or stage.get("sentences") or 0
            lines = {line: programs} if isinstance(line, str) else {}
        into = pretrained if stage.get("stage") == "pretrain" else found
        for line, programs in lines.items():
            # each fine-tuning round counts the programs of the rounds before it again
            into[line] = max(into.get(line, 0), int(programs or 0))
    return found if found or measured else pretrained


class HardwareWarning(UserWarning):
    """The language model never learned from measurements of a machine like this one."""
