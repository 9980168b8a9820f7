"""Channel-blocked activations (minitc/frontend/layout.py): which nodes go to NCHW[c], where the
layout is converted, the graph it prints, and compiled models against PyTorch eager. The
targets are pinned, so the block size (the target's vector lanes) does not depend on the host."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import model_graph  # noqa: E402
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.errors import ConfigError  # noqa: E402
from minitc.frontend.graph import Graph, Node, Value  # noqa: E402
from minitc.frontend.layout import block_channels, block_of, padded_channels  # noqa: E402
from minitc.target import parse_target  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"  # 8 float lanes
AVX512 = "llvm -mcpu=znver4 -num-cores=2"  # 16 float lanes


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


def _ops(graph) -> list:
    return [b.op for n in graph.nodes for b in (n.body or [n])]


class TinyCNN(nn.Module):
    """A stem on 3 channels, a pool, a residual block, the global average pool and a classifier."""

    def __init__(self, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.conv1 = nn.Conv2d(width, width, 3, 1, 1)
        self.conv2 = nn.Conv2d(width, width, 1)
        self.fc = nn.Linear(width, 10)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(self.conv2(torch.relu(self.conv1(y))) + y)
        return self.fc(y.mean(dim=(2, 3)))


def test_a_cnn_runs_in_channel_blocks_from_its_input_to_its_average_pool():
    torch.manual_seed(0)
    model, x = TinyCNN().eval(), torch.randn(1, 3, 32, 32)
    compiled = tc.compile(model, (x,), target=AVX2)
    text = str(compiled.graph)
    # the input converted once (3 channels: one block of 3), then 8-channel blocks throughout
    assert "%x_nchwc = permute(%x_blocks, dims=[0, 1, 3, 4, 2])" in text
    assert "float32[1, 1, 32, 32, 3]" in text and "float32[1, 2, 8, 8, 8]" in text
    ops = _ops(compiled.graph)
    assert ops.count("conv2d_nchwc") == 3 and "conv2d" not in ops
    assert "max_pool2d_nchwc" in ops and ops.count("permute") == 1  # no conversion back
    (mean,) = [n for n in compiled.graph.nodes if n.op == "mean"]
    assert mean.shape == (1, 2, 8) and list(mean.attrs["axis"]) == [2, 3]  # pooled blocks are NCHW order
    with torch.no_grad():
        close(compiled(x), model(x))


def test_the_block_is_the_targets_vector_lanes():
    torch.manual_seed(0)
    model, x = TinyCNN(width=32).eval(), torch.randn(1, 3, 16, 16)
    for target, block in ((AVX2, 8), (AVX512, 16)):
        graph = model_graph(model, (x,), target)  # AVX-512 kernels need not run here
        convs = [b for n in graph.nodes for b in (n.body or [n]) if b.op == "conv2d_nchwc"]
        assert {c.shape[-1] for c in convs} == {block}
        assert graph.constants[convs[1].inputs[1]].shape == (32 // block, 32 // block, 3, 3, block, block)


def test_channels_that_fill_half_vectors_are_padded_to_whole_ones():
    """MobileNet-V2 on 16 lanes: its 24 channels are blocked by 16 and padded to 32 (zero
    weights for the padded channels), 8 channels blocked by 8; 8 lanes divide 24; 12 channels
    stay NCHW."""
    assert [block_of(c, 16) for c in (16, 24, 32, 12, 8)] == [16, 16, 16, None, 8]  # 8 -> 16 would double the work
    assert [padded_channels(c, 16) for c in (16, 24, 40, 3, 8)] == [16, 32, 48, 3, 8]
    assert [block_of(c, 8) for c in (8, 24, 4)] == [8, 8, None] and padded_channels(24, 8) == 24
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU6(), nn.Conv2d(16, 24, 1), nn.Conv2d(24, 32, 1)).eval()
    x = torch.randn(1, 3, 14, 14)
    runs_here = parse_target(AVX512).is_host_compatible  # an AVX2 host checks the graph only
    compiled = tc.compile(model, (x,), target=AVX512) if runs_here else None
    graph = compiled.graph if runs_here else model_graph(model, (x,), AVX512)
    convs = [b for n in graph.nodes for b in (n.body or [n]) if b.op == "conv2d_nchwc"]
    assert [c.shape for c in convs] == [(1, 1, 7, 7, 16), (1, 2, 7, 7, 16), (1, 2, 7, 7, 16)]
    w24, w32 = (graph.constants[c.inputs[1]] for c in convs[1:])
    assert w24.shape == (2, 1, 1, 1, 16, 16) and not w24[1, :, :, :, :, 8:].any()  # output channels 24..31
    assert w32.shape == (2, 2, 1, 1, 16, 16) and not w32[:, 1, :, :, 8:, :].any()  # input channels 24..31
    if runs_here:
        with torch.no_grad():
            close(compiled(x), model(x))


class PaddedEdges(nn.Module):
    """24-channel values through every kind of blocked reader: a bias and a batch norm, a
    division by a per-channel constant, a residual add, a depthwise convolution, a pool, a
    graph output, a division by an activation and an exp (neither blocked: padded channels stay
    finite) and the global average pool."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(8, 24, 1)
        self.bn = nn.BatchNorm2d(24)
        self.dw = nn.Conv2d(24, 24, 3, 1, 1, groups=24)
        self.project = nn.Conv2d(24, 24, 1)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 24).reshape(1, 24, 1, 1))

    def forward(self, x):
        y = torch.relu(self.bn(self.expand(x))) / self.scale
        z = self.project(torch.relu(self.dw(y))) + y
        pooled = nn.functional.max_pool2d(z, 2)
        ratio = z / (torch.sigmoid(z) + 1.0) + torch.exp(z - 4.0)
        return pooled, ratio, z.mean(dim=(2, 3))


