"""Probe the GPU conv2d template on a real GPU: the default kernel and sampled template
parameters for several ResNet layers, each checked against float64 torch and timed against
torch (cuDNN, TF32 off) with CUDA events (median, L2 flushed). Needs CuPy and torch with CUDA.

    python experiments/gpu_conv_probe.py [--per-shape 24] [--seconds 25] [--json out.json]

Per layer: the default parameters, the default with the channel step's loop kept a loop
(MINITC_GPU_UNROLL_K=0), the default on weights stored [C, R, S, K] (weight_layout="CRSK": a
coalesced weight fill), the default with 8 channels a block, the fastest parameters of the
first probe (H100, 2026-11-27), then random draws of (kt, vk, oht, ohb, wt, vw, bc) until
--per-shape or --seconds per layer is reached. With --implicit-gemm: the direct default, then
the implicit GEMM (tc.ops.conv2d_gemm: im2col computed into the GEMM template's shared tiles)
with its defaults and random draws of (bm, bn, tm, tn, bk) instead. With --winograd: the
direct default, then Winograd's F(2x2, 3x3) (tc.ops.conv2d_winograd on weights transformed
ahead; 3x3 stride-1 layers only) with its defaults and random draws of its GEMM's tiles. The
JSON holds every row, so defaults can be fitted to it. The stored runs
(experiments/results/gpu-conv-probe-*-20261127-*.json) were made with earlier versions of this
script: run 3 timed the present default as "wide pixel blocks".
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from gpu_gemm_probe import lowered_with  # a script in the same folder (on sys.path when run)

import minitc as tc
from minitc.schedule import Schedule
from minitc.templates.gpu import GPU_DEFAULTS, GPU_TEMPLATES, bind_unbound, load_gpu_templates
from minitc.templates.gpu.conv import conv2d_defaults
from minitc.timing import Timer

LAYERS = {  # name: (N, C, H, K, R, stride)
    "resnet50-l3-b8": (8, 256, 14, 256, 3, 1),  # the gpu-core convolution
    "resnet18-c3": (1, 128, 28, 128, 3, 1),
    "conv-resnet-56": (1, 64, 56, 64, 3, 1),  # tlm-eval's held-out convolution
    "resnet18-c5": (1, 512, 7, 512, 3, 1),
    "resnet50-1x1-64-256": (1, 64, 56, 256, 1, 1),
    "resnet50-1x1-256-64": (1, 256, 56, 64, 1, 1),
    "resnet18-c3-s2": (1, 128, 28, 256, 3, 2),
}


FIRST_PROBE_BEST = {  # the fastest drawn parameters per layer in the first probe's run
    "resnet50-l3-b8": dict(kt=8, vk=4, wt=14, vw=1, bc=4, oht=8, ohb=1),
    "resnet18-c3": dict(kt=8, vk=4, wt=8, vw=1, bc=8, oht=4, ohb=1),
    "conv-resnet-56": dict(kt=4, vk=8, wt=16, vw=1, bc=16, oht=7, ohb=1),
    "resnet18-c5": dict(kt=8, vk=4, wt=4, vw=2, bc=4, oht=8, ohb=1),
    "resnet50-1x1-64-256": dict(kt=8, vk=4, wt=28, vw=2, bc=8, oht=2, ohb=1),
}


def conv(shape, weight_layout: str = "KCRS"):
    N, C, H, K, R, stride = shape
    w_shape = (K, C, R, R) if weight_layout == "KCRS" else (C, R, R, K)
    X, W = tc.placeholder((N, C, H, H), name="X"), tc.placeholder(w_shape, name="W")
    return tc.ops.conv2d(X, W, stride=stride, padding=R // 2, weight_layout=weight_layout)


def conv_gemm(shape):
    N, C, H, K, R, stride = shape
    X, W = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((K, C * R * R), name="W")
    return tc.ops.conv2d_gemm(X, W, R, stride=stride, padding=R // 2)


def conv_winograd(shape):
    N, C, H, K, R, stride = shape
    X, U = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((4, 4, C, K), name="U")
    return tc.ops.conv2d_winograd(X, U, padding=1)


def build(out, params: dict, env: dict):
    """Its template (conv2d, conv2d_gemm or conv2d_winograd) with `params`, lowered with the environment
    variables `env` set."""

    def scheduled_and_built():
        s = Schedule(out)
        GPU_TEMPLATES[s.state.stage(s.state.outputs[0]).tag](s, s.state.outputs[0], None, **params)
        bind_unbound(s)
        return tc.build(s, target="cuda", db=False)

    return lowered_with(env, scheduled_and_built)


def draw(rng, shape) -> dict:
    N, C, H, K, R, stride = shape
    OW = (H + 2 * (R // 2) - R) // stride + 1
    vw = int(rng.choice([1, 2, 4]))
    return {
        "kt": int(rng.choice([2, 4, 8, 16])),
        "vk": int(rng.choice([4, 8])),
        "wt": int(min(-(-OW // vw), rng.choice([7, 8, 14, 16, 28, 32]))),
        "vw": vw,
        "bc": int(rng.choice([4, 8, 16])),
        "oht": int(rng.choice([1, 2, 4, 7, 8])),
        "ohb": int(rng.choice([1, 2])),
    }


def draw_gemm(rng, shape) -> dict:
    tm, tn = int(rng.choice([2, 4, 8])), int(rng.choice([2, 4, 8]))
    return {
        "bm": int(tm * rng.choice([4, 8, 16, 32])),
        "bn": int(tn * rng.choice([4, 8, 16, 32])),
        "tm": tm,
        "tn": tn,
        "bk": int(rng.choice([8, 16, 32])),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-shape", type=int, default=24)
    p.add_argument("--seconds", type=float, default=25)
    p.add_argument("--json")
    p.add_argument("--implicit-gemm", action="store_true", help="probe conv2d_gemm against the direct default")
    p.add_argument("--winograd", action="store_true", help="probe conv2d_winograd against the direct default")
    p.add_argument("--layers", help="comma-separated layer names (default: all)")
    args = p.parse_args()
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.allow_tf32 = False
    load_gpu_templates()
    timer, rng, rows = Timer(torch), np.random.default_rng(0), []
    print(f"device: {torch.cuda.get_device_name()}")
    for name, shape in LAYERS.items():
        if args.layers and name not in args.layers.split(","):
            continue
        N, C, H, K, R, stride = shape
        if args.winograd and (R, stride) != (3, 1):
            continue
        flops = 2 * N * K * C * R * R * ((H + 2 * (R // 2) - R) // stride + 1) ** 2
        x, w = torch.randn(N, C, H, H, device="cuda"), torch.randn(K, C, R, R, device="cuda")
        ref = F.conv2d(x.double(), w.double(), stride=stride, padding=R // 2)
        outs = {"KCRS": conv(shape), "CRSK": conv(shape, "CRSK"), "gemm": conv_gemm(shape)}
        weights = {"KCRS": w, "CRSK": w.permute(1, 2, 3, 0).contiguous(), "gemm": w.reshape(K, -1)}
        if args.winograd:
            outs["winograd"] = conv_winograd(shape)
            weights["winograd"] = torch.from_numpy(tc.ops.winograd_weights_ck(w.cpu().numpy())).cuda()
        ref_gemm = ref.reshape(N, K, -1)
        s = Schedule(outs["KCRS"])
        default = conv2d_defaults(s, s.state.outputs[0], None)
        s = Schedule(outs["gemm"])
        gemm_default = GPU_DEFAULTS["conv2d_gemm"](s, s.state.outputs[0], None)
        torch_ms = timer.measure(
            {"t": lambda: F.conv2d(x, w, stride=stride, padding=R // 2)}, repeats=30, budget_s=0.3
        )["t"].median
        print(f"\n{name} {shape}: torch (cuDNN) {torch_ms:.4f} ms; default {default}")
        fixed = [  # label, parameters, environment, form (weight layout, or the implicit GEMM)
            ("default", default, {}, "KCRS"),
            ("default, k loop", default, {"MINITC_GPU_UNROLL_K": "0"}, "KCRS"),
            ("default, CRSK", default, {}, "CRSK"),
            ("default, 8 ch", {**default, "kt": 2}, {}, "KCRS"),
        ]
        if name in FIRST_PROBE_BEST:
            fixed.append(("first probe best", FIRST_PROBE_BEST[name], {}, "KCRS"))
        if args.implicit_gemm:
            fixed = [fixed[0], ("gemm default", gemm_default, {}, "gemm")]
        if args.winograd:
            s = Schedule(outs["winograd"])
            winograd_default = GPU_DEFAULTS["conv2d_winograd"](s, s.state.outputs[0], None)
            fixed = [fixed[0], ("winograd default", winograd_default, {}, "winograd")]
        start = time.perf_counter()
        for i in range(args.per_shape + len(fixed)):
            if i >= len(fixed) and time.perf_counter() - start > args.seconds:
                break
            if i < len(fixed):
                label, params, env, form = fixed[i]
            elif args.implicit_gemm:
                label, params, env, form = "gemm drawn", draw_gemm(rng, shape), {}, "gemm"
            elif args.winograd:
                label, params, env, form = "winograd drawn", draw_gemm(rng, shape), {}, "winograd"
            else:
                label, params, env, form = "drawn", draw(rng, shape), {}, "KCRS"
            row = {
                "layer": name,
                "shape": shape,
                "label": label,
                "params": params,
                "env": env,
                "form": form,
                "torch_ms": torch_ms,
            }
            try:
                f, weight, want = build(outs[form], params, env), weights[form], ref_gemm if form == "gemm" else ref
                y = f(x, weight)
                row["rel_err"] = float((y.double() - want).abs().max() / max(1.0, float(want.abs().max())))
                row["ms"] = timer.measure({"m": lambda: f(x, weight, out=y)}, repeats=20, budget_s=0.2)["m"].median
                row["tflops"] = flops / row["ms"] / 1e9
                flag = "" if row["rel_err"] < 1e-3 else "  WRONG"
                ratio = torch_ms / row["ms"]
                print(
                    f"  {label:<16} {row['ms']:8.4f} ms {ratio:5.2f}x cuDNN {row['tflops']:6.1f} TFLOP/s",
                    f"{params}{flag}",
                )
            except Exception as e:  # a failing variant is a row, not the end of the probe
                row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
                print(f"  {label:<16} {row['error']}  {params}")
            rows.append(row)
        ok = sorted(
            (r for r in rows if r["layer"] == name and "ms" in r and r["rel_err"] < 1e-3), key=lambda r: r["ms"]
        )
        if ok:
            best = ok[0]
            print(
                f"  best: {best['ms']:.4f} ms ({torch_ms / best['ms']:.2f}x cuDNN)",
                f"{best['params']} {best['label']}",
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
