"""Where a model's time goes, by kernel class, in minitc, PyTorch eager, Inductor and ONNX
Runtime side by side (issue 53 item 3): GEMMs, attention (batch matmuls, softmax, fused SDPA),
convolutions, depthwise convolutions, norms, elementwise chains, layout (permutes, window
partitions, rolls, copies, gathers), pools and reductions.

    flock /tmp/minitc-cpu.lock python experiments/kernel_classes.py swin-t --threads 2 \
        [--systems minitc,eager,inductor,onnxruntime] [--json FILE]

minitc: CompiledModel.benchmark's per-task medians (each task's kernels summed over its nodes),
a task's class from its template and, for the elementwise template, from its members' ops.
Peers: their profilers, self time per operator summed over 5 calls after 3 warm-up calls, then
divided by 5 (torch.profiler for eager and for Inductor with its kernels profiled; ONNX
Runtime's own profile). Profilers add their overhead to every operator, so compare classes
within a row, and classes across systems only where they are large.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import warnings

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.models_systems import export_onnx
from minitc.benchmarks.models_zoo import MODELS
from minitc.timing import thread_limit

CALLS = 5
LAYOUT_OPS = ("permute", "view", "slice", "expand", "copy", "concat", "cat", "roll", "pad", "gather", "index", "take")


def minitc_classes(compiled) -> dict:
    nodes = {n.name: n for n in compiled.graph.nodes}
    of_task = {str(t): t for t in compiled.tasks}
    result = compiled.benchmark(repeats=10)
    out = collections.Counter()
    for name, ms in result["tasks_ms"].items():
        task = of_task[name]
        ops = [b.op for n in task.nodes for b in (nodes[n].body or [nodes[n]])]
        out[_minitc_class(name.split()[0], ops)] += ms
    out["torch nodes"] += result["torch_ms"]
    out["total"] = result["total_ms"]
    return dict(out)


def _minitc_class(template: str, ops: list) -> str:
    if template in ("dense", "dense_epilogue", "gemv", "matmul"):
        return "gemm"
    if template in ("batch_matmul", "softmax"):
        return "attention"
    if template.startswith("depthwise"):
        return "depthwise conv"
    if template.startswith("conv") or "winograd" in template:
        return "conv"
    if template in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        return "norm"
    if "pool" in template:
        return "pool/reduce"
    if template == "reduce":
        return "norm" if any(op in ("mean", "pow", "rsqrt") for op in ops) else "pool/reduce"
    if all(any(k in op for k in LAYOUT_OPS) for op in ops):
        return "layout"
    return "elementwise"


def torch_classes(model, inputs, inductor: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    run = model
    if inductor:
        import torch._inductor.config as config

        torch._dynamo.reset()
        config.freezing = True
        config.cpp.enable_kernel_profile = True  # each generated kernel a profiler event
        run = torch.compile(model)
    with torch.no_grad():
        for _ in range(3):
            run(*inputs)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(CALLS):
                run(*inputs)
    out = collections.Counter()
    for e in prof.key_averages(group_by_input_shape=True):
        if e.self_cpu_time_total <= 0:
            continue
        out[_torch_class(e.key, e.input_shapes)] += e.self_cpu_time_total / 1e3 / CALLS
    out["total"] = sum(v for v in out.values())
    return dict(out)


def _torch_class(name: str, shapes) -> str:
    n = name.lower()
    if "conv" in n:
        weight = shapes[1] if shapes and len(shapes) > 1 else []
        return "depthwise conv" if len(weight) == 4 and weight[1] == 1 else "conv"
    if any(k in n for k in ("addmm", "linear", "aten::mm", "mkl", "gemm")) and "bmm" not in n:
        return "gemm"
    if any(k in n for k in ("bmm", "softmax", "scaled_dot_product", "attention", "baddbmm")):
        return "attention"
    if "norm" in n:
        return "norm"
    if any(k in n for k in ("pool", "aten::mean", "aten::sum", "amax")):
        return "pool/reduce"
    if any(k in n for k in ("copy", "clone", "cat", "roll", "index", "embedding", "gather", "contiguous", "pad")):
        return "layout"
    if n.startswith("cpp_fused") or n.startswith("aten::") or n.startswith("graph_"):
        return "elementwise"
    return "other"


def ort_classes(model, inputs, threads: int) -> dict:
    import onnxruntime as ort

    onnx_bytes, _ = export_onnx(model, inputs)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = dict(zip(names, (t.numpy() for t in inputs)))
    for _ in range(3 + CALLS):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    runs = collections.defaultdict(list)
    for e in events:
        runs[e["name"]].append(e)
    out = collections.Counter()
    for name, es in runs.items():
        kept = es[-CALLS:]  # the last CALLS runs: the warm-up's are left out
        args = kept[0].get("args", {})
        ms = sum(e["dur"] for e in kept) / 1e3 / CALLS
        out[_ort_class(args.get("op_name", ""), args.get("input_type_shape", []))] += ms
    out["total"] = sum(out.values())
    return dict(out)


ORT_LAYOUT = ("Transpose", "Reshape", "Concat", "Slice", "Gather", "Expand", "Tile", "Pad", "Split", "ReorderInput")
ORT_LAYOUT += ("ReorderOutput", "Squeeze", "Unsqueeze", "Identity", "Cast", "Shape", "GatherElements", "ScatterND")


def _ort_class(op: str, shapes: list) -> str:
    dims = [len(next(iter(s.values()))) for s in shapes if s]
    if op in ("MatMul", "FusedMatMul", "Gemm", "MatMulNBits"):
        # attention's products multiply two activations of the same rank >= 3; a layer's weight is 2-D
        return "attention" if len(dims) >= 2 and dims[0] == dims[1] >= 3 else "gemm"
    if op in ("Softmax", "Attention", "MultiHeadAttention", "GroupQueryAttention"):
        return "attention"
    if op in ("Conv", "FusedConv", "NchwcConv"):
        weight = next(iter(shapes[1].values())) if len(shapes) > 1 else []
        return "depthwise conv" if len(weight) == 4 and weight[1] == 1 else "conv"
    if "Norm" in op:
        return "norm"
    if "Pool" in op or op.startswith("Reduce"):
        return "pool/reduce"
    if op in ORT_LAYOUT:
        return "layout"
    return "elementwise"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--systems", default="minitc,eager,inductor,onnxruntime")
    parser.add_argument("--json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    model, inputs = MODELS[args.model].make()
    rows = {}
    with thread_limit(args.threads):
        for system in args.systems.split(","):
            if system == "minitc":
                rows[system] = minitc_classes(tc.compile(model, inputs, db=False))
            elif system in ("eager", "inductor"):
                rows[system] = torch_classes(model, inputs, inductor=system == "inductor")
            elif system == "onnxruntime":
                rows[system] = ort_classes(model, inputs, args.threads)
            print(system, {k: round(v, 2) for k, v in sorted(rows[system].items(), key=lambda kv: -kv[1])}, flush=True)
    classes = sorted({c for r in rows.values() for c in r if c != "total"})
    classes.sort(key=lambda c: -max(r.get(c, 0) for r in rows.values()))
    print(f"{args.model} ({args.threads} threads), ms per call by class:")
    print(f"{'class':16}" + "".join(f"{s:>13}" for s in rows))
    for c in [*classes, "total"]:
        print(f"{c:16}" + "".join(f"{r.get(c, 0.0):13.2f}" for r in rows.values()))
    if args.json:
        record = {"model": args.model, "threads": args.threads, "host": tc.target.parse_target("llvm").describe()}
        with open(args.json, "w") as f:
            json.dump({**record, "ms_by_class": rows}, f, indent=1, default=float)


if __name__ == "__main__":
    np.set_printoptions(precision=2)
    main()
