"""The workloads of the GPU suites (gpu_core.py): each operator at its shape with its torch,
Triton and numpy counterparts."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

import minitc as tc
from minitc.benchmarks.suites import pick


@dataclass(frozen=True)
class GpuWorkload:
    """One operator at one shape, run by minitc, torch and Triton on the GPU.

    make_minitc() -> output tensor (placeholders created in input order); make_torch(torch, F)
    and make_triton(triton_kernels) -> fn(*tensors) -> tensor (make_triton None: `no_triton`
    says why); reference(*arrays) -> the numpy result (minitc.ops.reference, for the tests);
    inputs are standard normal float32, input i multiplied by scales[i]."""

    name: str
    description: str
    kind: str  # "compute" (GFLOP/s) or "memory" (GB/s)
    work: float  # FLOPs or bytes per call
    shapes: tuple
    make_minitc: Callable
    make_torch: Callable
    reference: Callable
    make_triton: Callable | None = None
    no_triton: str = ""
    scales: tuple = ()
    rtol: float = 1e-3  # |x - ref| <= atol * max(1, max|ref|) + rtol * |ref|
    atol: float = 1e-4
    pack: Callable | None = None

    @property
    def unit(self) -> str:
        return "GFLOP/s" if self.kind == "compute" else "GB/s"

    def make_inputs(self, rng) -> tuple:
        arrays = []
        for i, shape in enumerate(self.shapes):
            a = rng.standard_normal(shape, dtype=np.float32)
            arrays.append(a * np.float32(self.scales[i]) if i < len(self.scales) else a)
        return tuple(arrays)

    def minitc_inputs(self, arrays: tuple) -> tuple:
        return tuple(self.pack(*arrays)) if self.pack else tuple(arrays)


def _placeholders(*shapes):
    return [tc.placeholder(s, "float32", name=n) for s, n in zip(shapes, "ABCDEFGH")]


def matmul(name: str, m: int, n: int, k: int) -> GpuWorkload:
    return GpuWorkload(
        name,
        f"matmul {m}x{k} @ {k}x{n}",
        "compute",
        2.0 * m * n * k,
        ((m, k), (k, n)),
        make_minitc=lambda: tc.ops.matmul(*_placeholders((m, k), (k, n))),
        make_torch=lambda torch, F: torch.matmul,
        reference=tc.ops.reference.matmul,
        make_triton=lambda tk: tk.matmul,
    )


def conv2d(name: str, layer: str, n: int, c: int, hw: int, k: int, rs: int, stride: int = 1, pad: int = 0):
    oh = (hw + 2 * pad - rs) // stride + 1
    shapes = ((n, c, hw, hw), (k, c, rs, rs))
    return GpuWorkload(
        name,
        f"conv2d {layer}: N={n} C={c} {hw}x{hw} K={k} {rs}x{rs} s{stride} p{pad}",
        "compute",
        2.0 * n * k * oh * oh * c * rs * rs,
        shapes,
        make_minitc=lambda: tc.ops.conv2d(*_placeholders(*shapes), stride=stride, padding=pad),
        make_torch=lambda torch, F: lambda x, w: F.conv2d(x, w, stride=stride, padding=pad),
        reference=lambda x, w: tc.ops.reference.conv2d(x, w, stride, pad),
        make_triton=lambda tk: lambda x, w: tk.conv2d(x, w, stride, pad),
        scales=(1.0, 1.0 / math.sqrt(c * rs * rs)),
    )


def conv2d_winograd(name: str, layer: str, n: int, c: int, hw: int, k: int) -> GpuWorkload:
    """A 3x3, stride-1, padding-1 convolution that minitc runs by Winograd's F(2x2, 3x3) on the
    weights transformed ahead (tc.ops.winograd_weights_ck); torch and Triton run it on W."""
    direct = conv2d(name, layer, n, c, hw, k, 3, 1, 1)

    def make_minitc():
        X, U = _placeholders((n, c, hw, hw), (4, 4, c, k))
        return tc.ops.conv2d_winograd(X, U, padding=1)

    return replace(  # the direct convolution's FLOPs, so that GFLOP/s compare with it
        direct,
        description=direct.description + ", minitc by Winograd F(2x2, 3x3) on pre-transformed weights",
        make_minitc=make_minitc,
        pack=lambda x, w: (x, tc.ops.winograd_weights_ck(w)),
    )


def dense(name: str, what: str, tokens: int, d_in: int, d_out: int, activation: str = "gelu") -> GpuWorkload:
    shapes = ((tokens, d_in), (d_out, d_in), (d_out,))
    return GpuWorkload(
        name,
        f"dense {what}: X[{tokens},{d_in}] @ W[{d_out},{d_in}].T + bias, {activation} (fused)",
        "compute",
        2.0 * tokens * d_out * d_in,
        shapes,
        make_minitc=lambda: tc.ops.dense(*_placeholders(*shapes), activation=activation),
        make_torch=lambda torch, F: lambda x, w, b: getattr(F, activation)(F.linear(x, w, b)),
        reference=lambda x, w, b: tc.ops.reference.dense(x, w, b, activation=activation),
        make_triton=lambda tk: lambda x, w, b: tk.linear(x, w, b, activation),
        scales=(1.0, 1.0 / math.sqrt(d_in), 1.0),  # pre-activations ~ N(0, 2): gelu's curved part
    )


def dense_transposed(name: str, what: str, tokens: int, d_in: int, d_out: int, activation: str = "gelu"):
    """`dense` with minitc's weight stored [in, out] (`weight_in_out`, transposed ahead, as a
    model compiler does with a constant weight), so its shared tile fills with plain float4
    copies; torch and Triton run it on W [out, in]."""
    plain = dense(name, what, tokens, d_in, d_out, activation)

    def make_minitc():
        X, Wt, b = _placeholders((tokens, d_in), (d_in, d_out), (d_out,))
        return tc.ops.dense(X, Wt, b, activation=activation, weight_in_out=True)

    return replace(
        plain,
        description=plain.description + ", minitc on W transposed ahead",
        make_minitc=make_minitc,
        pack=lambda x, w, b: (x, np.ascontiguousarray(w.T), b),
    )


def softmax(name: str, what: str, rows: int, cols: int) -> GpuWorkload:
    return GpuWorkload(
        name,
        f"softmax {what}: last axis of {rows}x{cols}",
        "memory",
        4.0 * 2 * rows * cols,
        ((rows, cols),),
        make_minitc=lambda: tc.ops.softmax(*_placeholders((rows, cols)), axis=-1),
        make_torch=lambda torch, F: lambda x: torch.softmax(x, -1),
        reference=lambda x: tc.ops.reference.softmax(x, axis=-1),
        make_triton=lambda tk: tk.softmax,
        scales=(2.0,),
    )


GPU_CORE = [
    matmul("matmul-4096", 4096, 4096, 4096),
    # ResNet-50 stage conv4_x (layer3), the 3x3 convolution of each bottleneck block, batch 8
    conv2d("conv-resnet50-l3", "ResNet-50 layer3 3x3", 8, 256, 14, 256, 3, 1, 1),
    conv2d_winograd("conv-resnet50-l3-winograd", "ResNet-50 layer3 3x3", 8, 256, 14, 256),
    # BERT-base FFN up-projection (768 -> 3072, GELU) over batch 8 x sequence 512 tokens
    dense("dense-bert-ffn", "BERT-base FFN up (8x512 tokens)", 4096, 768, 3072, "gelu"),
    dense_transposed("dense-bert-ffn-wt", "BERT-base FFN up (8x512 tokens)", 4096, 768, 3072, "gelu"),
    # BERT-base attention probabilities: batch 8 x 12 heads x 512 queries, 512 keys
    softmax("softmax-bert-attn", "BERT-base attention (8x12x512 rows)", 8 * 12 * 512, 512),
]
GPU_SMOKE = [
    matmul("matmul-small", 64, 40, 48),
    conv2d("conv-small", "tiny 3x3", 2, 8, 6, 8, 3, 1, 1),
    conv2d_winograd("conv-small-winograd", "tiny 3x3", 2, 8, 7, 8),
    dense("dense-small", "tiny", 16, 24, 40, "gelu"),
    dense_transposed("dense-small-wt", "tiny", 16, 24, 40, "gelu"),
    softmax("softmax-small", "tiny", 12, 32),
]
GPU_SUITES: dict = {"gpu-core": GPU_CORE, "gpu-smoke": GPU_SMOKE}


def select(suite: str, names=None) -> list:
    """The workloads of a GPU suite, or those named (KeyError listing what exists)."""
    return pick(GPU_SUITES[suite], names, suite)
