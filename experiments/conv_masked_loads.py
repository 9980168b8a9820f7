"""Masked loads of odd-lane vectors in the direct convolution, A/B on this host (issue 41).

    python experiments/conv_masked_loads.py [--target "llvm -num-cores=2"] [--rounds 3] [--json F]

Builds ResNet's 3x3 convolutions (NCHW, the template's defaults) twice in one process: with the
LLVM backend's masked load of a vector of 14 or 7 lanes (backends/llvm/vector.py,
`_one_masked_load`) and with the power-of-two pieces LLVM otherwise loads (the method patched to
answer no); checks both against each other and times them alternately, median of `--rounds`
rounds of seven batches each. Writes experiments/results/conv-masked-loads-<cpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

import minitc as tc
from minitc.backends.llvm.vector import MemoryEmitter
from minitc.target import parse_target
from minitc.templates import template_schedule

SHAPES = ((64, 56), (128, 28), (256, 14), (512, 7))  # (channels in = out, rows = columns)
RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results"


def _ms(f, args, out, batches=7, calls=50) -> float:
    f(*args, out=out)
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(*args, out=out)
        times.append((time.perf_counter() - t0) / calls)
    return float(np.median(times)) * 1e3


def compare(target, rounds: int) -> list:
    masked_load = MemoryEmitter._one_masked_load
    rows = []
    for c, hw in SHAPES:
        X, W = tc.placeholder((1, c, hw, hw), name="X"), tc.placeholder((c, c, 3, 3), name="W")
        out = tc.ops.conv2d(X, W, padding=1)
        built = {}
        try:
            for name, choice in (("pieces", lambda self, e: False), ("masked", masked_load)):
                MemoryEmitter._one_masked_load = choice
                built[name] = tc.build(template_schedule(out, target), target=target)
        finally:
            MemoryEmitter._one_masked_load = masked_load
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(s).astype("float32") for s in ((1, c, hw, hw), (c, c, 3, 3))]
        expected = built["pieces"](*args)
        np.testing.assert_allclose(built["masked"](*args), expected, rtol=1e-4, atol=1e-3)
        ms = {name: [] for name in built}
        for _ in range(rounds):
            for name, f in built.items():
                ms[name].append(_ms(f, args, np.empty_like(expected)))
        row = {
            "shape": f"{c}x{hw}x{hw} 3x3 -> {c}",
            **{f"{k}_ms": round(float(np.median(v)), 4) for k, v in ms.items()},
        }
        row["speedup"] = round(row["pieces_ms"] / row["masked_ms"], 3)
        print(row, flush=True)
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm -num-cores=2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    target = parse_target(args.target)
    rows = compare(target, args.rounds)
    path = Path(args.json or RESULTS / f"conv-masked-loads-{target.cpu}-{datetime.date.today():%Y%m%d}.json")
    command = " ".join(["python experiments/conv_masked_loads.py", *(sys.argv[1:] if argv is None else argv)])
    when = datetime.datetime.now().isoformat(timespec="seconds")
    record = {"target": target.string, "cpu": target.cpu, "date": when, "command": command, "rows": rows}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
