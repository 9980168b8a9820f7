"""Same-process A/B of a model compiled with and without one graph pass (minitc/frontend/passes.py
PASSES): both plans checked against eager, then timed interleaved (minitc.timing.measure) at the
thread count given, and the per-task breakdown of each (CompiledModel.benchmark) by template.

    flock /tmp/minitc-cpu.lock python experiments/pass_ab.py swin-t roll_index_selects [--threads 2]
"""

import argparse
import collections
import warnings

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS
from minitc.frontend import passes, unsupported
from minitc.timing import measure, thread_limit


def compiled(model, inputs, without: str | None):
    keep = passes.PASSES
    if without:
        passes.PASSES = tuple(p for p in keep if p.__name__ != without)
    try:
        return tc.compile(model, inputs, db=False)
    finally:
        passes.PASSES = keep


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("without", help="the name of the pass left out in 'before'")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.without not in [p.__name__ for p in passes.PASSES]:
        parser.error(f"no pass {args.without!r}; passes: {', '.join(p.__name__ for p in passes.PASSES)}")
    warnings.simplefilter("ignore")
    model, inputs = MODELS[args.model].make()
    with torch.no_grad():
        ref = model(*inputs).numpy()
    models = {"before": compiled(model, inputs, args.without), "after": compiled(model, inputs, None)}
    with thread_limit(args.threads):
        for label, m in models.items():
            err = np.abs(m(*inputs).numpy() - ref).max() / np.abs(ref).max()
            print(f"{label}: rel err {err:.1e}, tasks {len(m.tasks)}, torch nodes {unsupported(m.graph)}")
        timings = measure({k: (lambda m=m: m(*inputs)) for k, m in models.items()}, repeats=args.repeats, budget_s=10)
        for label, t in timings.items():
            print(f"{label}: {t.median * 1e3:.2f} ms (spread {100 * t.spread:.1f}%)")
        for label, m in models.items():
            result = m.benchmark(repeats=10)
            by = collections.Counter()
            for name, ms in result["tasks_ms"].items():
                by[name.split()[0]] += ms
            by["torch nodes"] = result["torch_ms"]
            print(f"{label} by template (ms):", {k: round(v, 2) for k, v in by.most_common()})
    print(f"{args.model}, {args.threads} threads, host {tc.target.parse_target('llvm').describe()['cpu']}")


if __name__ == "__main__":
    main()
