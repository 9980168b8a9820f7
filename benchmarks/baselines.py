"""numpy and torch baselines for any `tc.ops` call, so that `minitc tune <op> --shape ...` can be
benchmarked like a suite workload: `workload_for(call)` turns a `minitc.ops.calls.OpCall`
into a `workloads.Workload`.

The numpy baselines compute in float32, the way a user would write them (BLAS for products,
im2col + GEMM for convolutions, sliding windows for pooling); `tc.ops.reference` computes in
float64 for checking, which would make numpy look slower than it is. Torch baselines are the
CPU torch functions (torch.nn.functional for nn ops).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minitc.benchmarks.suites import Workload, _torch, softmax_np


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _windows(x, kh, kw, sh, sw, dh=1, dw=1):
    """[N, C, OH, OW, kh, kw] view of an already padded NCHW x."""
    win = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def conv2d_np(x, w, stride=1, padding=0, dilation=1):
    """im2col (a strided window view copied into [C*R*S, N*OH*OW]) and one float32 GEMM."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c = x.shape[:2]
    k, _, r, s = w.shape
    win = _windows(np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))), r, s, sh, sw, dh, dw)
    oh, ow = win.shape[2:4]
    cols = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(c * r * s, n * oh * ow)
    out = w.reshape(k, c * r * s) @ cols
    return np.ascontiguousarray(out.reshape(k, n, oh, ow).transpose(1, 0, 2, 3))


def depthwise_np(x, w, stride=1, padding=0, dilation=1):
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    mult = w.shape[0] // x.shape[1]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    if mult > 1:
        xp = np.repeat(xp, mult, axis=1)
    win = _windows(xp, w.shape[-2], w.shape[-1], sh, sw, dh, dw)
    return np.einsum("nkhwrs,krs->nkhw", win, w.reshape(w.shape[0], w.shape[-2], w.shape[-1]), optimize=True)


def pool_np(x, kernel, stride=None, padding=0, kind="max"):
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    win = _windows(xp, kh, kw, sh, sw)
    return win.max(axis=(4, 5)) if kind == "max" else win.mean(axis=(4, 5), dtype=np.float32)


def layer_norm_np(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + np.float32(eps)) * gamma + beta


