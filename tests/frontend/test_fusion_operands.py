"""fuse_elementwise with an operand read twice, and with a dense layer viewed to 3-D next to
another elementwise producer (the sweep of issue 53: arcee, bitnet, fuyu, persimmon, rwkv...
square a ReLU, ergo and nemotron_h square a sum, doge, lasr, minimax and zaya add a scaled
residual to a projection). The pass raised or broke the graph, so it was skipped with a
CompilerFallbackWarning; now it fuses, nothing falls back, and the outputs match eager. The
target is pinned (8 float lanes)."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"


class SquaredReLUMLP(nn.Module):
    """up -> relu(.) ** 2 -> down (transformers' relu2): mul(r, r) reads a 2-D dense's epilogue."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)) ** 2)


class SquaredSum(nn.Module):
    """An elementwise value squared by mul(t, t), then more elementwise ops."""

    def forward(self, x):
        t = torch.tanh(x) + 1.0
        return torch.sigmoid(t * t)


class ScaledResidual(nn.Module):
    """w * e + proj(x), with the two operands of the add in either order: the dense is viewed
    to 3-D and the scaled residual is another elementwise producer of the full shape."""

    def __init__(self, dense_first: bool):
        super().__init__()
        self.proj, self.w = nn.Linear(16, 16), nn.Parameter(torch.randn(16))
        self.dense_first = dense_first

    def forward(self, x, e):
        scaled = self.w * e
        return self.proj(x) + scaled if self.dense_first else scaled + self.proj(x)


def compile_clean(model, args):
    """The model compiled with no CompilerFallbackWarning and no fallback, matching eager."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tc.compile(model, args, target=AVX2, db=False)
    warned = [str(w.message) for w in caught if issubclass(w.category, tc.CompilerFallbackWarning)]
    assert not warned and not compiled.fallbacks, warned
    with torch.no_grad():
        expected = model(*args)
    np.testing.assert_allclose(compiled(*args).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    return compiled


def kernels(compiled) -> list:
    """The op lists of the compiled graph's kernels (views are free)."""
    return [[b.op for b in n.body] if n.body else [n.op] for n in compiled.graph.nodes if n.op != "view"]


def test_a_squared_relu_joins_the_dense_epilogue():
    torch.manual_seed(0)
    compiled = compile_clean(SquaredReLUMLP().eval(), (torch.randn(1, 8, 16),))
    assert ["dense", "mul"] in kernels(compiled)  # the relu is the dense's activation


def test_a_value_squared_by_a_mul_is_one_kernel():
    torch.manual_seed(0)
    compiled = compile_clean(SquaredSum(), (torch.randn(2, 8, 16),))
    assert kernels(compiled) == [["tanh", "add", "mul", "sigmoid"]]


@pytest.mark.parametrize("dense_first", [True, False])
def test_a_viewed_dense_takes_the_add_and_the_other_producer_stays_apart(dense_first):
    torch.manual_seed(0)
    args = (torch.randn(1, 8, 16), torch.randn(1, 8, 16))
    compiled = compile_clean(ScaledResidual(dense_first).eval(), args)
    assert sorted(kernels(compiled)) == [["dense", "add"], ["mul"]]
