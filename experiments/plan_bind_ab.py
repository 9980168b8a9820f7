"""Same-process A/B of a model plan's kernel calls: called unchecked on the current arrays
(what a plan did after its first run until 2026-11-27) against bound to the constants' and
arena buffers' addresses (Plan._bind). Alternating rounds, median ms of each.

    python experiments/plan_bind_ab.py mobilenet_v2 resnet50 bert-base gpt2
"""

import sys
import time

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS
from minitc.frontend.runtime import one_torch_thread

ROUNDS = 15


def main(names):
    torch.set_num_threads(2)
    for name in names:
        model, inputs = MODELS[name].make()
        plan = tc.compile(model, inputs).plan
        arrays = [t.numpy() for t in inputs]
        for _ in range(3):
            plan.run(arrays)

        def unchecked():
            feeds = {v.name: a for v, a in zip(plan.graph.inputs, arrays)}
            with torch.inference_mode(), one_torch_thread(bool(plan.torch_nodes)):
                plan._execute(plan.steps, {**plan.graph.constants, **feeds}, None, checked=False)

        def bound():
            plan.run(arrays)

        calls = 40 if name == "mobilenet_v2" else 10
        medians = {unchecked: [], bound: []}
        for _ in range(ROUNDS):
            for run, acc in medians.items():
                times = []
                for _ in range(calls):
                    start = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - start)
                acc.append(1e3 * np.median(times))
        kernels = sum(1 for kind, _, _ in plan.steps if kind == "kernel")
        bound_steps = sum(1 for kind, _, _ in plan._bound if kind == "bound")
        print(
            f"{name}: kernels {kernels}, bound {bound_steps}; unchecked {np.median(medians[unchecked]):.3f} ms, "
            f"bound {np.median(medians[bound]):.3f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["mobilenet_v2", "resnet50", "bert-base", "gpt2"])
