"""Dynamic shapes on BERT-base (issue 44): one compile for sequence lengths 16..512 against a
static compile per length, eager, and Inductor with dynamic=True, interleaved in one process.

    python experiments/dynamic_bert.py [--lengths 37,128,301] [--threads 2] [--inductor] [--json F]

Reports the compile seconds (the dynamic model's first bucket, then each bucket a length
needs; the static compiles), the relative error against eager, and the median ms per length.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import minitc as tc
from minitc.benchmarks.machine import cpu_name
from minitc.benchmarks.models_zoo import bert
from minitc.timing import measure, thread_limit


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="37,128,301")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--inductor", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    model, (ids, mask) = bert()
    seq = torch.export.Dim("seq", min=16, max=512)
    record = {"cpu": cpu_name(), "threads": args.threads, "model": "bert-base", "range": [16, 512], "rows": []}
    record.update(command="python " + " ".join(sys.argv), date=time.strftime("%Y-%m-%d"))
    with thread_limit(args.threads), torch.no_grad():
        dynamic, record["dynamic_compile_s"] = timed(
            lambda: tc.compile(model, (ids, mask), dynamic_shapes=(({1: seq}, {1: seq}),))
        )
        if args.inductor:
            inductor = torch.compile(model, dynamic=True)
        for n in lengths:
            x = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
            inputs = (x, torch.ones_like(x))
            expected = model(*inputs)
            got, bucket_s = timed(lambda: dynamic(*inputs))  # the first call of a bucket compiles it
            static, static_s = timed(lambda: tc.compile(model, inputs))
            systems = {"dynamic": lambda: dynamic(*inputs), "static": lambda: static(*inputs)}
            systems["eager"] = lambda: model(*inputs)
            row = {"length": n, "first_call_s": bucket_s, "static_compile_s": static_s}
            if args.inductor:
                _, row["inductor_first_call_s"] = timed(lambda: inductor(*inputs))
                systems["inductor"] = lambda: inductor(*inputs)
            row["relative_error"] = float((got - expected).abs().max() / expected.abs().max())
            timings = measure(systems, repeats=args.repeats)
            row["ms"] = {k: 1e3 * t.median for k, t in timings.items()}
            record["rows"].append(row)
            ratios = ", ".join(f"{k} {v:.1f} ms" for k, v in row["ms"].items())
            print(f"length {n}: {ratios}; dynamic/static {row['ms']['static'] / row['ms']['dynamic']:.2f}x", flush=True)
    record["buckets"] = [shape[0] for shape in dynamic.compiled_shapes]
    print(json.dumps(record, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