def test_padded_channels_are_dropped_wherever_a_value_leaves_the_blocked_layout():
    torch.manual_seed(0)
    model, x = PaddedEdges().eval(), torch.randn(1, 8, 6, 6)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    runs_here = parse_target(AVX512).is_host_compatible
    compiled = tc.compile(model, (x,), target=AVX512) if runs_here else None
    graph = compiled.graph if runs_here else model_graph(model, (x,), AVX512)
    blocked = [b for n in graph.nodes for b in (n.body or [n]) if len(b.shape) == 5 and b.op not in ("view", "permute")]
    assert blocked and all(b.shape[1:] in ((2, 6, 6, 16), (2, 3, 3, 16), (2, 1, 1, 16)) for b in blocked), blocked
    slices = [n for n in graph.nodes if n.op == "slice"]
    assert slices and all(n.attrs["axis"] == 1 and n.shape[1] == 24 for n in slices)
    divisors = [graph.constants[i] for n in graph.nodes for b in (n.body or [n]) if b.op == "div" for i in b.inputs
                if i in graph.constants]  # fmt: skip
    assert any(d.shape[-1] == 16 and (d.reshape(-1)[24:] == 1).all() for d in divisors)  # padded with 1, not 0
    if runs_here:
        with torch.no_grad():
            for got, want in zip(compiled(x), model(x)):
                close(got, want)


def test_a_graph_output_and_an_unblocked_reader_get_nchw_back():
    """A 4-D activation returned by the model, and read by an op without a blocked kernel
    (a softmax over channels runs through PyTorch), is converted back once, under its name."""

    class TwoEnds(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 16, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return y, torch.softmax(y, dim=1)

    torch.manual_seed(0)
    model, x = TwoEnds().eval(), torch.randn(1, 8, 6, 6)
    compiled = tc.compile(model, (x,), target=AVX2)
    back = [n for n in compiled.graph.nodes if n.op == "permute" and n.attrs["dims"] == (0, 1, 4, 2, 3)]
    assert len(back) == 1 and back[0].shape == (1, 2, 8, 6, 6)
    with torch.no_grad():
        for got, want in zip(compiled(x), model(x)):
            close(got, want)


def test_a_convolution_whose_channels_do_not_fill_a_block_stays_nchw():
    """12 output channels on an 8-lane target: that convolution keeps PyTorch's layout, and its
    blocked input is converted back for it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1)).eval()
    x = torch.randn(1, 3, 10, 10)
    compiled = tc.compile(model, (x,), target=AVX2)
    ops = _ops(compiled.graph)
    assert ops.count("conv2d_nchwc") == 1 and ops.count("conv2d") == 1
    with torch.no_grad():
        close(compiled(x), model(x))


def test_depthwise_blocks_with_batch_norm_and_relu6():
    """MobileNet's inverted residual: 1x1 expansion, depthwise 3x3 with ReLU6, 1x1 projection."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU6(),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU6(),
        nn.Conv2d(16, 8, 1, bias=False),
        nn.BatchNorm2d(8),
    ).eval()
    for bn in (model[1], model[4], model[7]):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 16, 16)
    compiled = tc.compile(model, (x,), target=AVX2)
    ops = _ops(compiled.graph)
    assert "depthwise_conv2d_nchwc" in ops and "depthwise_conv2d" not in ops
    with torch.no_grad():
        close(compiled(x), model(x))


def test_layout_nchw_leaves_the_graph_in_pytorchs_layout_and_a_bad_layout_is_refused():
    torch.manual_seed(0)
    model, x = TinyCNN().eval(), torch.randn(1, 3, 16, 16)
    ops = _ops(tc.compile(model, (x,), target=AVX2, layout="nchw").graph)
    assert "conv2d" in ops and not any(op.endswith("_nchwc") for op in ops)
    with pytest.raises(ConfigError, match="layout must be one of 'auto', 'nchw'"):
        tc.compile(model, (x,), layout="NHWC")


def test_gpu_targets_keep_nchw():
    graph = Graph([Value("x", (1, 8, 4, 4), "float32")], {"w": np.zeros((8, 8, 1, 1), "float32")})
    graph.nodes = [Node("c", "conv2d", ("x", "w"), {}, (1, 8, 4, 4), "float32")]
    graph.outputs = ["c"]
    assert block_channels(graph, "cuda") is graph
    assert [n.op for n in block_channels(graph, AVX2).nodes] == ["view", "permute", "conv2d_nchwc", "permute", "view"]
