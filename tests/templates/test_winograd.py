"""Winograd F(2x2, 3x3) convolutions (minitc/ops/winograd.py, templates/winograd.py): the kernel
against numpy's direct convolution, its template's choices for pinned targets, and the model
front end's rule for when a convolution runs this way."""

import numpy as np
import pytest

import minitc as tc
from minitc.errors import DTypeError, ShapeError
from minitc.ops import reference as ref
from minitc.target import parse_target
from minitc.templates import DEFAULTS, load_templates

AVX2 = "llvm -mcpu=znver2 -num-cores=2"
AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"


def _case(rng, n, c, hw, k, pad, cb, kb):
    x = rng.standard_normal((n, c, *hw), dtype=np.float32)
    w = rng.standard_normal((k, c, 3, 3), dtype=np.float32)
    direct = ref.to_nchwc(ref.conv2d(x, w, padding=pad), kb)
    return ref.to_nchwc(x, cb), tc.ops.winograd_weights(w, cb, kb), direct


@pytest.mark.parametrize(
    "n, c, hw, k, pad, cb, kb",
    [
        (1, 16, (14, 14), 32, 1, 16, 16),  # a ResNet layer's shape, scaled down
        (1, 8, (7, 7), 8, 1, 8, 8),  # odd: the last tile row and column are cut
        (2, 8, (9, 6), 16, 0, 4, 8),  # no padding, a batch, different blocks in and out
        (1, 8, (5, 5), 8, (1, 0), 8, 8),  # padding per side
    ],
)
def test_the_kernel_gives_the_direct_convolution(n, c, hw, k, pad, cb, kb):
    x, u, direct = _case(np.random.default_rng(0), n, c, hw, k, pad, cb, kb)
    X, U = tc.placeholder(x.shape, "float32", name="X"), tc.placeholder(u.shape, "float32", name="U")
    Y = tc.ops.conv2d_winograd_nchwc(X, U, padding=pad)
    assert Y.shape == direct.shape
    for schedule in (Y, tc.Schedule(Y)):  # the template, the naive loop nest
        np.testing.assert_allclose(tc.build(schedule)(x, u), direct, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ref.conv2d_winograd_nchwc(x, u, pad), direct, rtol=1e-4, atol=1e-4)


def test_an_epilogue_is_applied_as_the_tiles_are_stored():
    x, u, direct = _case(np.random.default_rng(1), 1, 16, (10, 10), 16, 1, 16, 16)
    bias = np.random.default_rng(2).standard_normal((1, 1, 1, 1, 16), dtype=np.float32)
    X, U = tc.placeholder(x.shape, "float32", name="X"), tc.placeholder(u.shape, "float32", name="U")
    B = tc.placeholder(bias.shape, "float32", name="B")
    Y = tc.ops.relu(tc.ops.add(tc.ops.conv2d_winograd_nchwc(X, U, padding=1), B))
    out = tc.compute(Y.shape, lambda *i: Y[i], name="epilogue", tag="conv2d_winograd_nchwc")
    s = tc.templates.template_schedule(out, "llvm")
    text = str(tc.lower(s))
    # buffers for the padding, the input transform and the products only: the output transform,
    # the bias and the relu are one stage
    assert text.count("alloc(") == 3 and text.count("parallel(") == 4
    np.testing.assert_allclose(tc.build(s)(x, u, bias), np.maximum(direct + bias, 0), rtol=1e-4, atol=1e-4)


def test_shapes_are_checked():
    X = tc.placeholder((1, 2, 8, 8, 8), "float32", name="X")
    with pytest.raises(ShapeError, match=r"U must be \[4, 4, K/kb, 2, 8, kb\]"):
        tc.ops.conv2d_winograd_nchwc(X, tc.placeholder((3, 3, 2, 2, 8, 8), "float32", name="U"))
    with pytest.raises(DTypeError):
        tc.ops.conv2d_winograd_nchwc(
            tc.placeholder((1, 2, 8, 8, 8), "int32", name="X"), tc.placeholder((4, 4, 2, 2, 8, 8), "int32", name="U")
        )
    with pytest.raises(ShapeError, match=r"\[K, C, 3, 3\]"):
        tc.ops.winograd_weights(np.zeros((8, 8, 5, 5), np.float32), 8, 8)
    with pytest.raises(ShapeError, match="in blocks of"):
        tc.ops.winograd_weights(np.zeros((12, 8, 3, 3), np.float32), 8, 8)


@pytest.mark.parametrize("target, block, expected", [(AVX2, 8, (4, 2)), (AVX512, 16, (2, 7))])
def test_the_micro_kernel_fits_the_targets_registers(target, block, expected):
    """kb output blocks x pixels tiles of accumulators, as conv2d_nchwc's 1x1 micro-kernel."""
    load_templates()
    X = tc.placeholder((1, 64 // block, 28, 28, block), "float32", name="X")
    U = tc.placeholder((4, 4, 64 // block, 64 // block, block, block), "float32", name="U")
    Y = tc.ops.conv2d_winograd_nchwc(X, U, padding=1)
    s = tc.Schedule(Y)
    params = DEFAULTS["conv2d_winograd_nchwc"](s, s.state.outputs[0], parse_target(target))
    assert (params["kb"], params["pixels"]) == expected


def test_the_model_front_end_takes_it_where_the_tiles_amortise_the_weights(tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.wide = nn.Conv2d(16, 16, 3, 1, 1)  # 16x16 output: 64 tiles
            self.down = nn.Conv2d(16, 16, 3, 2, 1)  # stride 2
            self.small = nn.Conv2d(16, 16, 3, 1, 1)  # 8x8 output: 16 tiles

        def forward(self, x):
            y = torch.relu(self.wide(x)) + x
            return self.small(torch.relu(self.down(y)))

    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(1, 16, 16, 16)
    target, block = (AVX512, 16) if parse_target(AVX512).is_host_compatible else (AVX2, 8)  # kernels run here
    compiled = tc.compile(model, (x,), target=target)
    ops = [[b.op for b in (n.body or [n])] for n in compiled.graph.nodes]
    winograd = [o for o in ops if "conv2d_winograd_nchwc" in o]
    assert len(winograd) == 1 and "relu" in winograd[0] and "add" in winograd[0]  # its epilogue fused
    assert sum(o.count("conv2d_nchwc") for o in ops) == 2
    (node,) = [n for n in compiled.graph.nodes if "conv2d_winograd_nchwc" in [b.op for b in (n.body or [n])]]
    assert compiled.graph.constants[node.inputs[1]].shape == (4, 4, 16 // block, 16 // block, block, block)
    with torch.no_grad():
        expected = model(x)
    np.testing.assert_allclose(compiled(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
    from minitc.frontend import load

    compiled.save(tmp_path / "block.minitc")  # the transformed weight and the task survive a round trip
    loaded = load(tmp_path / "block.minitc")
    assert str(loaded.graph) == str(compiled.graph)
    np.testing.assert_array_equal(loaded(x).numpy(), compiled(x).numpy())
