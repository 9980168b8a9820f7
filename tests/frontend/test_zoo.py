"""The model zoo of issue 44 (benchmarks/zoo_hf.py, benchmarks/zoo_nn.py): every small model
compiles with tc.compile, matches PyTorch eager within 1e-4 of max |eager|, and what runs
through PyTorch is reported with a reason. Also the converters' argument forms and the
fallback of a node a kernel refuses."""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.benchmarks.models_systems import compare  # noqa: E402
from minitc.benchmarks.models_zoo import MODELS, ZOO  # noqa: E402
from minitc.errors import ShapeError  # noqa: E402
from minitc.frontend import fallback_reasons, kernels, unsupported  # noqa: E402
from minitc.frontend.aten import Unconvertible, dims, ints  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def compile_and_check(model, inputs):
    """The compiled model after checking its output against eager and its fallback report."""
    with torch.no_grad():
        expected = model(*inputs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tc.compile(model, inputs, db=False)
    through_torch = unsupported(compiled.graph)
    report = [str(w.message) for w in caught if "through PyTorch" in str(w.message)]
    if through_torch:  # reported when compiled, every operator named, each with a reason
        assert len(report) == 1 and all(op in report[0] for op in through_torch), report
        reasons = fallback_reasons(compiled.graph)
        assert set(reasons) == set(through_torch)
        assert all(r for rs in reasons.values() for r in rs), reasons
    else:
        assert report == []
    check, wrong = compare(compiled(*inputs), expected.detach().numpy())
    assert wrong is None, wrong
    return compiled


# the work of every zoo model: none of it may go back to PyTorch (what does is small: embeddings,
# integer mask arithmetic, index_select; docs/models.md lists it with the reasons)
HEAVY_OPS = ("convolution", "linear", "addmm", "mm", "bmm", "_softmax", "_safe_softmax", "layer_norm", "cat")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy) if n == "zoo-mobilevit" else n for n in ZOO])
def test_zoo_model_compiles_and_matches_eager(name):
    if MODELS[name].needs:
        pytest.importorskip(MODELS[name].needs)
    compiled = compile_and_check(*MODELS[name].make())
    heavy = [op for op in unsupported(compiled.graph) if op.split(".")[1] in HEAVY_OPS]
    assert not heavy, fallback_reasons(compiled.graph)
    assert compiled.fallbacks == []  # no internal error compiled around (minitc/frontend/fallback.py)


def test_zoo_names_every_architecture_of_the_issue():
    assert len(ZOO) >= 20 and all(name in MODELS and not MODELS[name].full for name in ZOO)


def test_size_arguments_in_every_form_pytorch_passes():
    assert ints(3, 2) == (3, 3)
    assert ints((0,), 2) == (0, 0) and ints([1], 2) == (1, 1)
    assert ints([1, 2], 2) == (1, 2) and ints((2, 1), 2) == (2, 1)
    assert ints(None, 2, 1) == (1, 1) and ints([], 2, 0) == (0, 0)
    for bad in ((1, 2, 3), "same", (1.5, 1), None):
        with pytest.raises(Unconvertible):
            ints(bad, 2)
    assert dims(-1, 3) == (2,) and dims([-1, 0], 3) == (0, 2) and dims(None, 2) == (0, 1) and dims([], 2) == (0, 1)
    with pytest.raises(Unconvertible):
        dims(3, 3)


@pytest.mark.parametrize(
    "conv",
    [
        dict(padding="valid"),  # exported as padding [0]: conv2d_nchwc raised ShapeError on (0,)
        dict(padding="same", dilation=(2,)),
        dict(padding=(0,), stride=(2,)),
        dict(padding=[1, 2], stride=[1, 2], dilation=[2, 1]),
    ],
    ids=["valid", "same-dilated", "one-element", "lists"],
)
def test_convolution_arguments_as_the_user_writes_them_run_in_minitc(conv):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, **conv), nn.ReLU(), nn.MaxPool2d([2], stride=None)).eval()
    compiled = compile_and_check(model, (torch.randn(1, 16, 12, 12),))
    assert unsupported(compiled.graph) == {}


