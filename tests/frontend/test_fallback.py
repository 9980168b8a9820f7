"""Falling back on minitc's own errors (minitc/frontend/fallback.py): each kind of internal
failure is injected (an import's converter, a graph pass that raises or breaks the graph, a
kernel's tensor expression, schedule or build); the compiled model still matches eager, one
CompilerFallbackWarning names the failure, `compiled.fallbacks` lists it, and fallback=False
raises it. The targets are pinned (8 float lanes), so the blocked layout is the same on every
x86 host."""

import warnings
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.autotune.workload_key import describe  # noqa: E402
from minitc.errors import GraphError  # noqa: E402
from minitc.frontend import compiler, fallback, passes, torch_ops  # noqa: E402
from minitc.frontend.aten import CONVERTERS  # noqa: E402
from minitc.frontend.graph import Graph, Node, Value, verify  # noqa: E402
from minitc.frontend.layout import _Blocker  # noqa: E402
from minitc.frontend.saved import SavedModelError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"  # 8 float lanes


class Injected(RuntimeError):
    """The fault the tests inject inside minitc."""


class SEBlock(nn.Module):
    """A stem, a squeeze-excitation block (global mean, two 1x1 convolutions, a sigmoid gate
    read per channel, (N, C, 1, 1) broadcast over the map) and a classifier: blocked layout,
    convolutions, reductions, elementwise fusion and a dense layer."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)
        self.down, self.up = nn.Conv2d(16, 8, 1), nn.Conv2d(8, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.conv(torch.relu(self.stem(x))))
        h = h * torch.sigmoid(self.up(torch.relu(self.down(h.mean((2, 3), keepdim=True)))))
        return self.fc(h.mean((2, 3)))


def compile_warned(model, x, **options):
    """(compiled, [CompilerFallbackWarning messages]) of tc.compile(model, (x,), target=AVX2)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tc.compile(model, (x,), target=AVX2, db=False, **options)
    return compiled, [str(w.message) for w in caught if issubclass(w.category, tc.CompilerFallbackWarning)]


