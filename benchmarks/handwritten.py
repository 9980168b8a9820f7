"""Operators as users write them (issue 52, item 3): every one with `tc.compute`, none with
`tc.ops`, so `tc.build` finds no operator tag. A matrix product written by hand still gets the
GEMM template (gemm_stages.is_contraction); the rest get the generic design space's analytical
default (autotune/default_schedule.py). Each is checked against numpy and timed against the
faster of numpy and torch (`torch.einsum` where torch has no single call).

    python -m minitc.benchmarks --suite handwritten              # the default builds
    python -m minitc.benchmarks --suite handwritten-tune --trials 64 --strategies tlm,evolutionary
"""

from __future__ import annotations

import numpy as np

import minitc as tc
from minitc.benchmarks.suites import F32, Workload, _normal, _torch

ph = tc.placeholder


def _einsum_workload(name: str, spec: str, shapes: dict, description: str) -> Workload:
    """C = einsum(spec) written with tc.compute; `shapes` gives each letter's extent."""
    operands, out = spec.split("->")
    a_letters, b_letters = operands.split(",")
    a_shape, b_shape = (tuple(shapes[c] for c in letters) for letters in (a_letters, b_letters))
    out_shape = tuple(shapes[c] for c in out)
    reduced = [c for c in dict.fromkeys(a_letters + b_letters) if c not in out]
    flops = 2.0 * float(np.prod([shapes[c] for c in dict.fromkeys(a_letters + b_letters)]))

    def make_minitc():
        A, B = ph(a_shape, F32, name="A"), ph(b_shape, F32, name="B")
        rs = {c: tc.reduce_axis(shapes[c], f"r{c}") for c in reduced}

        def body(*axes):
            at = {**dict(zip(out, axes)), **rs}
            a, b = A[tuple(at[c] for c in a_letters)], B[tuple(at[c] for c in b_letters)]
            return tc.sum(a * b, axis=list(rs.values()))

        return tc.compute(out_shape, body, name="C")

    return Workload(
        name,
        f"{description}: {spec}",
        "compute",
        flops,
        make_inputs=_normal(a_shape, b_shape),
        make_minitc=make_minitc,
        make_numpy=lambda: lambda a, b: np.einsum(spec, a, b, optimize=True),
        make_torch=_torch(lambda torch, F: lambda a, b: torch.einsum(spec, a, b)),
    )


def conv_nhwc(name: str, hw: int, c: int, k: int) -> Workload:
    """A 3x3 convolution in NHWC (HWIO weights) on an input padded beforehand."""
    x_shape, w_shape = (1, hw + 2, hw + 2, c), (3, 3, c, k)

    def make_minitc():
        X, W = ph(x_shape, F32, name="X"), ph(w_shape, F32, name="W")
        rh, rw, rc = tc.reduce_axis(3, "rh"), tc.reduce_axis(3, "rw"), tc.reduce_axis(c, "rc")
        return tc.compute(
            (1, hw, hw, k),
            lambda n, y, x, o: tc.sum(X[n, y + rh, x + rw, rc] * W[rh, rw, rc, o], axis=[rh, rw, rc]),
            name="Y",
        )

    def numpy_conv(x, w):
        win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))  # n y x c rh rw
        return np.einsum("nyxcij,ijck->nyxk", win, w, optimize=True)

    return Workload(
        name,
        f"conv2d NHWC {hw}x{hw}x{c} -> {k}, 3x3, written by hand",
        "compute",
        2.0 * hw * hw * k * c * 9,
        make_inputs=_normal(x_shape, w_shape),
        make_minitc=make_minitc,
        make_numpy=lambda: numpy_conv,
        make_torch=_torch(
            lambda torch, F: lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)).permute(0, 2, 3, 1)
        ),
    )


