"""Tuning inside a model never makes it slower (issue 41): a model tuned into a fresh database,
then timed three ways, interleaved in one process:

    templates   tc.compile(model, x, db=False)
    all tuned   every task with a record runs the records' best program (what tc.compile did
                before it chose inside the model)
    chosen      tc.compile(model, x, db=DB): each task keeps the tuned program only where it is
                faster inside the model (minitc/frontend/choice.py)

    python experiments/model_choice.py --model bert-base --trials 200 [--json F]

Prints the per-task choices and the medians; pin the cores on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import torch

import minitc as tc
from minitc.autotune.tuner import tuned_schedule
from minitc.benchmarks.models_zoo import MODELS
from minitc.frontend.compiler import build_kernels
from minitc.frontend.device_runtime import make_plan


def all_tuned(compiled, db: str):
    """The plan of `compiled`'s graph with every task that has a record on its best program."""
    kernels = {node.name: fn for kind, node, fn in compiled.plan.steps if kind == "kernel"}
    tuned = []
    for task in compiled.tasks:
        best = tuned_schedule([task.outputs], compiled.target, db)
        if best is not None:
            task = type(task)(task.key, task.outputs, task.nodes, best.trace)
            tuned.append(task)
    kernels.update(build_kernels(tuned, compiled.target))
    return make_plan(compiled.graph, kernels, compiled.target), len(tuned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    model, inputs = MODELS[args.model].make()
    arrays = [t.numpy() for t in inputs]
    db = tempfile.mkdtemp() + "/records.db"
    start = time.perf_counter()
    with torch.no_grad():
        tc.compile(model, inputs, db=db, trials=args.trials, strategy="evolutionary")
        tuning_s = time.perf_counter() - start
        templates = tc.compile(model, inputs, db=False)
        chosen = tc.compile(model, inputs, db=db)
    forced, with_records = all_tuned(templates, db)
    plans = {"templates": templates.plan, "all tuned": forced, "chosen": chosen.plan}
    times = {k: [] for k in plans}
    for _ in range(args.rounds + 1):
        for name, plan in plans.items():
            t = time.perf_counter()
            plan.run(arrays)
            times[name].append(time.perf_counter() - t)
    ms = {k: 1e3 * float(np.median(v[1:])) for k, v in times.items()}
    print(f"{args.model}: {args.trials} trials in {tuning_s:.0f} s; {with_records} tasks have records")
    for c in chosen.choices:
        print(f"  kept {c.kept:8s}  template {c.template_ms:7.3f} ms, tuned {c.tuned_ms:7.3f} ms  {c.task[:70]}")
    print("  " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()))
    if args.json_path:
        host = tc.target.parse_target("llvm").describe()
        choices = [c.__dict__ for c in chosen.choices]
        record = {"model": args.model, "trials": args.trials, "tuning_s": tuning_s, "ms": ms, "choices": choices,
                  "host": host}  # fmt: skip
        with open(args.json_path, "w") as f:
            json.dump(record, f, indent=1, default=str)


if __name__ == "__main__":
    main()
