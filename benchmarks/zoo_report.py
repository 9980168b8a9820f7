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
import time
import warnings

import numpy as np


def measure(name: str, threads: list, rounds: int, inductor: bool = False) -> dict:
    """{model, fallbacks, error, rel_err, compile_s, timing: {threads: {eager_ms, minitc_ms, speed}}}
    (with `inductor`, also inductor_ms and vs_inductor: Inductor's time over minitc's)."""
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
                fns = {"eager": lambda: model(*inputs), "minitc": lambda: compiled(*inputs)}
                if inductor:  # compiled at this thread count, by its first call
                    from minitc.benchmarks.models_systems import setup_inductor

                    system = setup_inductor(model, inputs)
                    if system.error is None:
                        fns["inductor"] = system.fn
                row["timing"][n] = speeds(fns, rounds)
    except Exception as e:  # noqa: BLE001 - a model that fails is a row of the table
        row["error"] = short(e)
    return row


def speeds(fns: dict, rounds: int) -> dict:
    """The systems timed in turn (timing.alternate): {name_ms: median, speed: eager over minitc,
    vs_inductor: Inductor over minitc}, each ratio the median over rounds."""
    from minitc.benchmarks.timing import alternate

    ms = alternate(fns, rounds)
    mine = np.array(ms["minitc"])
    out = {f"{name}_ms": float(np.median(v)) for name, v in ms.items()}
    out["speed"] = float(np.median(np.array(ms["eager"]) / mine))
    if "inductor" in ms:
        out["vs_inductor"] = float(np.median(np.array(ms["inductor"]) / mine))
    return out


def main(argv=None) -> None:
    from minitc.benchmarks.machine import cpu_name
    from minitc.benchmarks.models_zoo import ZOO
    from minitc.benchmarks.report import zoo_table

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="2", help="comma-separated thread counts, each timed (default: 2)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: all)")
    p.add_argument("--inductor", action="store_true", help="time torch.compile (Inductor, freezing) too")
    args = p.parse_args(argv)
    threads = [int(n) for n in args.threads.split(",")]
    rows, load_before = [], os.getloadavg()[0]
    for name in args.models.split(","):
        rows.append(measure(name, threads, args.rounds, args.inductor))
        text = ", ".join(
            f"{n}T {t['speed']:.2f}x eager" + (f", {t['vs_inductor']:.2f}x Inductor" if "vs_inductor" in t else "")
            for n, t in rows[-1]["timing"].items()
        )
        print(f"# {name}: {text}, {rows[-1]['error'] or 'ok'}", flush=True)
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    when = time.strftime("%Y-%m-%d")
    print(f"\n{cpu_name()}, threads {args.threads}, {when}, medians of {args.rounds} rounds, {load}\n")
    print(zoo_table(rows, threads, args.inductor))


if __name__ == "__main__":
    main()
