"""ResNet-50's 1x1 convolutions on blocked data (conv2d_nchwc + bias + ReLU): the template's
default and variants of its task split, against torch's convolution (oneDNN) at the same
thread count, interleaved (minitc.timing.measure).

    [SHAPES="256->64@56;..."] python experiments/conv1x1_tasks.py [THREADS] [VARIANT=k=v,k=v ...]
"""

import os
import sys

import numpy as np
import torch

import minitc as tc
from minitc.ops.nchwc import conv2d_nchwc
from minitc.templates import template_schedule
from minitc.timing import measure, thread_limit

SHAPES = {  # (C, K, H[, R, stride]): NCHW input channels, output channels, height = width, window
    "1024->256@14": (1024, 256, 14),
    "512->128@28": (512, 128, 28),
    "2048->512@7": (2048, 512, 7),
    "256->64@56": (256, 64, 56),
    "256->128@56": (256, 128, 56),
    "256->1024@14": (256, 1024, 14),
    "64->256@56": (64, 256, 56),
    "3x3s2 128@56": (128, 128, 56, 3, 2),
    "3x3s2 256@28": (256, 256, 28, 3, 2),
}
BLOCK = 16


def kernel(C, K, H, R=1, stride=1, **params):
    X = tc.placeholder((1, C // BLOCK, H, H, BLOCK), name="X")
    W = tc.placeholder((K // BLOCK, C // BLOCK, R, R, BLOCK, BLOCK), name="W")
    b = tc.placeholder((K // BLOCK, BLOCK), name="b")
    conv = conv2d_nchwc(X, W, stride=stride, padding=R // 2)

    def bias_relu(n, k, y, x, lane):
        return tc.max(conv[n, k, y, x, lane] + b[k, lane], 0.0)

    out = tc.compute(conv.shape, bias_relu, name="out", tag="conv2d_nchwc")  # the template's epilogue
    s = template_schedule([out], "llvm", **params)
    return tc.build(s, "llvm"), (X, W, b, out)


def main(threads=2, variants=()):
    rng = np.random.default_rng(0)
    only = os.environ.get("SHAPES")
    for name, (C, K, H, *window) in SHAPES.items():
        if only and name not in only.split(";"):
            continue
        R, stride = window or (1, 1)
        x = rng.standard_normal((1, C, H, H), dtype=np.float32)
        w = rng.standard_normal((K, C, R, R), dtype=np.float32) / np.float32(np.sqrt(C * R * R))
        bias = rng.standard_normal(K, dtype=np.float32)
        xb = np.ascontiguousarray(x.reshape(1, C // BLOCK, BLOCK, H, H).transpose(0, 1, 3, 4, 2))
        wb = np.ascontiguousarray(w.reshape(K // BLOCK, BLOCK, C // BLOCK, BLOCK, R, R).transpose(0, 2, 4, 5, 3, 1))
        bb = bias.reshape(K // BLOCK, BLOCK)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)
        ref = torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=R // 2)).numpy()[0]
        OH = ref.shape[-1]
        ref_b = np.ascontiguousarray(ref.reshape(K // BLOCK, BLOCK, OH, OH).transpose(0, 2, 3, 1)[None])
        fns = {}
        fns["torch"] = lambda: torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=R // 2))
        for label, params in [("default", {})] + [(v, dict(p.split("=") for p in v.split(","))) for v in variants]:
            params = {
                k: (int(v) if v.lstrip("-").isdigit() else {"true": True, "false": False}.get(v, v))
                for k, v in params.items()
            }
            fn, _ = kernel(C, K, H, R, stride, **params)
            out = np.zeros_like(ref_b)
            fn(xb, wb, bb, out)
            np.testing.assert_allclose(out, ref_b, rtol=1e-4, atol=1e-4)
            fns[label] = lambda fn=fn, out=out: fn(xb, wb, bb, out)
        with thread_limit(threads):
            times = measure(fns, repeats=15)
        base = times["torch"].median
        gflop = 2 * C * K * OH * OH * R * R / 1e9
        row = "  ".join(
            f"{k} {1e3 * t.median:.3f} ms ({base / t.median:.2f}x, {gflop / t.median:.0f} GF/s)"
            for k, t in times.items()
        )
        print(f"{name:14s} {row}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, sys.argv[2:])