def test_a_node_its_kernel_refuses_runs_through_pytorch_with_the_reason(monkeypatch):
    """Whatever a template or operator raises on a node's arguments, the import makes the call a
    fallback saying why; compile does not fail."""

    def refuse(node, x):
        raise ShapeError("tanh: refused for this test")

    monkeypatch.setitem(kernels.BUILDERS, "tanh", refuse)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval()
    compiled = compile_and_check(model, (torch.randn(2, 8),))
    assert unsupported(compiled.graph) == {"aten.tanh.default": 1}
    assert fallback_reasons(compiled.graph)["aten.tanh.default"] == ["ShapeError: tanh: refused for this test"]


class Forms(nn.Module):
    """The operators the zoo brought to minitc's kernels: 1-D convolution (Whisper), cat, neg and
    rsqrt (LLaMA's rotary embedding and RMSNorm), constant padding and strided slices (Swin)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 3, stride=(2,), padding=(1,))

    def forward(self, x):  # [1, 8, 16]
        y = self.conv(x)  # [1, 8, 8]
        half = y.shape[-1] // 2
        rotated = torch.cat((-y[..., half:], y[..., :half]), dim=-1)
        norm = rotated * torch.rsqrt(rotated.pow(2).mean(-1, keepdim=True) + 1e-6)
        padded = nn.functional.pad(norm, (1, 2, 0, 1), value=0.5)  # [1, 9, 11]
        return padded[:, 0::2, 1::3] + 1.0


def test_zoo_operator_forms_run_in_minitc_kernels():
    torch.manual_seed(0)
    model, x = Forms().eval(), torch.randn(1, 8, 16)
    with torch.no_grad():
        expected = model(x)
    compiled = tc.compile(model, (x,), db=False, fallback=False)  # raises if any node ran through PyTorch
    ops = {n.op for n in compiled.graph.nodes} | {b.op for n in compiled.graph.nodes for b in n.body}
    assert {"conv2d_nchwc", "cat", "pad", "slice", "rsqrt"} <= ops, ops
    check, wrong = compare(compiled(x), expected.numpy())
    assert wrong is None, wrong


@pytest.mark.parametrize(
    "layer",
    [
        nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1),
        nn.ConvTranspose2d(8, 4, 3, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), dilation=(1, 2)),
        nn.ConvTranspose2d(8, 4, 2, stride=2, bias=False),
        nn.Conv2d(8, 8, 3, padding=1, groups=2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8, bias=False),  # 8 groups of one channel, 2 outputs each
    ],
    ids=["transposed", "transposed-output-padding-dilated", "transposed-no-bias", "grouped", "grouped-multiplier"],
)
def test_transposed_and_grouped_convolutions_run_as_dense_ones(layer):
    torch.manual_seed(0)
    model, x = nn.Sequential(layer, nn.ReLU()).eval(), torch.randn(1, 8, 7, 9)
    with torch.no_grad():
        expected = model(x)
    compiled = tc.compile(model, (x,), db=False, fallback=False)
    check, wrong = compare(compiled(x), expected.numpy())
    assert wrong is None, wrong


def test_a_grouped_convolution_of_many_groups_says_why_it_runs_through_pytorch():
    model, x = nn.Conv2d(32, 32, 3, groups=16).eval(), torch.randn(1, 32, 6, 6)
    compiled = compile_and_check(model, (x,))
    (reason,) = fallback_reasons(compiled.graph)["aten.convolution.default"]
    assert "16 groups of 2 channels, more than 8" in reason


def test_the_zoo_report_times_each_system_and_tabulates_inductor(monkeypatch):
    from minitc import timing
    from minitc.benchmarks import report, zoo_suite

    monkeypatch.setattr(timing, "ALTERNATE_WARMUP_S", 0.001)
    monkeypatch.setattr(timing, "ALTERNATE_CALL_S", 0.001)
    slow = lambda: sum(range(20000))  # noqa: E731
    fast = lambda: sum(range(2000))  # noqa: E731
    t = zoo_suite.speeds({"eager": slow, "minitc": fast, "inductor": slow}, rounds=3)
    assert set(t) == {"eager_ms", "minitc_ms", "inductor_ms", "speed", "vs_inductor"}
    assert t["speed"] > 1 and t["vs_inductor"] > 1  # 10x the work
    row = {"model": "m", "fallbacks": {}, "error": None, "rel_err": 1e-7, "timing": {2: t}}
    text = report.zoo_table([row], [2], inductor=True)
    assert "vs Inductor, 2T" in text and text.splitlines()[-1].count("|") == 10
