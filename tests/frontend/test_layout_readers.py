"""Every reader of a blocked (NCHWc) value that the layout pass meets (issue 53): pooled
squeeze-excitation values, computed (N, C, 1, 1) and (N, 1, H, W) broadcasts, channel counts no
vector width divides, a network input read both by a convolution and elementwise, views and
reshapes of blocked values. Each compiles with fallback=False (no internal error is tolerated)
and matches eager. The targets are pinned: 8 float lanes, and 16 (padded channels) where this
host runs them, else the graph alone is checked."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import model_graph  # noqa: E402
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.target import parse_target  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"  # 8 float lanes
AVX512 = "llvm -mcpu=znver4 -num-cores=2"  # 16 float lanes: 24 channels padded to 32


def members(graph) -> list:
    return [b for n in graph.nodes for b in (n.body or [n])]


def compiled_graph(model, x, target):
    """The compiled graph, checked against eager where the target runs here."""
    if not parse_target(target).is_host_compatible:
        return model_graph(model, (x,), target)
    compiled = tc.compile(model, (x,), target=target, db=False, fallback=False)
    with torch.no_grad():
        expected = model(x)
    got = compiled(x)
    pairs = zip(got, expected) if isinstance(got, tuple) else [(got, expected)]
    for g, e in pairs:
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)
    return compiled.graph


class Gates(nn.Module):
    """A squeeze-excitation block (its pooled value read by a convolution), a gate through
    linear layers viewed to (N, C, 1, 1), and a one-channel spatial gate (N, 1, H, W)."""

    def __init__(self, c=24):
        super().__init__()
        self.stem, self.down, self.up = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, 8, 1), nn.Conv2d(8, c, 1)
        self.fc1, self.fc2, self.out = nn.Linear(c, 6), nn.Linear(6, c), nn.Conv2d(c, 16, 1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = h * torch.sigmoid(self.up(torch.relu(self.down(h.mean((2, 3), keepdim=True)))))
        h = h * torch.sigmoid(self.fc2(torch.relu(self.fc1(h.mean((2, 3)))))).view(1, -1, 1, 1)
        h = h * torch.sigmoid(h.mean(1, keepdim=True))
        return self.out(h)


@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_gates_broadcast_over_blocked_values_stay_blocked(target):
    torch.manual_seed(0)
    graph = compiled_graph(Gates().eval(), torch.randn(1, 3, 8, 8), target)
    ops = members(graph)
    muls = [b for b in ops if b.op == "mul"]
    assert len(muls) == 3 and all(len(b.shape) == 5 for b in muls)  # every gate applied blocked
    (pooled,) = [b for b in ops if b.op == "mean" and tuple(b.attrs["axis"]) == (2, 3) and b.attrs["keepdims"]]
    # the pooled value is read blocked as it is: no permute of it, before or after
    assert not any(b.op == "permute" and pooled.name in b.inputs for b in ops)
    # the input in, the output out, and the map to NCHW for the mean over channels (not blocked)
    assert [b.op for b in ops].count("permute") == 3
    pads = [b for b in ops if b.op == "pad"]
    assert len(pads) == (1 if target == AVX512 else 0)  # the linear gate's 24 channels padded to 32


class OddChannels(nn.Module):
    """20 and 12 channels (no vector of 8 or 16 lanes divides them) after 16, and the network
    input read by a convolution (one block of its 3 colours) and then elementwise."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 20, 1), nn.Conv2d(20, 12, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        g = self.b(h * torch.sigmoid(h.mean((2, 3), keepdim=True)))
        return self.c(g / 3.0) + g.mean(1, keepdim=True), torch.relu(x) * 2.0, h / 3.0


@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_channel_counts_no_vector_divides_and_a_twice_read_input(target):
    torch.manual_seed(0)
    graph = compiled_graph(OddChannels().eval(), torch.randn(1, 3, 8, 8), target)
    convs = [b for b in members(graph) if b.op.startswith("conv2d")]
    assert [b.op for b in convs] == ["conv2d_nchwc", "conv2d", "conv2d"]  # 20 and 12 outputs stay NCHW


class Views(nn.Module):
    """Views and reshapes of blocked convolution outputs: channels split into groups, the map
    flattened to tokens and back, a channel-last permute with a layer norm."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.norm = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 16, 1), nn.LayerNorm(16)

    def forward(self, x):
        h = torch.relu(self.a(x))
        n, c, hh, ww = h.shape
        g = h.view(n, 2, c // 2, hh, ww).sum(1)
        t = self.b(torch.cat([g, g * 0.5], 1)).flatten(2).transpose(1, 2)
        return self.norm(t).transpose(1, 2).reshape(n, 16, hh, ww).permute(0, 2, 3, 1)


@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_views_and_reshapes_of_blocked_values(target):
    torch.manual_seed(0)
    graph = compiled_graph(Views().eval(), torch.randn(1, 3, 8, 8), target)
    assert any(b.op == "conv2d_nchwc" for b in members(graph))


class ChannelLastBlock(nn.Module):
    """ConvNeXt's first stage: a stem, a channel-last layer norm (permutes around it), then a
    7x7 depthwise convolution of the NCHW permute and the residual add; `c` channels."""

    def __init__(self, c):
        super().__init__()
        self.stem, self.norm = nn.Conv2d(3, c, 4, stride=4), nn.LayerNorm(c)
        self.dw, self.pw = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.Linear(c, c)

    def forward(self, x):
        h = self.norm(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return h + self.pw(self.dw(h).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@pytest.mark.parametrize("c, blocked", [(16, True), (12, False)])
def test_a_depthwise_convolution_of_an_nchw_value_is_blocked_when_its_channels_fill_vectors(c, blocked):
    """16 channels fill two 8-lane vectors: the permute's value is converted (one fused permute)
    and the depthwise convolution runs blocked with its bias; 12 channels stay NCHW."""
    torch.manual_seed(0)
    graph = compiled_graph(ChannelLastBlock(c).eval(), torch.randn(1, 3, 32, 32), AVX2)
    depthwise = [b.op for b in members(graph) if b.op.startswith("depthwise")]
    assert depthwise == (["depthwise_conv2d_nchwc"] if blocked else ["depthwise_conv2d"])
