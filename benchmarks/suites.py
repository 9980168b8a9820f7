"""Workloads and suites: each workload is one operator run three ways (minitc, numpy, torch).

A `Workload` makes its own inputs and one callable per implementation:

    make_inputs(rng) -> tuple of numpy arrays, in the order of the minitc placeholders
    make_minitc()    -> the output Tensor (built with `tc.build`, i.e. the operator's default
                        schedule) or a Schedule; its placeholders are created in input order
    make_numpy()     -> fn(*arrays) -> ndarray: the reference every result is checked against
    make_torch()     -> fn(*tensors) -> tensor (CPU, torch.from_numpy views of the inputs)

`kind` says how a run is rated: "compute" in GFLOP/s against the measured FMA peak, "memory"
in GB/s against the measured STREAM-triad bandwidth; `work` is the FLOPs or the bytes of one
call (bytes: every input read once plus every output written once).

`SUITES` maps a suite name to its workloads; add a suite by adding an entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import minitc as tc

F32 = "float32"


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    kind: str  # "compute" or "memory"
    work: float  # FLOPs (compute) or bytes (memory) per call
    make_inputs: Callable
    make_minitc: Callable
    make_numpy: Callable
    make_torch: Callable | None = None
    rtol: float = 1e-3  # result check: |minitc - numpy| <= atol * max|numpy| + rtol * |numpy|
    atol: float = 1e-4

    def __post_init__(self):
        if self.kind not in ("compute", "memory"):
            raise ValueError(f"workload {self.name}: kind must be 'compute' or 'memory', not {self.kind!r}")

    @property
    def unit(self) -> str:
        return "GFLOP/s" if self.kind == "compute" else "GB/s"


def _normal(*shapes):
    """make_inputs for standard-normal float32 arrays of the given shapes."""
    return lambda rng: tuple(rng.standard_normal(s, dtype=np.float32) for s in shapes)


def _placeholders(*shapes):
    return [tc.placeholder(s, F32, name=n) for s, n in zip(shapes, "ABCDEFGH")]


def _size(*shapes) -> int:
    return sum(int(np.prod(s)) for s in shapes)


def _torch(fn):
    """make_torch: `fn(torch, F)` returns the callable; torch is imported only when used."""

    def make():
        import torch
        import torch.nn.functional as F

        return fn(torch, F)

    return make


# ---------------------------------------------------------------------------------------------
# workload makers


def matmul(name: str, n: int, m: int | None = None, k: int | None = None) -> Workload:
    m, k = m or n, k or n
    return Workload(
        name,
        f"matmul {n}x{k} @ {k}x{m}",
        "compute",
        2.0 * n * m * k,
        make_inputs=_normal((n, k), (k, m)),
        make_minitc=lambda: tc.ops.matmul(*_placeholders((n, k), (k, m))),
        make_numpy=lambda: lambda a, b: a @ b,
        make_torch=_torch(lambda torch, F: torch.matmul),
    )


def batch_matmul(name: str, batch: int, m: int, k: int, n: int) -> Workload:
    return Workload(
        name,
        f"batch_matmul {batch} x ({m}x{k})·({k}x{n})",
        "compute",
        2.0 * batch * m * n * k,
        make_inputs=_normal((batch, m, k), (batch, k, n)),
        make_minitc=lambda: tc.ops.batch_matmul(*_placeholders((batch, m, k), (batch, k, n))),
        make_numpy=lambda: np.matmul,
        make_torch=_torch(lambda torch, F: torch.bmm),
    )


def im2col_conv2d(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Stride-1 NCHW/KCRS convolution as im2col (a strided window view, copied into a
    [C*R*S, N*OH*OW] matrix) followed by one GEMM."""
    n, c, _, _ = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))  # n c oh ow r s
    oh, ow = win.shape[2], win.shape[3]
    cols = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(c * r * s, n * oh * ow)
    out = w.reshape(k, c * r * s) @ cols  # k, n*oh*ow
    return np.ascontiguousarray(out.reshape(k, n, oh, ow).transpose(1, 0, 2, 3))


def conv2d(name: str, n: int, c: int, hw: int, k: int, rs: int, pad: int) -> Workload:
    x_shape, w_shape = (n, c, hw, hw), (k, c, rs, rs)
    out_hw = hw + 2 * pad - rs + 1
    return Workload(
        name,
        f"conv2d N={n} C={c} {hw}x{hw} K={k} {rs}x{rs} s1 p{pad}",
        "compute",
        2.0 * n * k * out_hw * out_hw * c * rs * rs,
        make_inputs=_normal(x_shape, w_shape),
        make_minitc=lambda: tc.ops.conv2d(*_placeholders(x_shape, w_shape), stride=1, padding=pad),
        make_numpy=lambda: lambda x, w: im2col_conv2d(x, w, pad),
        make_torch=_torch(lambda torch, F: lambda x, w: F.conv2d(x, w, padding=pad)),
    )


