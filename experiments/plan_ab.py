"""Timing two or more compiled plans of one model in one process, for the A/B scripts
(conv1x1_ab.py, winograd_ab.py): each plan's error against eager, then rounds of whole-model
calls with the plans' order alternating from round to round (timed second in a round, the same
plan ran 0.2-0.5 ms faster on ResNet-50, Intel Xeon), then each node's median time per plan."""

import time

import numpy as np


def compare_plans(plans: dict, arrays: list, ref, rounds: int, calls: int = 10) -> dict:
    """Print each plan's max error against `ref` and its median model time over `rounds`;
    return {label: {node name: median ms}} (Plan.run's per-node times, one run per round)."""
    for label, plan in plans.items():
        out = plan.run(arrays)[0]
        print(f"{label}: max abs error {np.abs(out - ref).max():.2e} (output max {np.abs(ref).max():.2f})")
    medians: dict = {label: [] for label in plans}
    nodes: dict = {label: [] for label in plans}
    for r in range(rounds):
        for label, plan in list(plans.items())[:: 1 if r % 2 else -1]:
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                plan.run(arrays)
                times.append(time.perf_counter() - start)
            medians[label].append(1e3 * np.median(times))
            per_node: dict = {}
            plan.run(arrays, per_node)
            nodes[label].append(per_node)
    for label in plans:
        print(f"{label}: {np.median(medians[label]):.3f} ms (rounds {', '.join(f'{m:.2f}' for m in medians[label])})")
    return {label: {n: 1e3 * np.median([r[n] for r in runs]) for n in runs[0]} for label, runs in nodes.items()}
