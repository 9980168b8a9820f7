"""An anchor (dense, convolution; on GPU targets a depthwise convolution too) takes an elementwise
region that reads its result several times through single-reader elementwise ops: a bias add
before y * sigmoid(y) (SiLU written out) or a tanh GELU is one kernel with the anchor, on "llvm"
and "cuda-sim", and the outputs match eager. Where something else reads a value in between, or
the chain leaves the anchor's shape, the kernels stay as they were."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import model_graph  # noqa: E402
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend.fusion import epilogue_anchors  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")


def silu(y):
    return y * torch.sigmoid(y)


def gelu_tanh(y):  # reads y four times
    return 0.5 * y * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))


class ConvAct(nn.Module):
    """A convolution without bias, then `scale` (optional), `+ b` and the activation."""

    def __init__(self, c=8, depthwise=False, act=silu, scale=None, bias_shape=None):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False, groups=c if depthwise else 1)
        self.b = nn.Parameter(torch.randn(*(bias_shape or (1, c, 1, 1))))
        self.act, self.scale = act, scale

    def forward(self, x):
        y = self.conv(x)
        return self.act((y if self.scale is None else y * self.scale) + self.b)


class DenseAct(nn.Module):
    """A dense layer without bias, then `+ b` and the activation; `also` returns a value the
    region's chain reads as a second output."""

    def __init__(self, d=16, f=32, act=silu, scale=None, also=None):
        super().__init__()
        self.fc, self.b = nn.Linear(d, f, bias=False), nn.Parameter(torch.randn(f))
        self.act, self.scale, self.also = act, scale, also

    def forward(self, x):
        z = self.fc(x)
        y = (z if self.scale is None else z * self.scale) + self.b
        out = self.act(y)
        return out if self.also is None else (out, {"z": z, "y": y}[self.also])


def _bodies(model, x, target, layout="auto") -> list:
    """The op lists of the graph's kernels (a fused kernel's body, or the op alone)."""
    graph = model_graph(model, (x,), target) if layout == "auto" else _nchw_graph(model, x, target)
    return [[b.op for b in n.body] if n.body else [n.op] for n in graph.nodes if n.op not in ("view", "torch")]


def _nchw_graph(model, x, target):
    from minitc.frontend import passes
    from minitc.frontend.importer import import_model

    return passes.run_all(import_model(model, (x,)), target, "nchw")


def _anchored(bodies, target) -> list:
    """The kernels whose first op is an anchor and which compute the activation."""
    acts = ("sigmoid", "tanh")
    return [b for b in bodies if b[0] in epilogue_anchors(target) and any(a in b for a in acts)]


def _check(model, x, target):
    torch.manual_seed(0)
    model = model.eval()
    compiled = tc.compile(model, (x,), target=target)
    with torch.no_grad():
        want = model(x)
    for got, w in zip(*((compiled(x), want) if isinstance(want, tuple) else ((compiled(x),), (want,)))):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=0, atol=1e-5 * max(1.0, float(w.abs().max())))
    return [str(t).split()[0] for t in compiled.tasks]


CASES = {  # name: (model factory, input), each a region led by a bias add (and a scale)
    "conv-silu": (lambda: ConvAct(), (2, 8, 6, 6)),
    "conv-scale-silu": (lambda: ConvAct(scale=0.5), (2, 8, 6, 6)),
    "conv-gelu": (lambda: ConvAct(act=gelu_tanh), (1, 8, 5, 5)),
    "dense-silu": (lambda: DenseAct(), (4, 16)),
    "dense-gelu": (lambda: DenseAct(act=gelu_tanh), (4, 16)),
    "dense-scale-gelu-3d": (lambda: DenseAct(act=gelu_tanh, scale=2.0), (2, 3, 16)),
    "dense-silu-3d": (lambda: DenseAct(), (2, 3, 16)),
}


@pytest.mark.parametrize("target", ["llvm", "cuda-sim"])
@pytest.mark.parametrize("case", list(CASES))
def test_an_anchor_takes_the_region_behind_its_bias_add(case, target):
    torch.manual_seed(0)
    make, shape = CASES[case]
    model, x = make().eval(), torch.randn(*shape)
    bodies = _bodies(model, x, target)
    anchored = _anchored(bodies, target)
    assert len(anchored) == 1 and "add" in anchored[0], bodies
    assert not any("sigmoid" in b or "tanh" in b for b in bodies if b not in anchored), bodies
    kinds = _check(model, x, target)
    assert "elementwise" not in kinds or case.startswith("conv") and target == "llvm", kinds  # NCHWc permutes


def test_a_depthwise_conv_takes_its_bias_and_silu_on_the_gpu_only():
    """cuda-sim: one depthwise task; the CPU's NCHW depthwise template takes no epilogue, so
    there the region stays a kernel of its own after it."""
    torch.manual_seed(0)
    model, x = ConvAct(depthwise=True).eval(), torch.randn(2, 8, 6, 6)
    assert _anchored(_bodies(model, x, "cuda-sim"), "cuda-sim")[0][0] == "depthwise_conv2d"
    assert _check(model, x, "cuda-sim") == ["depthwise_conv2d"]
    assert _bodies(model, x, "llvm", "nchw") == [["depthwise_conv2d"], ["add", "sigmoid", "mul"]]
    _check(model, x, "llvm")


@pytest.mark.parametrize("also", ["z", "y"])
def test_a_value_read_outside_the_chain_keeps_the_anchor_apart_from_the_region(also):
    """The product (z) or the biased value (y) is also an output: the anchor does not take the
    region (z: the dense stays alone; y: it takes only the bias add, today's epilogue)."""
    torch.manual_seed(0)
    model, x = DenseAct(also=also).eval(), torch.randn(4, 16)
    bodies = _bodies(model, x, "llvm")
    assert not _anchored(bodies, "llvm"), bodies
    assert ["sigmoid", "mul"] in bodies or ["add", "sigmoid", "mul"] in bodies, bodies
    _check(model, x, "llvm")


def test_a_bias_that_broadcasts_past_the_anchors_shape_keeps_the_region_apart():
    """conv [1, C, H, W] + b [2, C, 1, 1] is [2, C, H, W]: the region is not on the anchor's shape."""
    torch.manual_seed(0)
    model, x = ConvAct(bias_shape=(2, 8, 1, 1)).eval(), torch.randn(1, 8, 6, 6)
    for target in ("llvm", "cuda-sim"):
        bodies = _bodies(model, x, target)
        assert not _anchored(bodies, target), bodies
    _check(model, x, "llvm")