def dense_relu(name: str, m: int, k: int, n: int) -> Workload:
    return Workload(
        name,
        f"dense {m}x{k}->{n} + bias + relu (fused in minitc)",
        "compute",
        2.0 * m * n * k,
        make_inputs=_normal((m, k), (n, k), (n,)),
        make_minitc=lambda: tc.ops.dense(*_placeholders((m, k), (n, k), (n,)), activation="relu"),
        make_numpy=lambda: lambda x, w, b: np.maximum(x @ w.T + b, 0),
        make_torch=_torch(lambda torch, F: lambda x, w, b: F.relu(F.linear(x, w, b))),
    )


def softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax(name: str, rows: int, cols: int) -> Workload:
    return Workload(
        name,
        f"softmax over the last axis of {rows}x{cols}",
        "memory",
        4.0 * 2 * rows * cols,
        make_inputs=_normal((rows, cols)),
        make_minitc=lambda: tc.ops.softmax(*_placeholders((rows, cols)), axis=-1),
        make_numpy=lambda: softmax_np,
        make_torch=_torch(lambda torch, F: lambda x: torch.softmax(x, -1)),
    )


def scale_shift_relu(name: str, n: int, a: float = 1.5, b: float = -0.25) -> Workload:
    def minitc_graph():
        (X,) = _placeholders((n,))
        return tc.compute((n,), lambda i: tc.maximum(X[i] * a + b, 0.0), name="scale_shift_relu")

    return Workload(
        name,
        f"y = relu(x*{a} + {b}) over {n} floats",
        "memory",
        4.0 * 2 * n,
        make_inputs=_normal((n,)),
        make_minitc=minitc_graph,
        make_numpy=lambda: lambda x: np.maximum(x * np.float32(a) + np.float32(b), 0),
        make_torch=_torch(lambda torch, F: lambda x: torch.relu(x * a + b)),
    )


def row_sum(name: str, rows: int, cols: int) -> Workload:
    return Workload(
        name,
        f"row sums of {rows}x{cols}",
        "memory",
        4.0 * _size((rows, cols), (rows,)),
        make_inputs=_normal((rows, cols)),
        make_minitc=lambda: tc.ops.sum(*_placeholders((rows, cols)), axis=1),
        make_numpy=lambda: lambda x: x.sum(1),
        make_torch=_torch(lambda torch, F: lambda x: x.sum(1)),
    )


# ---------------------------------------------------------------------------------------------
# suites

CPU_CORE = [
    matmul("matmul-512", 512),
    matmul("matmul-1024", 1024),
    batch_matmul("bmm-bert", 12, 128, 64, 128),
    conv2d("conv-resnet", 1, 64, 56, 64, 3, 1),
    dense_relu("dense-bert-ffn", 128, 768, 3072),
    softmax("softmax-bert", 1536, 128),
    scale_shift_relu("eltwise-4m", 4 * 2**20),
    row_sum("rowsum-4k", 4096, 4096),
]

SMOKE = [
    matmul("matmul-64", 64),
    conv2d("conv-small", 1, 8, 12, 8, 3, 1),
    dense_relu("dense-small", 16, 32, 48),
    softmax("softmax-small", 64, 32),
    scale_shift_relu("eltwise-64k", 2**16),
    row_sum("rowsum-256", 256, 256),
]

SUITES: dict = {"cpu-core": CPU_CORE, "smoke": SMOKE}


def select(suite: str, names=None) -> list:
    """The workloads of `suite`, or only those named (in the given order). Raises KeyError with
    a message listing what exists."""
    if suite not in SUITES:
        raise KeyError(f"unknown suite {suite!r}; available: {', '.join(SUITES)}")
    return pick(SUITES[suite], names, suite)


def pick(workloads: list, names, suite: str) -> list:
    """Those of `workloads` (anything with a `name`) that `names` names, in that order, or all
    of them when it names none; KeyError listing the names of `suite` otherwise."""
    by_name = {w.name: w for w in workloads}
    unknown = [n for n in names or () if n not in by_name]
    if unknown:
        raise KeyError(
            f"unknown workload(s) {', '.join(map(repr, unknown))} in suite {suite!r}; available: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names] if names else list(workloads)
