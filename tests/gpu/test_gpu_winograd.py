"""The Winograd convolution on NCHW data (tc.ops.conv2d_winograd) and its GPU template
(minitc/templates/gpu/winograd.py): against numpy's direct convolution in the simulator, its
three launches, the kernels through ptxas where nvcc is installed, and on a GPU where there is one."""

import re

import numpy as np
import pytest
from cuda_tools import cupy_usable, find_nvcc, ptxas_log

import minitc as tc
from minitc.ops import reference as ref_ops
from minitc.templates.gpu import GPU_DEFAULTS, GPU_TEMPLATES, bind_unbound, load_gpu_templates


def layer(N, C, H, W, K, padding=1, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((N, C, H, W)).astype("float32"), rng.standard_normal((K, C, 3, 3)).astype("float32")
    X, U = tc.placeholder((N, C, H, W), name="X"), tc.placeholder((4, 4, C, K), name="U")
    out = tc.ops.conv2d_winograd(X, U, padding=padding)
    return out, (x, tc.ops.winograd_weights_ck(w)), ref_ops.conv2d(x, w, padding=padding)


@pytest.mark.parametrize("shape", [(1, 8, 6, 6, 8), (2, 4, 7, 5, 12), (1, 16, 9, 9, 8), (2, 3, 8, 11, 5, 0)], ids=str)
def test_default_gpu_winograd_against_numpy(shape):
    """Even and odd output sizes (a tile cut at the edge), no padding, batches whose tiles form
    one column axis, channel counts the tiles do not divide."""
    out, arrays, want = layer(*shape)
    f = tc.build(out, target="cuda-sim", db=False)
    np.testing.assert_allclose(f(*arrays), want, rtol=1e-4, atol=1e-4)
    assert [launch.name.rsplit("_", 1)[-1] for launch in f.program.launches] == ["0", "1", "2"]


@pytest.mark.parametrize(
    "params",
    [
        dict(bm=16, bn=32, tm=4, tn=4, bk=8),
        dict(bm=32, bn=24, tm=8, tn=8, bk=16),  # partial tiles of channels and tiles
        dict(bm=8, bn=64, tm=2, tn=8, bk=32, shared=False),
    ],
)
def test_gpu_winograd_template_parameters_against_numpy(params):
    load_gpu_templates()
    out, arrays, want = layer(2, 12, 10, 9, 20)
    s = tc.Schedule(out)
    GPU_TEMPLATES["conv2d_winograd"](s, s.state.outputs[0], "cuda-sim", **params)
    bind_unbound(s)
    np.testing.assert_allclose(tc.build(s, target="cuda-sim", db=False)(*arrays), want, rtol=1e-4, atol=1e-4)


def test_gpu_winograd_propagates_nan_as_its_reference_does():
    """A NaN reaches every output of a 2x2 tile whose 4x4 patch holds it (the transforms add it),
    in the kernel as in reference.conv2d_winograd."""
    out, (x, u), _ = layer(1, 2, 6, 6, 3)
    x[0, 1, 2, 3] = np.nan
    got = tc.build(out, target="cuda-sim", db=False)(x, u)
    want = ref_ops.conv2d_winograd(x, u, padding=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).sum() > 9  # more outputs than the direct convolution's 3x3
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-4, atol=1e-4)


def test_winograd_defaults_prefer_column_tiles_that_divide_the_tiles():
    load_gpu_templates()
    for (N, C, H, K), bn in (((8, 256, 14, 256), 56), ((1, 128, 28, 128), 28), ((1, 512, 7, 512), 16)):
        X, U = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((4, 4, C, K), name="U")
        s = tc.Schedule(tc.ops.conv2d_winograd(X, U, padding=1))
        params = GPU_DEFAULTS["conv2d_winograd"](s, s.state.outputs[0], None)
        tiles = N * ((H + 1) // 2) ** 2
        assert params["bn"] == bn and tiles % params["bn"] == 0, params


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("shape", [(8, 256, 14, 256), (1, 64, 56, 64), (1, 512, 7, 512)], ids=str)
def test_default_winograd_kernels_keep_their_tiles_in_registers(shape, tmp_path):
    N, C, H, K = shape
    X, U = tc.placeholder((N, C, H, H), name="X"), tc.placeholder((4, 4, C, K), name="U")
    log = ptxas_log(tc.codegen(tc.ops.conv2d_winograd(X, U, padding=1), "cuda", db=False), tmp_path)
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == 3, log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


@pytest.mark.cuda
@pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("shape", [(2, 16, 14, 15, 24), (8, 64, 14, 14, 64)], ids=str)
def test_winograd_on_the_gpu(shape):
    out, arrays, want = layer(*shape)
    got = tc.build(out, target="cuda", db=False)(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
