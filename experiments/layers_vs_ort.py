"""A CNN's layers in minitc beside ONNX Runtime's, both at THREADS threads in one process:
ONNX Runtime's own profile (median per node over ROUNDS runs) and minitc's per-node medians
(Plan.run's), matched by node name (both name a blocked node after the same exported one).
Profiling adds overhead to each ONNX Runtime node; the whole-model medians are printed too.

    python experiments/layers_vs_ort.py resnet50 [THREADS] [ROUNDS]
"""

import collections
import json
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch

import minitc as tc
from minitc.benchmarks.models_systems import export_onnx
from minitc.benchmarks.models_zoo import MODELS


def ort_profile(onnx_bytes, arrays, threads, rounds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(sess.get_inputs(), arrays)}
    for _ in range(5):
        sess.run(None, feed)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    events = json.load(open(sess.end_profiling()))
    per = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1e3)
    # the warm-up runs are profiled too: the last `rounds` of each node
    return 1e3 * np.median(times), {n: float(np.median(v[-rounds:])) for n, v in per.items()}


def main(name, threads=2, rounds=30):
    torch.set_num_threads(threads)
    tc.set_num_threads(threads)
    model, inputs = MODELS[name].make()
    arrays = [t.numpy() for t in inputs]
    onnx_bytes, _ = export_onnx(model, inputs)
    plan = tc.compile(model, inputs).plan
    for _ in range(5):
        plan.run(arrays)
    runs, nodes = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        plan.run(arrays)
        runs.append(time.perf_counter() - start)
        per_node: dict = {}
        plan.run(arrays, per_node)
        nodes.append(per_node)
    mine = {n: 1e3 * float(np.median([r[n] for r in nodes])) for n in nodes[0]}
    ort_ms, theirs = ort_profile(onnx_bytes, arrays, threads, rounds)
    print(
        f"{name}: minitc {1e3 * np.median(runs):.2f} ms (nodes {sum(mine.values()):.2f}); "
        f"ONNX Runtime {ort_ms:.2f} ms (profiled nodes {sum(theirs.values()):.2f})"
    )
    shapes = {n.name: n.shape for n in plan.graph.nodes}
    common = [n for n in mine if n in theirs]
    print(
        f"matched {len(common)} nodes: minitc {sum(mine[n] for n in common):.2f} ms, "
        f"ORT {sum(theirs[n] for n in common):.2f} ms"
    )
    print("  minitc     ORT   diff  node")
    for n in sorted(common, key=lambda n: theirs[n] - mine[n]):
        print(f"  {mine[n]:6.3f} {theirs[n]:6.3f} {mine[n] - theirs[n]:+6.3f}  {n} {shapes.get(n)}")
    print("unmatched minitc:", {n: round(v, 3) for n, v in mine.items() if n not in theirs and v > 0.02})
    print("unmatched ORT:", {n: round(v, 3) for n, v in theirs.items() if n not in mine and v > 0.02})


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
