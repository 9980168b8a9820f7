"""One parameter at a time around the GEMM template's analytical point, on the host (issue 41).

    python experiments/gemm_sweep.py [--workloads matmul-1024,dense-bert-ffn,bmm-bert] [--json F]

For each workload of the cpu-core suite: the template's default program, then every value of
every template parameter in the design space (minitc/autotune/space.py: the fixed candidates and
the ones the hardware description derives) with the others at their defaults, each built,
checked against numpy and timed interleaved with the default and torch (medians of rounds).
Prints GFLOP/s and the ratio to the default, best first, so a new CPU shows at once where the
model and a measurement disagree. Pin the cores first (taskset -c 0,1) on a shared machine.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import minitc as tc
from minitc.autotune.space import Space
from minitc.benchmarks.suites import SUITES
from minitc.target import parse_target
from minitc.timing import measure

SWEPT = ("mr", "nr", "nc", "ku", "kc", "mc", "pack_a", "pack_b", "parallel")


def variants(space: Space) -> list:
    """(label, decision values): the default, then each swept parameter at each other value."""
    default = space.default_values()
    decisions = space.replay(default).decisions
    out = [("default", default)]
    for n, d in enumerate(decisions):
        name = d.name.split(".")[-1]
        if name not in SWEPT:
            continue
        for value in d.domain:
            if value != d.value:
                out.append((f"{name}={value}", default[:n] + [value] + default[n + 1 :]))
    return out


def timed(fns: dict, rounds: int) -> dict:
    """Median seconds per call of each function, interleaved round by round (minitc.timing)."""
    return {k: t.median for k, t in measure(fns, repeats=rounds).items()}


def sweep(workload, rounds: int) -> list:
    import torch

    out = workload.make_minitc()
    space = Space([out], parse_target("llvm"))
    arrays = workload.make_inputs(np.random.default_rng(0))
    expected = workload.make_numpy()(*arrays)
    fns = {}
    for label, values in variants(space):
        try:
            f = tc.build(space.replay(values).schedule)
            got = f(*arrays)
        except tc.MinitcError as e:
            print(f"  {label}: {e}")
            continue
        if not np.allclose(got, expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max())):
            print(f"  {label}: WRONG RESULT")
            continue
        fns[label] = lambda f=f: f(*arrays)
    tensors = [torch.from_numpy(a) for a in arrays]
    reference = workload.make_torch()
    fns["torch"] = lambda: reference(*tensors)
    seconds = timed(fns, rounds)
    rows = [
        {"variant": k, "ms": 1e3 * s, "gflops": workload.work / s / 1e9, "vs_default": seconds["default"] / s}
        for k, s in seconds.items()
    ]
    return sorted(rows, key=lambda r: r["ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="matmul-1024,dense-bert-ffn,bmm-bert")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    by_name = {w.name: w for w in SUITES["cpu-core"]}
    results = {"host": parse_target("llvm").describe(), "threads": tc.get_num_threads(), "workloads": {}}
    for name in args.workloads.split(","):
        rows = sweep(by_name[name], args.rounds)
        results["workloads"][name] = rows
        print(f"{name} ({tc.get_num_threads()} threads):")
        for r in rows[:12] + [r for r in rows[12:] if r["variant"] in ("default", "torch")]:
            print(f"  {r['variant']:<22} {r['ms']:8.3f} ms {r['gflops']:7.1f} GFLOP/s  {r['vs_default']:5.2f}x default")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
