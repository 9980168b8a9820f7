"""`python -m minitc.benchmarks --suite runner-scaling`: candidate programs measured per second
by the local runner and by a Ray cluster of 1 and 2 nodes on this machine, and the time Ray adds
per candidate (docs/distributed.md).

The same programs (BERT-base's QKV dense layer, 128x768x768: the hand template, then random
programs of its design space) are built and measured in batches of 16, as the tuner does, by

- local: LocalBuilder (2 worker processes) and LocalRunner, what `tc.tune` uses;
- ray-1, ray-2: a RayRunner on a `ray.cluster_utils.Cluster` on 127.0.0.1 (a head, then a
  second node), each node given one CPU; each node builds and measures its share.

Kernels run one thread (target `llvm -num-cores=1`), so two nodes on this machine do not fight
over its cores. Each configuration runs `ROUNDS` times after a warm-up batch; the table gives
medians. Ray's cost per candidate is the 1-node run's wall time less the time its actor spent
building and measuring, per program. A short tuning run (`tc.tune`, the default strategy) gives
the driver's own time per trial (search, cost model, records), which no cluster divides.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np

import minitc as tc
from minitc.autotune.ray_nodes import import_ray
from minitc.autotune.ray_runner import RayRunner
from minitc.autotune.runner import LocalBuilder, LocalRunner, Task
from minitc.autotune.search import RandomSearch
from minitc.autotune.space import Space
from minitc.benchmarks.machine import cpu_name

TARGET = "llvm -num-cores=1"
PROGRAMS, ROUNDS, BATCH, WARM = 24, 3, 16, 4


def workload():
    X = tc.placeholder((128, 768), "float32", name="X")
    W = tc.placeholder((768, 768), "float32", name="W")
    b = tc.placeholder((768,), "float32", name="b")
    return tc.ops.dense(X, W, b)


def programs(out, n: int, seed: int = 0) -> list:
    """The template's trace, then random programs: n + WARM traces (the last WARM warm up)."""
    space = Space(out, TARGET)
    search = RandomSearch(space, np.random.default_rng(seed))
    return [space.replay(space.default_values()).trace] + [
        c.trace for c in search.random_candidates(n + WARM - 1, set())
    ]


def measure(builder, runner, task, traces: list) -> tuple:
    """(wall seconds, errors) to build and measure `traces` in batches."""
    start, errors = time.perf_counter(), 0
    for i in range(0, len(traces), BATCH):
        chunk = traces[i : i + BATCH]
        errors += sum(r.error is not None for r in runner.run(task, builder.build(task, chunk)))
    return time.perf_counter() - start, errors


def rounds(name: str, nodes: int, builder, runner, task, traces: list, warm: list, say) -> dict:
    measure(builder, runner, task, warm)  # worker processes and actors start here
    walls, node_s = [], []
    for r in range(ROUNDS):
        before = getattr(runner, "stats", {}).get("node_s", 0.0)
        wall, errors = measure(builder, runner, task, traces)
        walls.append(wall)
        node_s.append(getattr(runner, "stats", {}).get("node_s", 0.0) - before)
        say(f"{name}: round {r + 1}/{ROUNDS}: {len(traces)} programs in {wall:.1f} s, {errors} errors")
    wall = statistics.median(walls)
    row = {"config": name, "nodes": nodes, "programs": len(traces), "walls_s": walls, "median_s": wall}
    row["programs_per_s"] = len(traces) / wall
    if nodes:
        in_node = statistics.median(node_s) / len(traces)
        row["node_s_per_program"] = in_node
        # what the cluster costs besides building and measuring, per program and node
        row["ray_ms_per_program"] = 1e3 * (wall * nodes / len(traces) - in_node)
    return row


def driver_s_per_trial(out, say) -> float:
    """Seconds per trial the driver spends searching, ranking and recording (16 trials)."""
    with tempfile.TemporaryDirectory() as d:
        r = tc.tune(out, trials=16, target=TARGET, db=os.path.join(d, "r.db"))
    spent = sum(r.phases.get(p, 0.0) for p in ("search", "model", "record"))
    say(f"driver: {spent:.1f} s of search, cost model and records for {r.trials} trials")
    return spent / max(r.trials, 1)


def run(n: int, say) -> dict:
    from ray.cluster_utils import Cluster

    out = workload()
    traces = programs(out, n)
    task, warm = Task.from_outputs(out, TARGET), traces[n:]
    traces = traces[:n]
    rows = []
    builder, runner = LocalBuilder(workers=2), LocalRunner(threads=1)
    try:
        rows.append(rounds("local", 0, builder, runner, task, traces, warm, say))
    finally:
        builder.close()
        runner.close()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for nodes in (1, 2):
            if nodes == 2:
                cluster.add_node(num_cpus=1)
                cluster.wait_for_nodes()
            with RayRunner(cluster.address, threads=1) as ray_runner:
                rows.append(rounds(f"ray-{nodes}", nodes, ray_runner, ray_runner, task, traces, warm, say))
    finally:
        import_ray().shutdown()
        cluster.shutdown()
    return {
        "workload": "dense 128x768x768 (BERT-base QKV)",
        "target": TARGET,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "rows": rows,
        "driver_s_per_trial": driver_s_per_trial(out, say),
    }