def grouped_conv(name: str, hw: int, c: int, groups: int) -> Workload:
    """A grouped 3x3 convolution in NCHW (depthwise where groups == c), padded input."""
    per = c // groups
    x_shape, w_shape = (1, c, hw + 2, hw + 2), (c, per, 3, 3)

    def make_minitc():
        X, W = ph(x_shape, F32, name="X"), ph(w_shape, F32, name="W")
        rh, rw = tc.reduce_axis(3, "rh"), tc.reduce_axis(3, "rw")
        if per == 1:
            return tc.compute(
                (1, c, hw, hw),
                lambda n, o, y, x: tc.sum(X[n, o, y + rh, x + rw] * W[o, 0, rh, rw], axis=[rh, rw]),
                name="Y",
            )
        rc = tc.reduce_axis(per, "rc")
        return tc.compute(
            (1, c, hw, hw),
            lambda n, o, y, x: tc.sum(X[n, o // per * per + rc, y + rh, x + rw] * W[o, rc, rh, rw], axis=[rc, rh, rw]),
            name="Y",
        )

    def numpy_conv(x, w):
        win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # n c y x i j
        win = win.reshape(1, groups, per, hw, hw, 3, 3)
        return np.einsum("ngcyxij,gocij->ngoyx", win, w.reshape(groups, per, per, 3, 3), optimize=True).reshape(
            1, c, hw, hw
        )

    kind = "depthwise" if per == 1 else f"grouped ({groups} groups)"
    return Workload(
        name,
        f"conv2d {kind} NCHW {c}x{hw}x{hw}, 3x3, written by hand",
        "compute",
        2.0 * c * per * hw * hw * 9,
        make_inputs=_normal(x_shape, w_shape),
        make_minitc=make_minitc,
        make_numpy=lambda: numpy_conv,
        make_torch=_torch(lambda torch, F: lambda x, w: F.conv2d(x, w, groups=groups)),
    )


def matmul_bias_gelu(name: str, m: int, k: int, n: int) -> Workload:
    """gelu(A @ B + bias) in three tc.computes, as a user writes a fused layer."""

    def make_minitc():
        A, B, bias = ph((m, k), F32, name="A"), ph((k, n), F32, name="B"), ph((n,), F32, name="bias")
        r = tc.reduce_axis(k, "r")
        P = tc.compute((m, n), lambda i, j: tc.sum(A[i, r] * B[r, j], axis=r), name="P")
        return tc.compute(
            (m, n), lambda i, j: 0.5 * (P[i, j] + bias[j]) * (1.0 + tc.erf((P[i, j] + bias[j]) * 0.70710678)), name="Y"
        )

    def numpy_gelu(a, b, bias):
        from math import erf

        z = a @ b + bias
        return (0.5 * z * (1 + np.vectorize(erf, otypes=[np.float64])(z / np.sqrt(2)))).astype(np.float32)

    return Workload(
        name,
        f"matmul {m}x{k}x{n} + bias + gelu, written by hand",
        "compute",
        2.0 * m * n * k,
        make_inputs=_normal((m, k), (k, n), (n,)),
        make_minitc=make_minitc,
        make_numpy=lambda: numpy_gelu,
        make_torch=_torch(lambda torch, F: lambda a, b, bias: F.gelu(a @ b + bias)),
    )


def variance(name: str, rows: int, cols: int) -> Workload:
    """The row variance around given means: a reduction that is no contraction (the control)."""

    def make_minitc():
        X, mean = ph((rows, cols), F32, name="X"), ph((rows,), F32, name="mean")
        r = tc.reduce_axis(cols, "r")
        S = tc.compute((rows,), lambda i: tc.sum((X[i, r] - mean[i]) * (X[i, r] - mean[i]), axis=r), name="S")
        return tc.compute((rows,), lambda i: S[i] * (1.0 / cols), name="V")

    return Workload(
        name,
        f"row variance {rows}x{cols} around given means, written by hand",
        "memory",
        4.0 * (rows * cols + 2 * rows),
        make_inputs=_normal((rows, cols), (rows,)),
        make_minitc=make_minitc,
        make_numpy=lambda: lambda x, m: ((x - m[:, None]) ** 2).mean(axis=1),
        make_torch=_torch(lambda torch, F: lambda x, m: ((x - m[:, None]) ** 2).mean(dim=1)),
    )


S = {"m": 512, "k": 512, "n": 512}
HEADS = {"b": 1, "h": 12, "q": 128, "k": 128, "d": 64}  # BERT-base's 12 heads at 128 tokens
HANDWRITTEN = [
    _einsum_workload("gemm-ab", "mk,kn->mn", S, "GEMM A·B"),
    _einsum_workload("gemm-atb", "km,kn->mn", S, "GEMM Aᵀ·B"),
    _einsum_workload("gemm-abt", "mk,nk->mn", S, "GEMM A·Bᵀ"),
    _einsum_workload("gemm-atbt", "km,nk->mn", S, "GEMM Aᵀ·Bᵀ"),
    _einsum_workload("heads-scores", "bhqd,bhkd->bhqk", HEADS, "attention scores"),
    _einsum_workload("heads-values", "bhqk,bhkd->bhqd", HEADS, "attention values"),
    _einsum_workload("contract-3d", "bsk,kn->bsn", {"b": 4, "s": 128, "k": 768, "n": 768}, "3-D x 2-D"),
    _einsum_workload("linear-3d", "bsk,nk->bsn", {"b": 4, "s": 128, "k": 768, "n": 768}, "3-D x a [N, K] weight"),
    _einsum_workload("gemm-tall", "mk,kn->mn", {"m": 8192, "k": 64, "n": 64}, "tall-skinny GEMM"),
    _einsum_workload("gemm-tiny", "mk,kn->mn", {"m": 16, "k": 16, "n": 16}, "tiny GEMM"),
    conv_nhwc("conv-nhwc", 56, 64, 64),
    grouped_conv("conv-grouped", 28, 128, 4),
    grouped_conv("conv-depthwise", 56, 128, 128),
    matmul_bias_gelu("matmul-bias-gelu", 256, 768, 768),
    variance("variance", 1024, 1024),
]
