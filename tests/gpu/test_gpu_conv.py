"""The GPU conv2d template (minitc/templates/gpu/conv.py): defaults and parameters against
numpy in the simulator, and the default kernel through nvcc/ptxas where they are installed."""

import re

import numpy as np
import pytest
from cuda_tools import find_nvcc, ptxas_log

import minitc as tc
from minitc.ops import reference as ref_ops
from minitc.templates.gpu.conv import conv2d_defaults


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


@pytest.mark.parametrize(
    "shape",
    [(1, 3, 13, 13, 8, 3, 1), (2, 16, 6, 20, 24, 3, 1), (1, 8, 11, 11, 12, 1, 1), (1, 4, 15, 15, 8, 3, 2)],
)
def test_default_gpu_conv2d_against_numpy(shape):
    """The default blocks (whole rows, halved while there are fewer blocks than SMs) on shapes
    whose rows and channels the tiles do not divide (guarded threads), 1x1 and strided."""
    N, C, H, Wd, K, R, stride = shape
    X, W = tc.placeholder((N, C, H, Wd), name="X"), tc.placeholder((K, C, R, R), name="W")
    out = tc.ops.conv2d(X, W, stride=stride, padding=R // 2)
    s = tc.Schedule(out)
    params = conv2d_defaults(s, s.state.outputs[0], "cuda-sim")
    assert params["kt"] * params["oht"] * params["wt"] <= 1024
    f = tc.build(out, target="cuda-sim")
    x, w = rand(N, C, H, Wd), rand(K, C, R, R)
    np.testing.assert_allclose(f(x, w), ref_ops.conv2d(x, w, stride=stride, padding=R // 2), rtol=1e-4, atol=1e-4)


def test_default_gpu_conv2d_on_crsk_weights_against_numpy():
    """Weights stored [C, R, S, K] (`weight_layout="CRSK"`): the shared tile copies them as
    they are, output channels fastest (coalesced global reads)."""
    X, W = tc.placeholder((2, 16, 9, 9), name="X"), tc.placeholder((16, 3, 3, 24), name="W")
    f = tc.build(tc.ops.conv2d(X, W, padding=1, weight_layout="CRSK"), target="cuda-sim", db=False)
    x, w = rand(2, 16, 9, 9), rand(16, 3, 3, 24)
    want = ref_ops.conv2d(x, w, padding=1, weight_layout="CRSK")
    np.testing.assert_allclose(f(x, w), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k_last,unroll", [("1", "1"), ("0", "1"), ("1", "0")])
@pytest.mark.parametrize(
    "params",
    [
        dict(kt=2, vk=4, wt=3, vw=2, bc=4, oht=2, ohb=2),  # rows and columns in partial tiles
        dict(kt=4, vk=2, wt=4, vw=1, bc=2, oht=3, ohb=1),  # vk=2: the weight tile stays [K, C, R, S]
        dict(kt=8, vk=4, wt=7, vw=2, bc=4, oht=7, ohb=2),
        dict(kt=2, vk=8, wt=2, vw=4, bc=8, oht=4, ohb=3, shared=False),
    ],
)
def test_gpu_conv2d_template_parameters_against_numpy(params, k_last, unroll, monkeypatch):
    """Blocks of several rows and threads of several rows, columns and channels, with the weight
    tile k-last (float4 reads of vk channels) or k-first, the channel step unrolled or a loop."""
    from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, load_gpu_templates

    monkeypatch.setenv("MINITC_GPU_CONV_K_LAST", k_last)
    monkeypatch.setenv("MINITC_GPU_UNROLL_K", unroll)
    load_gpu_templates()
    X, W = tc.placeholder((2, 16, 14, 13), name="X"), tc.placeholder((16, 16, 3, 3), name="W")
    out = tc.ops.conv2d(X, W, padding=1)
    s = tc.Schedule(out)
    GPU_TEMPLATES["conv2d"](s, s.state.outputs[0], "cuda-sim", **params)
    bind_unbound(s)
    f = tc.build(s, target="cuda-sim", db=False)
    x, w = rand(2, 16, 14, 13), rand(16, 16, 3, 3)
    np.testing.assert_allclose(f(x, w), ref_ops.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    vectors = "float4" in tc.codegen(s, "cuda", db=False)
    assert vectors == (k_last == "1" and params["vk"] % 4 == 0 and params.get("shared", True))


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize(
    "layer",
    [(1, 128, 28, 128, 3), (1, 64, 56, 64, 3), (1, 256, 56, 64, 1), (1, 512, 7, 512, 3), (8, 256, 14, 256, 3)],
    ids=["resnet18-c3", "conv-resnet-56", "1x1-256-64", "resnet18-c5", "resnet50-l3-b8"],
)
def test_default_kernel_keeps_its_tiles_in_registers(layer, tmp_path):
    """Batch-1 layers, whose register tile indices hold divisions of the block index that the
    loop ranges make trivial (they went to the stack until lowering folded them), the float4
    weight rows and the unrolled channel step: no stack frame, no spills."""
    N, C, HW, K, R = layer
    X, W = tc.placeholder((N, C, HW, HW), name="X"), tc.placeholder((K, C, R, R), name="W")
    log = ptxas_log(tc.codegen(tc.ops.conv2d(X, W, padding=R // 2), "cuda", db=False), tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


# -- the implicit GEMM (tc.ops.conv2d_gemm) -----------------------------------------------------


def implicit_gemm(N, C, H, K, R, stride=1, padding=None, dilation=1):
    X, W = tc.placeholder((N, C, H, H + 1), name="X"), tc.placeholder((K, C * R * R), name="W")
    pad = R // 2 if padding is None else padding
    out = tc.ops.conv2d_gemm(X, W, R, stride=stride, padding=pad, dilation=dilation)
    x, w = rand(N, C, H, H + 1), rand(K, C * R * R)
    return out, (x, w), ref_ops.conv2d_gemm(x, w, R, stride, pad, dilation)


@pytest.mark.parametrize("layer", [(2, 8, 9, 12, 3), (1, 4, 10, 8, 3, 2), (1, 16, 7, 32, 1), (1, 3, 11, 4, 3, 1, 2, 2)])
def test_implicit_gemm_defaults_against_numpy(layer):
    """Padded, strided, 1x1 and dilated windows; pixels that the tiles do not divide."""
    out, arrays, want = implicit_gemm(*layer)
    np.testing.assert_allclose(tc.build(out, target="cuda-sim", db=False)(*arrays), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "params",
    [
        dict(bm=16, bn=32, tm=4, tn=4, bk=8),
        dict(bm=32, bn=24, tm=8, tn=8, bk=16),  # partial tiles of channels and pixels, tn=8 rows
        dict(bm=8, bn=64, tm=2, tn=8, bk=32, shared=False),
    ],
)
def test_implicit_gemm_template_parameters_against_numpy(params):
    from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, load_gpu_templates

    load_gpu_templates()
    out, arrays, want = implicit_gemm(2, 6, 8, 20, 3)
    s = tc.Schedule(out)
    GPU_TEMPLATES["conv2d_gemm"](s, s.state.outputs[0], "cuda-sim", **params)
    bind_unbound(s)
    np.testing.assert_allclose(tc.build(s, target="cuda-sim", db=False)(*arrays), want, rtol=1e-4, atol=1e-4)
    src = tc.codegen(s, "cuda", db=False)
    assert "conv2d_gemm_col[" not in src  # the im2col matrix is computed into the shared tile, never stored


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("batch", [8, 1])
def test_implicit_gemm_default_kernel_keeps_its_tiles_in_registers(batch, tmp_path):
    """ResNet-50's layer3 3x3 convolution at batch 8 and 1: at batch 1 the batch index is the
    constant 0, so that it does not make the register tile's index dynamic (a stack frame)."""
    X, W = tc.placeholder((batch, 256, 14, 14), name="X"), tc.placeholder((256, 256 * 9), name="W")
    src = tc.codegen(tc.ops.conv2d_gemm(X, W, 3, padding=1), "cuda", db=False)
    log = ptxas_log(src, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log