def _erf32(x):
    """erf without scipy (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7), in float32."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t * np.exp(-x * x)
    return (np.sign(x) * y).astype(x.dtype)


_ACT_NP = {
    None: lambda y: y,
    "relu": lambda y: np.maximum(y, 0),
    "gelu": lambda y: 0.5 * y * (1 + _erf32(y * np.float32(0.7071067811865476))),
    "sigmoid": lambda y: 1 / (1 + np.exp(-y)),
    "tanh": np.tanh,
}
_BINARY_NP = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
_REDUCE_NP = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}


def numpy_fn(op: str, kw: dict):
    """A float32 numpy implementation of `tc.ops.<op>(arrays..., **kw)`."""
    if op in ("matmul", "batch_matmul"):
        ta, tb = kw.get("transpose_a"), kw.get("transpose_b")
        t = (lambda a: a.T) if op == "matmul" else (lambda a: np.swapaxes(a, 1, 2))
        return lambda a, b: np.matmul(t(a) if ta else a, t(b) if tb else b)
    if op == "dense":
        act = _ACT_NP[kw.get("activation")]
        return lambda x, w, b=None: act(x @ w.T + b if b is not None else x @ w.T)
    if op == "conv2d":
        return lambda x, w: conv2d_np(x, w, **kw)
    if op == "depthwise_conv2d":
        return lambda x, w: depthwise_np(x, w, **kw)
    if op in ("max_pool2d", "avg_pool2d"):
        return lambda x: pool_np(x, **kw, kind=op[:3])
    if op == "softmax":
        ax = kw.get("axis", -1)
        return softmax_np if ax in (-1,) else (lambda x: np.moveaxis(softmax_np(np.moveaxis(x, ax, -1)), -1, ax))
    if op == "layer_norm":
        return lambda x, g, b: layer_norm_np(x, g, b, kw.get("eps", 1e-5))
    if op in _BINARY_NP:
        return _BINARY_NP[op]
    if op in ("relu", "gelu", "sigmoid", "tanh"):
        return _ACT_NP[op]
    if op == "exp":
        return np.exp
    if op == "bias_add":
        ax = kw.get("axis", 1)
        return lambda x, b: x + b.reshape([-1 if d == ax % x.ndim else 1 for d in range(x.ndim)])
    if op in _REDUCE_NP:
        fn, axis, keep = _REDUCE_NP[op], kw.get("axis"), kw.get("keepdims", False)

        def reduce(x):
            out = fn(x, axis=axis, keepdims=keep)
            return out.reshape(1) if np.ndim(out) == 0 else out  # minitc: at least 1-D

        return reduce
    raise KeyError(f"no numpy baseline for op {op!r}")


def torch_maker(op: str, kw: dict):
    """make_torch for `tc.ops.<op>(..., **kw)` (torch imported only when called)."""

    def make(torch, F):
        if op in ("matmul", "batch_matmul"):
            ta, tb = kw.get("transpose_a"), kw.get("transpose_b")
            return lambda a, b: torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
        if op == "dense":
            act = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
            a = act[kw.get("activation")]
            return lambda x, w, b=None: a(F.linear(x, w, b))
        if op == "conv2d":
            return lambda x, w: F.conv2d(x, w, stride=kw["stride"], padding=kw["padding"], dilation=kw["dilation"])
        if op == "depthwise_conv2d":
            return lambda x, w: F.conv2d(
                x, w, stride=kw["stride"], padding=kw["padding"], dilation=kw["dilation"], groups=x.shape[1]
            )
        if op in ("max_pool2d", "avg_pool2d"):
            pool = F.max_pool2d if op == "max_pool2d" else F.avg_pool2d
            return lambda x: pool(x, kw["kernel"], stride=kw.get("stride"), padding=kw.get("padding", 0))
        if op == "softmax":
            return lambda x: torch.softmax(x, kw.get("axis", -1))
        if op == "layer_norm":
            return lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, eps=kw.get("eps", 1e-5))
        if op in ("add", "sub", "mul", "div", "maximum", "minimum"):
            return getattr(torch, op)
        if op in ("relu", "gelu", "sigmoid", "tanh", "exp"):
            return getattr(F, op) if op in ("relu", "gelu") else getattr(torch, op)
        if op == "bias_add":
            ax = kw.get("axis", 1)
            return lambda x, b: x + b.reshape([-1 if d == ax % x.dim() else 1 for d in range(x.dim())])
        if op in ("sum", "max", "min", "mean"):
            axis, keep = kw.get("axis"), kw.get("keepdims", False)
            fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
            if axis is None and not keep:
                return lambda x: fn(x).reshape(1)
            return lambda x: fn(x, dim=tuple(range(x.dim())) if axis is None else axis, keepdim=keep)
        raise KeyError(f"no torch baseline for op {op!r}")

    return _torch(make)


def workload_for(call, name: str | None = None) -> Workload:
    """A benchmark Workload for an OpCall: compute-bound (rated in GFLOP/s) when the op's FLOPs
    are known, else memory-bound (GB/s, every input read and the output written once)."""
    kw = call.kwargs
    work = call.flops()
    kind = "compute" if work else "memory"
    if not work:
        work = float(call.bytes())
    shapes = call.shapes

    def make_inputs(rng):
        arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        if call.op == "div":  # keep divisors away from zero
            arrays[1] = np.abs(arrays[1]) + np.float32(0.5)
        return tuple(arrays)

    return Workload(
        name or call.label(),
        call.label(),
        kind,
        work,
        make_inputs=make_inputs,
        make_minitc=call.build,
        make_numpy=lambda: numpy_fn(call.op, kw),
        make_torch=torch_maker(call.op, kw),
    )
