"""Probe the GPU GEMM template on a real GPU: what the default kernels reach against torch, and
which tile settings pay. Needs CuPy and torch with CUDA; under 90 s on an H100.

    python experiments/gpu_gemm_probe.py [--quick]

1. matmul 4096^3, the BERT FFN dense + GELU (4096 tokens, 768 -> 3072) and the ResNet-50 layer3
   3x3 conv (batch 8), default templates: checked against float64 torch, then timed against
   torch (cuBLAS / cuDNN, TF32 off) with CUDA events (median, L2 flushed; timing.Timer).
   Each also with its k-step kept a loop (MINITC_GPU_UNROLL_K=0, read when the template runs).
2. matmul 4096^3 with other template parameters (bk, block and thread tiles), each with the
   k-step unrolled and kept a loop, and without double buffering (MINITC_GPU_DOUBLE_BUFFER=0,
   read when a kernel is lowered).
3. ptxas registers / spills of the default matmul kernel, when ptxas is on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import minitc as tc
from minitc.benchmarks.gpu_suites import select
from minitc.schedule import Schedule
from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, load_gpu_templates
from minitc.timing import Timer

WORKLOADS = ("matmul-4096", "dense-bert-ffn", "conv-resnet50-l3")
VARIANTS = [  # matmul template parameters (the defaults for 4096^3 are the first)
    dict(bm=128, bn=128, tm=16, tn=8, bk=8),
    dict(bm=128, bn=128, tm=16, tn=8, bk=16),
    dict(bm=128, bn=128, tm=8, tn=8, bk=16),
    dict(bm=128, bn=128, tm=8, tn=8, bk=8),
    dict(bm=128, bn=128, tm=8, tn=8, bk=32),  # 64 KiB doubled: over 48 KiB, so single-buffered
    dict(bm=128, bn=64, tm=8, tn=8, bk=16),
    dict(bm=64, bn=128, tm=8, tn=8, bk=16),
    dict(bm=128, bn=128, tm=8, tn=16, bk=16),
    dict(bm=256, bn=128, tm=16, tn=8, bk=8),
    dict(bm=64, bn=64, tm=4, tn=4, bk=16),
]


SETTINGS = {  # column: environment while the template runs and the kernel is lowered
    "default": {},
    "k loop": {"MINITC_GPU_UNROLL_K": "0"},
    "no-db": {"MINITC_GPU_DOUBLE_BUFFER": "0"},
}


def lowered_with(env: dict, fn):
    """Run `fn` (which schedules, lowers and builds) with the environment variables `env` set."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def matmul_variant(out, params: dict):
    load_gpu_templates()
    s = Schedule(out)
    GPU_TEMPLATES["matmul"](s, s.state.outputs[0], None, **params)
    bind_unbound(s)
    return tc.build(s, target="cuda", db=False)


def max_rel_err(y, ref) -> float:
    return float((y.double() - ref).abs().max() / max(1.0, float(ref.abs().max())))


def main(quick: bool = False) -> None:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.perf_counter()
    print(f"device: {torch.cuda.get_device_name()}; minitc {tc.__version__ if hasattr(tc, '__version__') else ''}")
    timer = Timer(torch)
    rng = np.random.default_rng(0)
    budget = 0.5 if quick else 1.5
    print(
        f"\n{'workload':<18} {'minitc ms':>10} {'torch ms':>9} {'vs torch':>8} {'TFLOP/s':>8} {'rel err':>9} "
        f"{'k loop ms':>9}  build s"
    )
    for w in select("gpu-core", list(WORKLOADS)):
        args = [torch.from_numpy(a).cuda() for a in w.make_inputs(rng)]
        out = w.make_minitc()
        tb = time.perf_counter()
        f = tc.build(out, target="cuda", db=False)
        build_s = time.perf_counter() - tb
        torch_fn = w.make_torch(torch, F)
        y, ref = f(*args), torch_fn(*(a.double() for a in args))
        err = max_rel_err(y, ref)
        res = f(*args)
        g = lowered_with(SETTINGS["k loop"], lambda: tc.build(out, target="cuda", db=False))
        err = max(err, max_rel_err(g(*args), ref))
        fns = {"minitc": lambda: f(*args, out=res), "torch": lambda: torch_fn(*args), "loop": lambda: g(*args, out=res)}
        t = timer.measure(fns, repeats=50, budget_s=budget)
        ms, tms, loop = t["minitc"].median, t["torch"].median, t["loop"].median
        flag = "" if err < 1e-3 else "  WRONG"
        print(
            f"{w.name:<18} {ms:>10.3f} {tms:>9.3f} {tms / ms:>7.2f}x {w.work / ms / 1e9:>8.1f} {err:>9.1e} "
            f"{loop:>9.3f}  {build_s:.1f}{flag}"
        )

    print("\nmatmul 4096^3 variants (ms and TFLOP/s: " + ", ".join(SETTINGS) + "):")
    n = 4096
    a, b = (torch.randn(n, n, device="cuda") for _ in range(2))
    ref = torch.matmul(a.double(), b.double())
    flops = 2 * n**3
    variants = VARIANTS[:3] if quick else VARIANTS
    for params in variants:
        A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
        C = tc.ops.matmul(A, B)
        cells = []
        for env in SETTINGS.values():
            try:
                f = lowered_with(env, lambda: matmul_variant(C, params))
                res = f(a, b)
                err = max_rel_err(res, ref)
                ms = timer.measure({"v": lambda: f(a, b, out=res)}, repeats=20, budget_s=0.4)["v"].median
                cells.append(f"{ms:>8.3f} {flops / ms / 1e9:>8.1f}" + ("  WRONG" if err > 1e-3 else ""))
            except Exception as e:  # a variant that fails is a row, not the end of the probe
                cells.append(f"{type(e).__name__}: {str(e)[:60]}")
        label = " ".join(f"{k}={v}" for k, v in params.items())
        print(f"{label:<40} " + "  ".join(cells))
    ptxas_info()
    print(f"\nprobe took {time.perf_counter() - t0:.0f} s")


def ptxas_info() -> None:
    """Registers and spills of the default matmul 4096^3 kernel (nvcc --ptx, then ptxas -v)."""
    nvcc, ptxas = shutil.which("nvcc"), shutil.which("ptxas")
    if not (nvcc and ptxas):
        print("\nptxas: nvcc/ptxas not on PATH, skipped")
        return
    A, B = tc.placeholder((4096, 4096), name="A"), tc.placeholder((4096, 4096), name="B")
    src = tc.codegen(tc.ops.matmul(A, B), "cuda", db=False)
    with tempfile.TemporaryDirectory() as d:
        cu, ptx = os.path.join(d, "k.cu"), os.path.join(d, "k.ptx")
        with open(cu, "w") as fh:
            fh.write(src)
        subprocess.run([nvcc, "-arch=sm_90", "--ptx", cu, "-o", ptx], check=True, capture_output=True)
        r = subprocess.run([ptxas, "-arch=sm_90", "-v", ptx, "-o", os.devnull], capture_output=True, text=True)
    lines = [ln.strip() for ln in r.stderr.splitlines() if "registers" in ln or "spill" in ln]
    print("\nptxas (default matmul 4096^3, sm_90):\n  " + "\n  ".join(lines))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
