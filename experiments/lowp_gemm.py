"""bf16 GEMM (issue 54, step 2): minitc's vdpbf16ps micro-kernel against torch.matmul on bf16
tensors (oneDNN), in one process, rounds interleaved.

    python experiments/lowp_gemm.py [--threads 2] [--repeats 15] [--json F]

Shapes: 1024^3 and BERT-base's dense layers at sequence 128 (M x N x K: 128x768x768 the
attention projections, 128x3072x768 the MLP up, 128x768x3072 the MLP down). Kernels:

    minitc amx      templates/gemm_bf16.py on AMX tiles (tdpbf16ps, 32 x 32 blocks of C), where
                    the host has amx-bf16; B packed once ahead of time (a weight), float32 out
    minitc dpbf16   the same on AVX-512 BF16 (vdpbf16ps, a 6 x 64 register tile)
    minitc fma      the exact emulation (bf16 widened to float32, two FMAs per pair): what a
                    CPU without AVX-512 BF16 runs
    torch bf16      torch.matmul(A, B) on bfloat16 tensors (B [K, N] as given; oneDNN picks the
                    kernel: AMX where the CPU has it) -> bfloat16 out
    torch fp32      torch.matmul on float32 copies, for scale

GFLOP/s = 2*M*N*K / median time. Each kernel is checked against float64 numpy first.
`foreign_cpus` is the CPU time other processes took during the shape's rounds (a lower bound).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.host_load import ForeignLoad
from minitc.target import parse_target
from minitc.target.cpu import enabled_features
from minitc.target.host import read_host_facts
from minitc.templates.gemm_bf16 import PATH_FEATURES, bf16_gemm

SHAPES = [(1024, 1024, 1024), (128, 768, 768), (128, 3072, 768), (128, 768, 3072)]


def _bf16_numpy(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view("bfloat16")


def measure(M, N, K, repeats: int) -> dict:
    A, B = torch.randn(M, K).to(torch.bfloat16), torch.randn(K, N).to(torch.bfloat16)
    An, Bn = _bf16_numpy(A), _bf16_numpy(B)
    exact = An.astype(np.float64) @ Bn.astype(np.float64)
    kernels = {}
    features = enabled_features(parse_target("llvm"))
    for path in ("amx", "dpbf16", "fma"):
        if PATH_FEATURES[path] and PATH_FEATURES[path] not in features:
            continue  # the host lacks the instruction
        g = bf16_gemm(M, N, K, "llvm", path=path)
        try:
            bp, out = g.pack(Bn), np.empty((M, N), np.float32)
            g(An, bp, out=out)
        except tc.errors.BuildError:  # the host lacks the instruction
            continue
        np.testing.assert_allclose(out, exact, rtol=1e-4, atol=1e-3)
        kernels[f"minitc {path}"] = (lambda g=g, bp=bp, out=out: g(An, bp, out=out), f"{g.shape.mr}x{g.shape.nr}")
    Af, Bf = A.float(), B.float()
    np.testing.assert_allclose(torch.matmul(A, B).float().numpy(), exact, rtol=0.05, atol=0.5)
    kernels["torch bf16"] = (lambda: torch.matmul(A, B), "")
    kernels["torch fp32"] = (lambda: torch.matmul(Af, Bf), "")
    times = {name: [] for name in kernels}
    with ForeignLoad() as load:
        for name, (fn, _) in kernels.items():  # warm up
            fn()
        for _ in range(repeats):
            for name, (fn, _) in kernels.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    flops = 2 * M * N * K
    row = {"shape": [M, N, K], "foreign_cpus": load.cpus, "kernels": {}}
    for name, (_, tile) in kernels.items():
        med = statistics.median(times[name])
        row["kernels"][name] = {"ms": med * 1e3, "gflops": flops / med / 1e9, "tile": tile}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tc.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    facts = read_host_facts()
    result = {
        "experiment": "lowp_gemm",
        "cpu": getattr(facts, "model_name", "") or platform.processor(),
        "target": parse_target("llvm").string,
        "threads": args.threads,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "rows": [],
    }
    for M, N, K in SHAPES:
        row = measure(M, N, K, args.repeats)
        result["rows"].append(row)
        ks = row["kernels"]
        base = ks["torch bf16"]["gflops"]
        cells = "  ".join(f"{n} {k['gflops']:7.1f} ({k['gflops'] / base:4.2f}x)" for n, k in ks.items())
        print(f"{M}x{N}x{K}: {cells}  [foreign {row['foreign_cpus'] or 0:.2f} cpus]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
