"""The zoo's coverage table (docs/models.md): each small zoo model compiled with the templates,
checked against eager, its PyTorch fallbacks listed, and its speed against eager.

    python -m minitc.benchmarks.zoo_report [--threads 2,1] [--rounds 7] [--models zoo-llama,zoo-swin]

Timing alternates the two in one process: each round times eager, then minitc, each the median
of `calls` calls, and the speed is the median over rounds of eager's time over minitc's
(above 1: minitc is faster). Prints a markdown table and the CPU it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import numpy as np

MIN_CALL_S = 0.05  # calls per timing: enough to fill this much time, at least 5
WARMUP_S = 1.0  # calls of each before the rounds


def _median_call_s(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measure(name: str, threads: list, rounds: int) -> dict:
    """{model, fallbacks, error, rel_err, compile_s, timing: {threads: {eager_ms, minitc_ms, speed}}}."""
    import torch

    import minitc as tc
    from minitc.benchmarks.models_systems import compare, short
    from minitc.benchmarks.models_zoo import MODELS
    from minitc.benchmarks.timing import thread_limit
    from minitc.frontend import unsupported

    row = {"model": name, "fallbacks": {}, "error": None, "timing": {}}
    try:
        model, inputs = MODELS[name].make()
        with thread_limit(threads[0]), torch.no_grad():
            expected = model(*inputs).numpy()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled = tc.compile(model, inputs, db=False)
            row["compile_s"] = time.perf_counter() - start
            row["fallbacks"] = unsupported(compiled.graph)
            check, wrong = compare(compiled(*inputs), expected)
            row["rel_err"], row["error"] = check.get("rel_err"), wrong
        for n in threads:
            with thread_limit(n), torch.no_grad():
                row["timing"][n] = _alternate(lambda: model(*inputs), lambda: compiled(*inputs), rounds)
    except Exception as e:  # noqa: BLE001 - a model that fails is a row of the table
        row["error"] = short(e)
    return row


def _alternate(eager, mine, rounds: int) -> dict:
    """Eager, then minitc, `rounds` times; each the median of enough calls to fill MIN_CALL_S."""
    for fn in (eager, mine):  # warm up: eager's first calls at 2 threads here ran up to 1000x slower
        start = time.perf_counter()
        while time.perf_counter() - start < WARMUP_S:
            fn()
    once = max(_median_call_s(eager, 3), _median_call_s(mine, 3))
    calls = max(5, int(MIN_CALL_S / max(once, 1e-6)))
    e_ms, m_ms = [], []
    for _ in range(rounds):
        e_ms.append(1e3 * _median_call_s(eager, calls))
        m_ms.append(1e3 * _median_call_s(mine, calls))
    speed = float(np.median(np.array(e_ms) / np.array(m_ms)))
    return {"eager_ms": float(np.median(e_ms)), "minitc_ms": float(np.median(m_ms)), "speed": speed}


def table(rows: list, threads: list) -> str:
    timed = " | ".join(f"eager ms, {n}T | minitc ms, {n}T | speed, {n}T" for n in threads)
    lines = [
        f"| model | compiles | max rel. error | ops through PyTorch | {timed} |",
        "|---|---|---|---|" + "---|" * (3 * len(threads)),
    ]
    for r in rows:
        ops = ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in sorted(r["fallbacks"].items())) or "none"
        if "rel_err" not in r:
            lines.append(f"| {r['model']} | no: {r['error']} | | |" + " |" * (3 * len(threads)))
            continue
        err = f"{r['rel_err']:.1e}" + (f" ({r['error']})" if r["error"] else "")
        cells = []
        for n in threads:
            t = r["timing"].get(n)
            cells += [f"{t['eager_ms']:.3f}", f"{t['minitc_ms']:.3f}", f"{t['speed']:.2f}x"] if t else ["", "", ""]
        lines.append(f"| {r['model']} | yes | {err} | {ops} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from minitc.benchmarks.models_zoo import ZOO

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="2", help="comma-separated thread counts, each timed (default: 2)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: all)")
    args = p.parse_args(argv)
    threads = [int(n) for n in args.threads.split(",")]
    rows, load_before = [], os.getloadavg()[0]
    for name in args.models.split(","):
        rows.append(measure(name, threads, args.rounds))
        speeds = ", ".join(f"{n}T {t['speed']:.2f}x" for n, t in rows[-1]["timing"].items())
        print(f"# {name}: {speeds}, {rows[-1]['error'] or 'ok'}", flush=True)
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    when = time.strftime("%Y-%m-%d")
    print(f"\n{cpu_name()}, threads {args.threads}, {when}, medians of {args.rounds} rounds, {load}\n")
    print(table(rows, threads))


if __name__ == "__main__":
    main()
