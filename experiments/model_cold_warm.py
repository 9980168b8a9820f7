"""Each task of a compiled model timed in the model (after the steps before it, as a run
leaves the caches) and warm (called again at once, its weights and inputs in cache); the
difference is what the model's order costs each kernel, mostly weights coming from memory.

    python experiments/model_cold_warm.py resnet50
"""

import sys
import time

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS


def main(name: str, runs: int = 15, again: int = 7) -> None:
    torch.set_num_threads(2)
    model, inputs = MODELS[name].make()
    compiled = tc.compile(model, inputs)
    plan = compiled.plan
    arrays = [t.numpy() for t in inputs]
    for _ in range(3):
        plan.run(arrays)
    samples = []
    for _ in range(runs):
        times: dict = {}
        plan.run(arrays, times)
        samples.append(times)
    in_model = {name: np.median([s[name] for s in samples]) for name in samples[0]}
    values = {**plan.graph.constants, **{v.name: a for v, a in zip(plan.graph.inputs, arrays)}}
    warm = {}
    for kind, node, kernel in plan.steps:
        if kind == "view":
            values[node.name] = values[node.inputs[0]].reshape(node.shape)
        elif kind == "kernel":
            args = [values[i] for i in node.inputs]
            out = values[node.name] = plan._buffer(node) if node.name in plan.offsets else kernel(*args)
            kernel.run_unchecked([*args, out])
            times = []
            for _ in range(again):
                start = time.perf_counter()
                kernel.run_unchecked([*args, out])
                times.append(time.perf_counter() - start)
            warm[node.name] = np.median(times)
    task_of = {n: str(t) for t in compiled.tasks for n in t.nodes}
    rows: dict = {}
    for node, seconds in warm.items():
        row = rows.setdefault(task_of.get(node, node), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += in_model[node]
        row[2] += seconds
    total_in, total_warm = sum(in_model[n] for n in warm), sum(warm.values())
    print(f"{name}: kernels sum to {1e3 * total_in:.2f} ms in the model, {1e3 * total_warm:.2f} ms warm")
    print(" in model    warm  ratio  task")
    for task, (count, t_in, t_warm) in sorted(rows.items(), key=lambda r: -r[1][1]):
        print(f"{1e3 * t_in:8.3f} {1e3 * t_warm:7.3f} {t_in / t_warm:6.2f}  {task[:110]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "resnet50")