def check_falls_back(model, x, stage: str, where: str):
    """The model compiles around the injected fault (one warning, one Fallback of `stage` at
    `where`), matches eager, and fallback=False raises the fault."""
    compiled, warned = compile_warned(model, x)
    assert len(warned) == 1 and "Injected" in warned[0] and "please report it" in warned[0]
    assert [(f.stage, where in f.where) for f in compiled.fallbacks] == [(stage, True)], compiled.fallbacks
    assert "Injected" in compiled.fallbacks[0].error
    with torch.no_grad():
        expected = model(x)
    np.testing.assert_allclose(compiled(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(Injected):
        tc.compile(model, (x,), target=AVX2, db=False, fallback=False)
    return compiled


@pytest.fixture
def se():
    torch.manual_seed(0)
    return SEBlock().eval(), torch.randn(1, 3, 12, 12)


def test_a_clean_compile_has_no_fallbacks_and_no_warning(se):
    model, x = se
    compiled, warned = compile_warned(model, x)
    assert warned == [] and compiled.fallbacks == []
    assert any(b.op == "conv2d_nchwc" for n in compiled.graph.nodes for b in (n.body or [n]))


def test_a_converter_that_fails_runs_its_call_through_pytorch(se, monkeypatch):
    def broken(*args, **kwargs):
        raise Injected("the sigmoid converter")

    monkeypatch.setitem(CONVERTERS, "aten.sigmoid.default", broken)
    compiled = check_falls_back(*se, "import", "sigmoid")
    assert [n.attrs["target"] for n in compiled.graph.nodes if n.op == "torch"] == ["aten.sigmoid.default"]


def test_a_layout_pass_that_raises_on_a_node_skips_that_node(se, monkeypatch):
    """The blocked form of the second convolution fails: that convolution runs in NCHW, the
    stem and the squeeze-excitation convolutions stay blocked."""
    real = _Blocker._conv

    def broken(self, node):
        if node.name == "convolution_1":
            raise Injected("a blocked convolution")
        return real(self, node)

    monkeypatch.setattr(_Blocker, "_conv", broken)
    compiled = check_falls_back(*se, "pass", "block_channels at node convolution_1")
    ops = [b.op for n in compiled.graph.nodes for b in (n.body or [n])]
    assert ops.count("conv2d") == 1 and ops.count("conv2d_nchwc") == 3


def test_a_pass_that_names_two_values_alike_is_skipped(se, monkeypatch):
    """Issue 53's crash: the layout pass named a mean's blocked result and the blocked copy of
    its NCHW value alike, and the mean's node ran the copy's kernel (a ShapeError at the first
    call, or a wrong answer where the shapes agreed). The graph check after each pass refuses
    such a graph, and the pass is skipped: the same fault injected here."""
    real = _Blocker.run

    def run(self):
        g = real(self)
        first, second = [k for k, n in enumerate(g.nodes) if n.op != "view"][:2]
        g.nodes[second] = replace(g.nodes[second], name=g.nodes[first].name)
        return g

    monkeypatch.setattr(_Blocker, "run", run)
    compiled, warned = compile_warned(*se)
    assert len(warned) == 1 and "GraphError" in warned[0] and "names two values" in warned[0]
    assert [(f.stage, f.where) for f in compiled.fallbacks] == [("pass", "block_channels")]
    with torch.no_grad():
        np.testing.assert_allclose(compiled(se[1]).numpy(), se[0](se[1]).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(GraphError, match="names two values"):
        tc.compile(se[0], (se[1],), target=AVX2, db=False, fallback=False)


def test_every_other_pass_that_raises_is_skipped(monkeypatch):
    """Each pass in turn raises, on a small model with a batch norm, a convolution, elementwise
    ops and a dense layer (few kernels: a fast compile per pass)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 4))
    model, x = model.eval(), torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        expected = model(x).numpy()
    names = [p.__name__ for p in passes.PASSES]
    for k, name in enumerate(names):

        def broken(graph, *target):
            raise Injected(f"in {graph}")

        broken.__name__ = name
        monkeypatch.setattr(passes, "PASSES", passes.PASSES[:k] + (broken,) + passes.PASSES[k + 1 :])
        compiled, warned = compile_warned(model, x)
        assert len(warned) == 1 and [(f.stage, f.where) for f in compiled.fallbacks] == [("pass", name)]
        np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-4, atol=1e-5)
        if k == 0:
            with pytest.raises(Injected):
                tc.compile(model, (x,), target=AVX2, db=False, fallback=False)
        monkeypatch.undo()


def test_a_kernel_whose_tensor_expression_fails_runs_through_pytorch(se, monkeypatch):
    """The fused group of the SE gate (conv, sigmoid) fails to build its tensor expression: the
    group runs through PyTorch, blocked layout and all."""
    real = compiler.node_tensor

    def broken(node, inputs):
        if any(b.op == "sigmoid" for b in node.body or [node]):
            raise Injected(f"node {node.name}")
        return real(node, inputs)

    monkeypatch.setattr(compiler, "node_tensor", broken)
    compiled = check_falls_back(*se, "build", "sigmoid")
    (gate,) = [n for n in compiled.graph.nodes if n.op == "torch"]
    assert gate.attrs["target"].startswith("minitc.") and "sigmoid" in gate.attrs["target"]


@pytest.mark.parametrize("step", ["default_schedule", "build"])
def test_a_kernel_whose_schedule_or_build_fails_runs_through_pytorch(se, monkeypatch, step):
    real = getattr(compiler, step)

    def broken(what, *args, **kwargs):  # a tensor (default_schedule) or a schedule (build)
        tensors = what.outputs if hasattr(what, "replay") else [what]
        if "conv2d_nchwc float32[1, 1, 12, 12, 3]" in describe(tensors):  # the stem's task
            raise Injected(step)
        return real(what, *args, **kwargs)

    monkeypatch.setattr(compiler, step, broken)
    compiled = check_falls_back(*se, "build", "conv2d_nchwc")
    assert len(compiled.fallbacks) == 1  # one task: its nodes all run through PyTorch
    assert any(n.op == "torch" for n in compiled.graph.nodes)


def test_a_model_whose_every_kernel_fails_runs_whole_through_pytorch(monkeypatch, tmp_path):
    """Every graph op the passes produce has a PyTorch form (torch_ops.py): blocked and Winograd
    convolutions, depthwise ones, pools, packed dense weights, layer norm, softmax, attention's
    batch matmuls, fused groups. Saved and loaded, the model runs the same."""

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.wino = nn.Conv2d(8, 8, 3, padding=1)  # 3x3, stride 1, 8 lanes: Winograd on 16x16
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.norm, self.fc = nn.LayerNorm(8), nn.Linear(8, 5)

        def forward(self, x):
            h = nn.functional.max_pool2d(self.dw(torch.relu(self.wino(self.stem(x)))), 2)
            h = nn.functional.avg_pool2d(h, 2)
            t = self.norm(h.flatten(2).transpose(1, 2))
            t = t + self.attn(t, t, t, need_weights=False)[0]
            return nn.functional.gelu(self.fc(t))

    def broken(outputs, *args, **kwargs):
        raise Injected("every build")

    torch.manual_seed(0)
    model, x = Mixed().eval(), torch.randn(1, 3, 16, 16)
    monkeypatch.setattr(compiler, "build", broken)
    compiled, warned = compile_warned(model, x)
    ran = [n.aten[0].node for n in compiled.graph.nodes if n.op == "torch" and isinstance(n.aten[0], torch_ops.GraphOp)]
    ops = {b.op for n in ran for b in (n.body or [n])}
    assert {"conv2d_winograd_nchwc", "depthwise_conv2d_nchwc", "max_pool2d_nchwc", "dense"} <= ops, ops
    assert len(warned) == 1 and all(n.op in ("torch", "view") for n in compiled.graph.nodes)
    with torch.no_grad():
        expected = model(x)
    np.testing.assert_allclose(compiled(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "m.minitc")
    np.testing.assert_allclose(tc.frontend.load(tmp_path / "m.minitc")(x).numpy(), expected.numpy(), atol=1e-5)


def test_user_errors_still_raise_their_own_errors(se):
    model, x = se
    compiled, _ = compile_warned(model, x)
    with pytest.raises(tc.DTypeError):
        compiled(x.double())
    with pytest.raises(tc.ConfigError):
        tc.compile(model, (x,), layout="NHWC")


def test_the_graph_check_names_what_is_wrong():
    x = Value("x", (2, 4), "float32")
    good = Graph([x], {}, [Node("y", "relu", ("x",), {}, (2, 4), "float32")], ["y"])
    verify(good)
    cases = {
        "reads z before": [Node("y", "add", ("x", "z"), {}, (2, 4), "float32")],
        "names two values x": [Node("x", "relu", ("x",), {}, (2, 4), "float32")],
        "changes the element count": [Node("y", "view", ("x",), {"shape": (3, 3)}, (3, 3), "float32")],
    }
    for message, nodes in cases.items():
        with pytest.raises(GraphError, match=message):
            verify(Graph([x], {}, nodes, [nodes[-1].name]))


def test_the_fallback_record_and_warning_name_the_minitc_line():
    try:
        torch_ops.run_node(Node("y", "no_such_op", ("x",), {}, (1,), "float32"), [torch.zeros(1)])
    except KeyError as e:
        text = fallback.error_text(e)
    assert text.startswith("KeyError: 'no_such_op' (at minitc/frontend/torch_ops.py:")
    record = fallback.Fallback("build", "node y", text)
    assert str(record).startswith("build node y: KeyError")


class ConstantOut(nn.Module):
    """Returns a Python int beside a tensor (MaskFormer-Swin returns a window size): the graph
    had no value to name for it, and the import raised, so the whole model ran through PyTorch."""

    def forward(self, x):
        return torch.relu(x) * 2, 16


def test_a_python_number_among_the_outputs_is_left_out_of_the_compiled_outputs(tmp_path):
    x = torch.randn(2, 8)
    model = ConstantOut().eval()
    compiled, messages = compile_warned(model, x)
    assert not messages and not compiled.fallbacks
    torch.testing.assert_close(compiled(x), model(x)[0])  # the tensor outputs, as from any compiled model
    compiled.save(tmp_path / "m.mtc")
    torch.testing.assert_close(tc.frontend.load(tmp_path / "m.mtc")(x), model(x)[0])


def test_any_internal_error_of_the_compile_falls_back_to_the_whole_model(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise Injected("the import")

    monkeypatch.setattr(compiler, "import_model", broken)
    x = torch.randn(1, 3, 16, 16)
    model = SEBlock().eval()
    compiled, messages = compile_warned(model, x)
    assert len(messages) == 1 and "Injected: the import" in messages[0]
    assert [f.stage for f in compiled.fallbacks] == ["compile"]
    torch.testing.assert_close(compiled(x), model(x))
    with pytest.raises(SavedModelError, match="no kernels to save"):
        compiled.save(tmp_path / "m.mtc")
    with pytest.raises(Injected):
        tc.compile(model, (x,), target=AVX2, db=False, fallback=False)


def test_a_task_that_no_workload_key_describes_still_falls_back_by_name():
    """A fallback's message names the task; a computation of booleans has no workload
    description, and naming it raised inside the fallback (cpmant, flaubert, xlm)."""
    x = tc.placeholder((4,), "float32", name="x")
    flags = tc.compute((4,), lambda i: x[i] > 0.0, name="flags")
    task = compiler.ModelTask(("k",), flags, ["n1", "n2"])
    assert str(task) == "flags x2"
