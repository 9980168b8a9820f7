"""Straightforward Triton kernels for the gpu-core suite (benchmarks/gpu_core.py): the baseline a
user would write from Triton's tutorials, in float32 with IEEE products (`input_precision="ieee"`:
no TF32 tensor cores, like minitc and like torch with TF32 turned off).

    matmul(a, b)                        tutorial tiled GEMM (grouped tile order, autotuned tiles)
    linear(x, w, bias, activation)      the same GEMM on w.T with the bias and relu/gelu fused
    conv2d(x, w, stride, padding)       implicit GEMM on NCHW/KCRS (the im2col matrix is never built)
    softmax(x)                          one program per row, the whole row in registers

Every wrapper takes CUDA torch tensors and returns a new one. `config=` runs one fixed tile
configuration instead of the autotuner (the tests use it under TRITON_INTERPRET=1 on the CPU).
Needs `triton`; gpu_core.py imports this module only when Triton is installed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SQRT1_2 = tl.constexpr(0.7071067811865476)  # a jitted function may read only constexpr globals


def _config(bm, bn, bk, warps, stages, group=8):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group}, num_warps=warps, num_stages=stages
    )


# fp32 FMA tiles (the tutorial's list, minus the fp8/fp16-only shapes)
GEMM_CONFIGS = [
    _config(128, 128, 32, 8, 3),
    _config(128, 64, 32, 4, 4),
    _config(64, 128, 32, 4, 4),
    _config(64, 64, 32, 4, 4),
    _config(128, 128, 16, 8, 4),
    _config(32, 64, 32, 2, 5),
]
CONV_CONFIGS = [
    _config(128, 128, 32, 8, 3),
    _config(128, 64, 32, 4, 4),
    _config(64, 64, 32, 4, 4),
    _config(64, 32, 32, 2, 4),
]


@triton.jit
def _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":  # exact (erf) GELU, like torch.nn.functional.gelu
        acc = 0.5 * acc * (1.0 + tl.erf(acc * SQRT1_2))
    return acc


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C[M, N] = act(A[M, K] @ B[K, N] + bias[N]); any strides (B = W.T is a strided view)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row tiles share their B column panels while they are in L2
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows
    pid_n = (pid % group_size) // rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] % M) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] % N) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        remaining = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < remaining, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < remaining, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def conv2d_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    NB,
    C,
    H,
    W,
    K,
    OH,
    OW,
    stride,
    pad,
    R: tl.constexpr,
    S: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Implicit GEMM: Y[(n, oh, ow), k] = sum over (c, r, s) of X[n, c, oh*st-pad+r, ow*st-pad+s]
    * W[k, c, r, s]; rows of the GEMM are output pixels, columns output channels (contiguous
    NCHW x and KCRS w, NCHW y). Padding is a masked load."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    P = OH * OW
    M = NB * P
    CRS = C * R * S
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_idx = offs_m // P
    pix = offs_m % P
    ih0 = (pix // OW) * stride - pad
    iw0 = (pix % OW) * stride - pad
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, CRS, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        c = offs_k // (R * S)
        r = (offs_k % (R * S)) // S
        s = offs_k % S
        ih = ih0[:, None] + r[None, :]
        iw = iw0[:, None] + s[None, :]
        a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < CRS) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_ptr + ((n_idx[:, None] * C + c[None, :]) * H + ih) * W + iw, mask=a_mask, other=0.0)
        b_mask = (offs_k[:, None] < CRS) & (offs_n[None, :] < K)
        b = tl.load(w_ptr + offs_n[None, :] * CRS + offs_k[:, None], mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    y_ptrs = y_ptr + (n_idx[:, None] * K + offs_n[None, :]) * P + pix[:, None]
    tl.store(y_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < K))


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    """One row per program: max, exp, sum and scale with the row held in registers."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


_matmul_tuned = triton.autotune(configs=GEMM_CONFIGS, key=["M", "N", "K", "HAS_BIAS", "ACTIVATION"])(matmul_kernel)
_conv_tuned = triton.autotune(configs=CONV_CONFIGS, key=["NB", "C", "H", "W", "K", "stride", "pad"])(conv2d_kernel)


def _launch(kernel, tuned, config, grid, *args, **constexprs):
    """Run the autotuned kernel, or with `config` (a triton.Config) that one configuration."""
    if config is None:
        return tuned[grid](*args, **constexprs)
    return kernel[grid](*args, **constexprs, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


def _gemm(a, b, bias, activation, config):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    _launch(
        matmul_kernel,
        _matmul_tuned,
        config,
        grid,
        a,
        b,
        c,
        bias if bias is not None else c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=activation or "",
    )
    return c


def matmul(a, b, config=None):
    """a[M, K] @ b[K, N] in float32."""
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: inner sizes differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    return _gemm(a, b, None, None, config)


def linear(x, w, bias=None, activation=None, config=None):
    """act(x[M, K] @ w[N, K].T + bias[N]) with the epilogue fused; activation None/"relu"/"gelu"."""
    if activation not in (None, "relu", "gelu"):
        raise ValueError(f"linear: activation must be None, 'relu' or 'gelu', not {activation!r}")
    return _gemm(x, w.t(), bias, activation, config)


def conv2d(x, w, stride=1, padding=0, config=None):
    """NCHW x, KCRS w (contiguous), square stride and padding, no dilation."""
    x, w = x.contiguous(), w.contiguous()
    NB, C, H, W = x.shape
    K, C2, R, S = w.shape
    if C2 != C:
        raise ValueError(f"conv2d: x has {C} channels, w expects {C2}")
    OH, OW = (H + 2 * padding - R) // stride + 1, (W + 2 * padding - S) // stride + 1
    y = torch.empty((NB, K, OH, OW), device=x.device, dtype=torch.float32)

    def grid(meta):
        return (triton.cdiv(NB * OH * OW, meta["BLOCK_M"]), triton.cdiv(K, meta["BLOCK_N"]))

    _launch(conv2d_kernel, _conv_tuned, config, grid, x, w, y, NB, C, H, W, K, OH, OW, stride, padding, R=R, S=S)
    return y


def softmax(x, num_warps=None):
    """Softmax over the last axis of a 2-D tensor."""
    rows, cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    warps = num_warps or (4 if block <= 1024 else 8 if block <= 4096 else 16)
    softmax_kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK=block, num_warps=warps)
    return y
