"""Sizes known only when the model runs (torch.export's unbacked symbols: the rows routed to
each expert of a mixture of experts, in the sweep's jetmoe and higgs_audio_v2): the calls that
make or read such a value run through PyTorch, and the rest of the model compiles. Before,
the import raised (TypeError: Cannot convert symbols to int) and the whole model ran through
PyTorch. The target is pinned (8 float lanes)."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"


class Routed(nn.Module):
    """The rows whose first feature is positive, through an activation, added back in place."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        rows = torch.nonzero(h[:, 0] > 0).squeeze(1)
        routed = torch.relu(h[rows]) * 2
        return torch.tanh(torch.zeros_like(h).index_add(0, rows, routed)) + 1


class Split(nn.Module):
    """Split by counts the model reads from a tensor (torch.split(x, counts.tolist()))."""

    def forward(self, x, counts):
        parts = torch.split(x, counts.tolist())
        return torch.cat([p.sum(0, keepdim=True) * (k + 1) for k, p in enumerate(parts)]) + 1


def compiled_clean(model, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tc.compile(model, args, target=AVX2, db=False)
    assert not [w for w in caught if issubclass(w.category, tc.CompilerFallbackWarning)]
    assert not compiled.fallbacks
    return compiled


def check(compiled, model, args):
    with torch.no_grad():
        expected = model(*args)
    np.testing.assert_allclose(compiled(*args).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_values_of_run_time_sizes_run_through_pytorch_and_the_rest_compiles():
    torch.manual_seed(0)
    model = Routed().eval()
    compiled = compiled_clean(model, (torch.randn(6, 8),))
    ops = {n.op for n in compiled.graph.nodes}
    assert "dense" in ops and "fused" in ops  # the projection and tanh(.) + 1 are minitc's kernels
    sizes = {n.name: n.shape for n in compiled.graph.nodes if n.op == "torch"}
    assert any(-1 in shape for shape in sizes.values())  # the routed rows: a size PyTorch finds
    counts = set()
    for _ in range(4):  # other inputs route other numbers of rows
        x = torch.randn(6, 8)
        counts.add(int((model.fc(x)[:, 0] > 0).sum()))
        check(compiled, model, (x,))
    assert len(counts) > 1


def test_sizes_read_from_a_tensor_are_taken_when_the_model_runs():
    torch.manual_seed(0)
    model = Split()
    compiled = compiled_clean(model, (torch.randn(6, 8), torch.tensor([2, 4])))
    check(compiled, model, (torch.randn(6, 8), torch.tensor([2, 4])))
    check(compiled, model, (torch.randn(6, 8), torch.tensor([5, 1])))
