"""torch.roll (Swin's shifted windows) as minitc index math (minitc/frontend/rolls.py): export's
index_select with a rotated constant index becomes a `roll` node that fuses with the window
partition around it, and the compiled model matches eager; other gathers stay in PyTorch. The
target is pinned, so nothing depends on the host CPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend import unsupported  # noqa: E402
from minitc.frontend.rolls import rotation  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

TARGET = "llvm -mcpu=znver2 -num-cores=2"


class ShiftedWindows(nn.Module):
    """Swin's shifted-window block in miniature: a roll over height and width, the window
    partition (view, permute), a dense layer per token, the reverse partition, the roll back
    and the residual add."""

    def __init__(self, size=8, window=4, channels=16, shift=2):
        super().__init__()
        self.size, self.window, self.shift = size, window, shift
        self.proj = nn.Linear(channels, channels)

    def forward(self, x):  # x: [1, size, size, channels]
        s, w, c = self.size, self.window, x.shape[-1]
        y = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = y.view(1, s // w, w, s // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
        y = self.proj(y)
        y = y.view(1, s // w, s // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(1, s, s, c)
        return x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))


def test_rotation_recognises_rolls_only():
    assert rotation(np.array([2, 3, 0, 1]), 4) == 2
    assert rotation((np.arange(7) + 5) % 7, 7) == 5
    assert rotation(np.arange(4), 4) is None  # the identity: no roll
    assert rotation(np.array([1, 0, 3, 2]), 4) is None  # a permutation, not a rotation
    assert rotation(np.array([1, 2, 3]), 4) is None  # not the whole axis
    assert rotation(np.array([1.0, 2.0, 3.0, 0.0]), 4) is None  # not integers


@pytest.mark.parametrize("shift", [2, 1])
def test_shifted_windows_compile_without_torch_nodes_and_match_eager(shift):
    torch.manual_seed(0)
    model = ShiftedWindows(shift=shift).eval()
    x = torch.randn(1, 8, 8, 16)
    compiled = tc.compile(model, (x,), target=TARGET, db=False)
    assert unsupported(compiled.graph) == {}  # the index_selects were PyTorch nodes
    rolls = [m for n in compiled.graph.nodes for m in (n.body or [n]) if m.op == "roll"]
    assert sorted((m.attrs["axis"], m.attrs["shift"]) for m in rolls) == sorted(
        [(1, shift), (2, shift), (1, 8 - shift), (2, 8 - shift)]
    )
    fused = [n for n in compiled.graph.nodes if n.body and "permute" in [m.op for m in n.body]]
    assert any("roll" in [m.op for m in n.body] for n in fused)  # the rolls and the window partition: one kernel
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-5, atol=1e-5)


class Gather(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([3, 0, 0, 2]))

    def forward(self, x):
        return torch.index_select(x, 1, self.index) * 2.0


def test_other_constant_gathers_stay_in_pytorch_and_match_eager():
    x = torch.randn(2, 4, 8)
    with pytest.warns(UserWarning, match="index_select"):
        compiled = tc.compile(Gather().eval(), (x,), target=TARGET, db=False)
    assert unsupported(compiled.graph) == {"aten.index_select.default": 1}
    np.testing.assert_allclose(compiled(x).numpy(), Gather()(x).numpy(), rtol=1e-6)
