"""`python -m minitc.target [TARGET]`: the description templates derive their choices from.

python -m minitc.target                       # the host: what it is and what it measured
python -m minitc.target "llvm -mcpu=znver4"   # a named cpu, from the table
python -m minitc.target --json                # the same as JSON
python -m minitc.target --record host.json    # this machine's facts and calibration, in the
                                              # form tests/fixtures/hosts/ replays
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minitc.target import parse_target
from minitc.target.calibrate import calibration, measure
from minitc.target.cpu import _host
from minitc.target.host import CPUINFO, read_host_facts


def _kib(n: int) -> str:
    return f"{n // 1024**2} MiB" if n >= 1024**2 and n % 1024**2 == 0 else f"{n // 1024} KiB"


def summary(t) -> str:
    d, hw = t.describe(), t.hardware
    lines = [f"target {t.string} ({hw.source})"]
    lines.append(
        f"  vectors: {d['vector_bits']}-bit, {d['vector_registers']} registers; memory-bound kernels use "
        f"{d['preferred_vector_bits']}-bit; 512-bit FMAs {'full-rate' if d['full_rate_512'] else 'split or absent'}"
    )
    lines.append(
        f"  FMA: latency {hw.fma_latency:g} cycles, {hw.fma_per_cycle:g} per cycle -> {hw.fma_chains} accumulators; "
        f"loads {hw.loads_per_cycle:g}/cycle, broadcasts {hw.broadcasts_per_cycle:g}/cycle; clock {hw.ghz:g} GHz"
    )
    caches = ", ".join(
        f"L{c.level} {_kib(c.size)}"
        + (f" {c.ways}-way" if c.ways else "")
        + (f" shared by {c.shared_cpus}" if c.shared_cpus > 1 else "")
        for c in hw.caches
    )
    lines.append(f"  caches: {caches}")
    reads = ", ".join(f"{k} {v:g}" for k, v in hw.read_bytes_per_cycle.items())
    lines.append(f"  reads (bytes/cycle, one core): {reads}; memory {hw.memory_gbps:g} GB/s")
    if hw.load_latency_cycles:
        latency = ", ".join(f"{k} {v:g}" for k, v in hw.load_latency_cycles.items())
        lines.append(f"  load-to-use latency (cycles): {latency}")
    return "\n".join(lines)


def record() -> dict:
    """This machine as a fixture: its first /proc/cpuinfo block, sysfs caches, LLVM's name for
    it and its calibration."""
    host = _host()
    facts = read_host_facts()
    try:
        text = Path(CPUINFO).read_text().split("\n\n")[0]
    except OSError:
        text = ""
    return {
        "note": "recorded by python -m minitc.target --record",
        "cpuinfo": text,
        "caches": facts.to_dict()["caches"],
        "llvm_cpu": host["cpu"],
        "calibration": calibration(host["cpu"], host["features"], facts)
        or measure(host["cpu"], host["features"], facts),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minitc.target", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="llvm")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.add_argument("--record", metavar="FILE", help="write this machine's facts and calibration to FILE")
    args = parser.parse_args(argv)
    if args.record:
        Path(args.record).write_text(json.dumps(record(), indent=1) + "\n")
        print(f"wrote {args.record}")
        return
    t = parse_target(args.target)
    print(json.dumps(t.describe(), indent=1) if args.json else summary(t))


if __name__ == "__main__":
    main()
