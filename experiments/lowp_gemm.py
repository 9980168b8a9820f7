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

`--int8` times the int8 GEMM instead (templates/gemm_int8.py: AMX tdpbusd, vpdpbusd, and
its exact int32 emulation; uint8 A, int8 B packed once, int32 C) against ONNX Runtime's
MatMulInteger on the same uint8 x int8 operands (B an initializer, zero points 0, the
session's intra-op threads = --threads); GOP/s in the `gflops` fields.

GFLOP/s = 2*M*N*K / median time. `--peak` first times the instructions alone on one core:
24 independent chains of `vdpbf16ps zmm` (64 flops each) and of `vfmadd231ps zmm` (32), the
best of 5 runs of 10^6 iterations. Each kernel is checked against float64 numpy first.
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
    return _time(kernels, repeats, M, N, K, base="torch bf16")


def measure_int8(M, N, K, repeats: int, threads: int) -> dict:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from minitc.templates.gemm_int8 import PATH_FEATURES as INT8_FEATURES
    from minitc.templates.gemm_int8 import int8_gemm

    rng = np.random.default_rng(0)
    A = rng.integers(0, 256, (M, K)).astype(np.uint8)
    B = rng.integers(-128, 128, (K, N)).astype(np.int8)
    exact = A.astype(np.int64) @ B.astype(np.int64)
    kernels = {}
    features = enabled_features(parse_target("llvm"))
    for path in ("amx", "vnni", "int"):
        if INT8_FEATURES[path] and INT8_FEATURES[path] not in features:
            continue
        g = int8_gemm(M, N, K, "llvm", path=path)
        bp = g.pack(B)
        np.testing.assert_array_equal(g(A, bp), exact)
        kernels[f"minitc {path}"] = (lambda g=g, bp=bp: g(A, bp), f"{g.shape.mr}x{g.shape.nr}")
    node = helper.make_node("MatMulInteger", ["A", "B"], ["C"])
    graph = helper.make_graph(
        [node],
        "mm",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [M, K])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [M, N])],
        [numpy_helper.from_array(B, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(onnx.ModelProto.SerializeToString(model), opts, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"A": A})[0], exact)
    kernels["ort MatMulInteger"] = (lambda: sess.run(None, {"A": A}), "")
    return _time(kernels, repeats, M, N, K, base="ort MatMulInteger")


def _time(kernels: dict, repeats: int, M, N, K, base: str) -> dict:
    times = {name: [] for name in kernels}
    with ForeignLoad() as load:
        for fn, _ in kernels.values():
            fn()
        for _ in range(repeats):
            for name, (fn, _) in kernels.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    row = {"shape": [M, N, K], "foreign_cpus": load.cpus, "base": base, "kernels": {}}
    for name, (_, tile) in kernels.items():
        med = statistics.median(times[name])
        row["kernels"][name] = {"ms": med * 1e3, "gflops": 2 * M * N * K / med / 1e9, "tile": tile}
    return row


def instruction_peak(op: str, chains: int = 24, iters: int = 1_000_000) -> float:
    """GFLOP/s of one core running only `op` ("dpbf16" or "fma") on registers."""
    import ctypes

    from minitc.backends.llvm import jit

    dp = "llvm.x86.avx512bf16.dpbf16ps.512"
    lines = [
        f"declare <16 x float> @{dp}(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
        "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
        f"define void @peak_{op}(ptr %out, ptr %x) {{",
        "entry:",
        "  %xv = load <16 x float>, ptr %x, align 4",
        "  %xb = bitcast <16 x float> %xv to <32 x bfloat>",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%in, %loop]",
    ]
    lines += [f"  %a{c} = phi <16 x float> [zeroinitializer, %entry], [%n{c}, %loop]" for c in range(chains)]
    for c in range(chains):
        if op == "dpbf16":
            lines.append(f"  %n{c} = call <16 x float> @{dp}(<16 x float> %a{c}, <32 x bfloat> %xb, <32 x bfloat> %xb)")
        else:
            lines.append(
                f"  %n{c} = call <16 x float> @llvm.fma.v16f32(<16 x float> %xv, <16 x float> %xv, <16 x float> %a{c})"
            )
    lines += [
        "  %in = add i64 %i, 1",
        f"  %more = icmp ult i64 %in, {iters}",
        "  br i1 %more, label %loop, label %done",
    ]
    lines += ["done:"] + [f"  %s{c} = fadd <16 x float> %s{c - 1}, %n{c}" for c in range(1, chains)]
    lines += [f"  store <16 x float> %s{chains - 1}, ptr %out, align 4", "  ret void", "}"]
    text = "\n".join(lines).replace("%s0,", "%n0,")
    ck = jit._compile(text, f"peak_{op}", parse_target("llvm"), f"peak_{op}", 2, time.perf_counter())
    out, x = np.zeros(16, np.float32), np.full(16, 1e-3, np.float32)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(ck.address)
    best = float("inf")
    for _ in range(6):  # the first run warms up
        t0 = time.perf_counter()
        fn(out.ctypes.data, x.ctypes.data)
        best = min(best, time.perf_counter() - t0)
    return (64 if op == "dpbf16" else 32) * iters * chains / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--peak", action="store_true", help="time vdpbf16ps and vfmadd231ps alone first")
    ap.add_argument("--int8", action="store_true", help="the int8 GEMM against ONNX Runtime's MatMulInteger")
    args = ap.parse_args()
    tc.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    facts = read_host_facts()
    result = {
        "experiment": "lowp_gemm_int8" if args.int8 else "lowp_gemm",
        "cpu": getattr(facts, "model_name", "") or platform.processor(),
        "target": parse_target("llvm").string,
        "threads": args.threads,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "rows": [],
    }
    if args.peak:
        ops = ["fma"] + (["dpbf16"] if "avx512bf16" in enabled_features(parse_target("llvm")) else [])
        result["one_core_peak_gflops"] = {op: instruction_peak(op) for op in ops}
        print("one core, instructions alone, GFLOP/s:", result["one_core_peak_gflops"], flush=True)
    for M, N, K in SHAPES:
        row = measure_int8(M, N, K, args.repeats, args.threads) if args.int8 else measure(M, N, K, args.repeats)
        result["rows"].append(row)
        ks = row["kernels"]
        base = ks[row["base"]]["gflops"]
        cells = "  ".join(f"{n} {k['gflops']:7.1f} ({k['gflops'] / base:4.2f}x)" for n, k in ks.items())
        print(f"{M}x{N}x{K}: {cells}  [foreign {row['foreign_cpus'] or 0:.2f} cpus]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
