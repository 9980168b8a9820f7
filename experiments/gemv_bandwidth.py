"""Decode-step dense layers (issue 44, item 3): how fast the matrix-vector templates stream the
weights, against the STREAM triad of the machine and torch.nn.functional.linear.

    python experiments/gemv_bandwidth.py [--threads 2] [--rows 1,2,4,8] [--json F]

For GPT-2's four dense layers and a LLaMA-style decoder's projections (TinyLlama-1.1B: hidden
2048, 4 key/value heads of 64, MLP 5632), each with its epilogue (bias, GELU, a residual add),
at M = 1, 2, 4 and 8 rows, interleaved in one process:

    minitc          tc.build of the dense: the template `template_tag` picks (gemv for M <= 8),
                    on the weight as the model compiler stores it (packed [N/B, K, B], B = lanes)
    minitc [N,K]    the same on torch's [N, K] weight (tc.ops.dense called directly: gemv_dot)
    gemm            the GEMM template (the dense's own tag) with its defaults, on the packed
                    weight: what the model compiler ran before gemv
    torch           F.linear on the [N, K] weight, then the epilogue, like eager PyTorch

Each call reads another copy of the weight, enough copies for six times the L3, so every
call streams its weight from memory as a decode step does. GB/s is weight bytes per second;
`triad_gbps` is the STREAM triad with the same threads (backends/llvm/probe.py's kernel),
timed in the same rounds as the shape's kernels (this VM's bandwidth drifts by 2x over
minutes). Every kernel is checked against numpy first. Shapes are retried (up to
three times) when another process kept a CPU busy during their timing; pin the cores on a
shared machine.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics

import numpy as np
import torch
import torch.nn.functional as F

import minitc as tc
from minitc.backends.llvm.jit import compile_kernel
from minitc.backends.llvm.probe import TRIAD_ELEMS, triad_arrays, triad_kernel
from minitc.benchmarks.provenance import run_stamp
from minitc.ops import reference
from minitc.target import parse_target
from minitc.templates import TEMPLATES, template_schedule, template_tag
from minitc.timing import BackgroundLoad, measure, thread_limit, wait_for_quiet

# (model, layer, K, N, epilogue): epilogue "bias", "bias_gelu", "bias_residual", "none" or "residual"
LAYERS = [
    ("gpt2", "attn.c_attn", 768, 2304, "bias"),
    ("gpt2", "attn.c_proj", 768, 768, "bias_residual"),
    ("gpt2", "mlp.c_fc", 768, 3072, "bias_gelu"),
    ("gpt2", "mlp.c_proj", 3072, 768, "bias_residual"),
    ("llama", "q_proj", 2048, 2048, "none"),
    ("llama", "k_proj", 2048, 256, "none"),
    ("llama", "gate_proj", 2048, 5632, "none"),
    ("llama", "down_proj", 5632, 2048, "residual"),
]
COPIES_OF_L3 = 6  # weight copies per layout: this many times the L3, so no call finds its weight cached
MAX_LOAD = 0.3  # CPUs taken by other processes above which a shape is timed again
TRIES = 3


def dense(M: int, N: int, K: int, epilogue: str, layout: str, lanes: int):
    """(output tensor, inputs) of the dense layer with its epilogue; layout "packed" or "nk"."""
    X = tc.placeholder((M, K), "float32", name="X")
    if layout == "packed":
        W = tc.placeholder((-(-N // lanes), K, lanes), "float32", name="W")
        kw = {"weight_block": lanes, "out_features": N if N % lanes else None}
    else:
        W = tc.placeholder((N, K), "float32", name="W")
        kw = {}
    b = tc.placeholder((N,), "float32", name="b") if "bias" in epilogue else None
    Y = tc.ops.dense(X, W, b, activation="gelu" if "gelu" in epilogue else None, **kw)
    ins = [X, W] + ([b] if b is not None else [])
    if "residual" in epilogue:  # as the model compiler fuses it: one stage tagged for the dense's template
        R = tc.placeholder((M, N), "float32", name="R")
        Y = tc.compute((M, N), lambda i, j: Y[i, j] + R[i, j], name="epilogue", tag="dense_epilogue")
        ins.append(R)
    return Y, ins


def packed(w: np.ndarray, lanes: int) -> np.ndarray:
    """[N, K] -> [N/B, K, B] (the last block padded), as minitc/frontend/weights.py packs it."""
    N, K = w.shape
    blocks = -(-N // lanes)
    return np.ascontiguousarray(
        np.pad(w.T, ((0, 0), (0, blocks * lanes - N))).reshape(K, blocks, lanes).transpose(1, 0, 2)
    )


def rotating(fn, copies: list, fixed_before: list, fixed_after: list):
    """A call of fn on the next copy of the weight each time."""
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(copies)
        return fn(*fixed_before, copies[state[0]], *fixed_after)

    return call


def triad_call(arrays):
    """One STREAM triad over `arrays` (backends/llvm/probe.py's kernel), as a timed callable."""
    fn = compile_kernel(triad_kernel(), "llvm").cfunc
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    return lambda kept=arrays: fn(*pointers)  # the arrays live as long as the callable


def time_shape(M, N, K, epilogue, target, rng, repeats, triad) -> dict:
    lanes = target.lanes("float32")
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((N, K), dtype=np.float32)
    extra = [rng.standard_normal(N, dtype=np.float32)] if "bias" in epilogue else []
    if "residual" in epilogue:
        extra.append(rng.standard_normal((M, N), dtype=np.float32))
    ref = reference.dense(x, w, extra[0] if "bias" in epilogue else None, "gelu" if "gelu" in epilogue else None)
    ref = ref + extra[-1] if "residual" in epilogue else ref
    copies = max(2, -(-COPIES_OF_L3 * target.cache_bytes("l3") // w.nbytes))
    weights = {"packed": [packed(w, lanes) for _ in range(copies)], "nk": [w.copy() for _ in range(copies)]}
    fns, tags = {}, {}
    for name, layout, use_gemm in (
        ("minitc", "packed", False),
        ("minitc [N,K]", "nk", False),
        ("gemm", "packed", True),
    ):
        Y, _ = dense(M, N, K, epilogue, layout, lanes)
        s = tc.Schedule(Y)
        out = s.state.outputs[0]
        if use_gemm:
            tag = s.state.stage(out).tag
            TEMPLATES[tag](s, out, target, **tc.templates.DEFAULTS[tag](s, out, target))
        else:
            tag = template_tag(s, out)
            s = template_schedule(Y, target)
        f = tc.build(s, target=target)
        got = f(x, weights[layout][0], *extra)
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
        fns[name], tags[name] = rotating(f, weights[layout], [x], extra), tag
    tx, textra = torch.from_numpy(x), [torch.from_numpy(a) for a in extra]
    tws = [torch.from_numpy(a) for a in weights["nk"]]

    def eager(x_, w_, *rest):
        y = F.linear(x_, w_, rest[0] if "bias" in epilogue else None)
        y = F.gelu(y) if "gelu" in epilogue else y
        return y + rest[-1] if "residual" in epilogue else y

    fns["torch"] = rotating(eager, tws, [tx], textra)
    fns["triad"] = triad
    with BackgroundLoad() as load:
        timings = measure(fns, repeats=repeats, budget_s=0.6)
    triad_gbps = 12 * TRIAD_ELEMS / timings.pop("triad").median / 1e9  # the STREAM count: 12 bytes an element
    rows = {}
    for name, t in timings.items():
        gbps = w.nbytes / t.median / 1e9
        rows[name] = {"ms": t.median * 1e3, "spread": t.spread, "gbps": gbps, "of_triad": gbps / triad_gbps}
        rows[name]["template"] = tags.get(name)
    return {"rows": rows, "triad_gbps": triad_gbps, "load_cpus": load.cpus, "weight_bytes": w.nbytes, "copies": copies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--layers", default="", help="comma-separated layer names (default: all)")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    target = parse_target(f"llvm -num-cores={args.threads}")
    rng = np.random.default_rng(0)
    records = []
    triad = triad_call(triad_arrays())
    picked = [x for x in LAYERS if not args.layers or x[1] in args.layers.split(",")]
    with thread_limit(args.threads), torch.no_grad():
        for model, layer, K, N, epilogue in picked:
            for M in map(int, args.rows.split(",")):
                for _ in range(TRIES):
                    wait_for_quiet(30)
                    r = time_shape(M, N, K, epilogue, target, rng, args.repeats, triad)
                    if r["load_cpus"] is None or r["load_cpus"] < MAX_LOAD:
                        break
                r.update(model=model, layer=layer, M=M, N=N, K=K, epilogue=epilogue)
                records.append(r)
                ours, theirs = r["rows"]["minitc"], r["rows"]["torch"]
                print(
                    f"{model:5s} {layer:12s} M={M} {K:5d}x{N:<5d} {ours['template']:8s} {ours['ms']:.3f} ms "
                    f"{ours['gbps']:5.1f} GB/s ({ours['of_triad']:4.0%} of triad {r['triad_gbps']:.1f}) | [N,K] "
                    f"{r['rows']['minitc [N,K]']['gbps']:5.1f} | gemm {r['rows']['gemm']['gbps']:5.1f} | torch "
                    f"{theirs['gbps']:5.1f} GB/s, {theirs['ms'] / ours['ms']:.2f}x | load {r['load_cpus'] or 0:.2f}",
                    flush=True,
                )
    if args.json_path:
        result = {
            "experiment": "gemv_bandwidth",
            "threads": args.threads,
            "triad_gbps_median": statistics.median(r["triad_gbps"] for r in records),
            "records": records,
            "host": target.describe(),
            "run": run_stamp(
                "python experiments/gemv_bandwidth.py "
                + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v and k != "json_path")
                + f" --json {args.json_path}"
            ),
        }
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main()
