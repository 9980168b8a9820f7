"""Hardware tokens: what the machine is (CPU, cores, SIMD width, caches) and what it measures
(peak FMA rate, STREAM-triad bandwidth). The measurement takes about a second and is cached
once per hardware fingerprint in the user's cache directory ($XDG_CACHE_HOME/minitc, else
~/.cache/minitc): the tokens of a machine must not change from run to run with the load."""
from __future__ import annotations

import json
from pathlib import Path

from .language import Hardware


def cache_dir() -> Path:
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minitc"


def _cache_kib(level: int) -> int:
    """Size of the data/unified cache of `level` seen by CPU 0, in KiB (0 if unknown)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) == level and (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip()
                return int(size[:-1]) * (1024 if size.endswith("M") else 1) if size[-1] in "KM" else int(size) // 1024
        except (OSError, ValueError):
            continue
    return 0


def two_digits(x: float) -> int:
    """Round to 2 significant digits: noise in a measured rate does not change the tokens."""
    if x <= 0:
        return 0
    scale = 10 ** max(len(str(int(x))) - 2, 0)
    return int(round(x / scale) * scale)


def _measure(threads: int) -> dict:
    """A quick version of the benchmark runner's machine measurement (benchmarks/machine.py)."""
    from benchmarks.machine import measure_fma, measure_triad
    from minitc import get_num_threads, set_num_threads

    before = get_num_threads()
    try:
        fma = measure_fma(threads, tasks=threads * 4, iters=500_000, repeats=3)
        triad = measure_triad(threads, repeats=3)
    finally:
        set_num_threads(before)
    return {"gflops": fma[0], "gbps": triad[0]}


def hardware(target="llvm", measured: dict | None = None) -> Hardware:
    """The Hardware of the host for `target` (an LLVM target string or Target)."""
    from backends.llvm.target import parse_target, simd_width
    from minitc.tune.tuner import hardware_fingerprint

    t = parse_target(target) if isinstance(target, str) else target
    if measured is None:
        cache = cache_dir() / f"machine-{hardware_fingerprint(t)}.json"
        try:
            measured = json.loads(cache.read_text())
        except (OSError, ValueError):
            measured = _measure(t.num_cores)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(measured))
    simd = simd_width(t, "float32")
    return Hardware("llvm", t.cpu, t.num_cores, simd, _cache_kib(1), _cache_kib(2), _cache_kib(3),
                    two_digits(measured["gflops"]), two_digits(measured["gbps"]))  # fmt: skip
