"""Whole models compiled for the GPU (issue 42), run on the simulator (target "cuda-sim"):
every fused group gets a GPU template, and the outputs match eager PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend.compiler import extract_tasks  # noqa: E402
from minitc.templates import template_schedule  # noqa: E402


def _close(got, want, tol=1e-4):
    want = want if isinstance(want, torch.Tensor) else want[0]
    scale = float(want.abs().max()) or 1.0
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=0, atol=tol * scale)


class ConvBlock(nn.Module):
    """conv + batch norm + relu, a strided conv with a 1x1 shortcut, the residual add: the
    fused conv epilogues of a ResNet (bias, residual, activation)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.conv = nn.Conv2d(8, 16, 3, 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.short = nn.Conv2d(8, 16, 1, 2, bias=False)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.bn(self.conv(x)) + self.short(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class Encoder(nn.Module):
    """A transformer encoder layer: dense + bias (+ GELU, + the residual), attention, layer norm."""

    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        x = self.ln1(x + self.attn(x, x, x, need_weights=False)[0])
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


def _batch_norms_not_identity(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize(
    "make",
    [
        lambda: (_batch_norms_not_identity(ConvBlock()).eval(), (torch.randn(1, 3, 12, 12),)),
        lambda: (Encoder().eval(), (torch.randn(2, 8, 32),)),
    ],
    ids=["conv-block", "encoder"],
)
def test_a_model_compiled_for_the_gpu_matches_eager(make):
    torch.manual_seed(0)
    model, inputs = make()
    compiled = tc.compile(model, inputs, target="cuda-sim")
    with torch.no_grad():
        _close(compiled(*inputs), model(*inputs))


def test_fused_epilogues_get_the_gpu_templates():
    """The conv and dense tasks under a fused epilogue (bias, activation, residual) are scheduled
    by their GPU templates (input tiles staged in shared memory), not by the flat
    one-thread-per-output binding."""
    torch.manual_seed(0)
    model, inputs = _batch_norms_not_identity(ConvBlock()).eval(), (torch.randn(1, 3, 12, 12),)
    graph = tc.compile(model, inputs, target="cuda-sim").graph
    tasks = [t for t in extract_tasks(graph, "cuda-sim") if str(t).split()[0] in ("conv2d", "dense_epilogue")]
    assert len(tasks) >= 4
    for task in tasks:
        trace = template_schedule(task.outputs, "cuda-sim").trace.to_json()
        assert '"shared"' in trace, str(task)


def _conv_block():
    torch.manual_seed(0)
    model = _batch_norms_not_identity(ConvBlock()).eval()
    return model, tc.compile(model, (torch.randn(1, 3, 12, 12),), target="cuda-sim")


def test_the_device_plan_returns_outputs_the_next_call_does_not_overwrite():
    from minitc.frontend.device_runtime import DevicePlan

    model, compiled = _conv_block()
    assert isinstance(compiled.plan, DevicePlan) and compiled.plan.arena_bytes > 0
    x1, x2 = torch.randn(1, 3, 12, 12), torch.randn(1, 3, 12, 12)
    y1 = compiled(x1)
    y2 = compiled(x2)
    with torch.no_grad():
        _close(y1, model(x1))
        _close(y2, model(x2))
    with pytest.raises(tc.DTypeError, match="expected float32, got float64"):
        compiled(x1.double())
    with pytest.raises(tc.ShapeError, match="takes 1 input"):
        compiled.plan.check_inputs([x1, x2])


def test_the_second_call_captures_the_steps_and_later_calls_replay_them(monkeypatch):
    """On a GPU the second call captures a CUDA graph; here the capture is the plan's own steps
    (the simulator has no graphs), to check the calls around it: inputs copied into the
    captured buffers, the captured values read back, the outputs copied out."""
    from minitc.frontend.device_runtime import DevicePlan

    model, compiled = _conv_block()
    plan, runs, captures = compiled.plan, [], []
    execute = DevicePlan._execute

    def counting(self, times):
        runs.append(len(captures))
        return execute(self, times)

    def capture(self):
        captures.append(1)
        values = self._execute(None)
        return (lambda: self._execute(None)), values

    monkeypatch.setattr(DevicePlan, "_execute", counting)
    monkeypatch.setattr(DevicePlan, "_capture", capture)
    plan.capture_again()
    inputs = [torch.randn(1, 3, 12, 12) for _ in range(4)]
    outputs = [compiled(x) for x in inputs]
    assert len(captures) == 1 and runs == [0, 1, 1, 1, 1]  # plain, captured + replayed, replayed x2
    assert plan.replaying
    with torch.no_grad():
        for x, y in zip(inputs, outputs):
            _close(y, model(x))


def test_a_gpu_model_saves_benchmarks_and_loads(tmp_path):
    from minitc.frontend import load

    model, compiled = _conv_block()
    x = torch.randn(1, 3, 12, 12)
    report = compiled.benchmark(repeats=2)
    assert set(report["tasks_ms"]) == {str(t) for t in compiled.tasks} and report["total_ms"] > 0
    compiled.save(tmp_path / "m.minitc")
    loaded = load(tmp_path / "m.minitc")
    assert loaded.target == "cuda-sim"
    np.testing.assert_array_equal(loaded(x).numpy(), compiled(x).numpy())


def _torch_cuda() -> bool:
    from cuda_tools import cupy_usable

    return cupy_usable() and torch.cuda.is_available()


@pytest.mark.cuda
@pytest.mark.skipif(not _torch_cuda(), reason="needs CuPy, a CUDA GPU and torch with CUDA")
@pytest.mark.parametrize("name", ["conv-block", "encoder"])
def test_on_the_gpu_a_model_runs_from_cuda_tensors_and_replays_a_cuda_graph(name):
    torch.manual_seed(0)
    if name == "conv-block":
        model, inputs = _batch_norms_not_identity(ConvBlock()).eval(), (torch.randn(2, 3, 12, 12),)
    else:
        model, inputs = Encoder().eval(), (torch.randn(2, 8, 32),)
    model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
    compiled = tc.compile(model, inputs, target="cuda")
    with torch.no_grad():
        expected = model(*inputs)
        results = [compiled(*inputs) for _ in range(3)]  # plain, captured, replayed
    assert compiled.plan.replaying
    for y in results:
        assert y.device.type == "cuda"
        _close(y.cpu(), expected.cpu())
    report = compiled.benchmark(repeats=3)
    assert report["total_ms"] > 0 and all(ms > 0 for ms in report["tasks_ms"].values())


@pytest.mark.parametrize("strategy", ["random", "tlm"])
def test_tuning_a_model_for_the_gpu_measures_its_tasks_with_the_gpu_runner(tmp_path, strategy):
    """tc.compile(..., trials=) on a GPU target tunes each task with the GPU runner (here the
    simulator's), writes records for the GPU, and a compile from them stays correct; with the
    tlm strategy the GPU language model writes every task's programs, all of them legal."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    db = str(tmp_path / "gpu.db")
    tuned = tc.compile(model, (x,), target="cuda-sim", db=db, trials=8 if strategy == "tlm" else 4, strategy=strategy)
    assert len(tuned.tune_results) == len(tuned.tasks) and all(r.best_ms is not None for r in tuned.tune_results)
    if strategy == "tlm":
        stats = [r.search_stats for r in tuned.tune_results]
        assert all(s["generated"] > 0 and s["invalid"] == 0 for s in stats)
    from minitc.autotune.database import Database

    with Database(db) as records:
        assert len(records) >= 4
    with torch.no_grad():
        _close(tc.compile(model, (x,), target="cuda-sim", db=db)(x), model(x))


class WinogradBlock(nn.Module):
    """A ResNet basic block's two 3x3 stride-1 convolutions, wide enough for Winograd on a GPU."""

    def __init__(self, c=32):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.strided = nn.Conv2d(c, c, 3, 2, 1)  # stride 2: the direct template

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.strided(y)


def test_3x3_convolutions_run_by_winograd_on_the_gpu_with_their_epilogues():
    torch.manual_seed(0)
    model = _batch_norms_not_identity(WinogradBlock()).eval()
    x = torch.randn(1, 32, 8, 8)
    compiled = tc.compile(model, (x,), target="cuda-sim")
    anchors = [next(m.op for m in n.body if "conv" in m.op) for n in compiled.graph.nodes if n.body]
    anchors += [n.op for n in compiled.graph.nodes if "conv" in n.op]
    assert sorted(anchors) == ["conv2d", "conv2d_winograd", "conv2d_winograd"]
    with torch.no_grad():
        _close(compiled(x), model(x))
    cpu = tc.compile(model, (x,), db=False)  # the CPU keeps its own (channel-blocked) layouts
    assert not any(
        n.op == "conv2d_winograd" or any(m.op == "conv2d_winograd" for m in n.body or []) for n in cpu.graph.nodes
    )


def test_dense_weights_are_stored_in_out_once_for_the_gpu():
    """On a GPU the model compiler hands the dense template its weight as [IN, OUT] (the layout
    its shared tile of B fills with float4 copies), transposed once at compile time."""
    torch.manual_seed(0)
    model, x = Encoder().eval(), torch.randn(2, 8, 32)
    compiled = tc.compile(model, (x,), target="cuda-sim")
    dense = [m for n in compiled.graph.nodes for m in (n.body or [n]) if m.op == "dense"]
    assert dense and all(m.attrs.get("weight_in_out") for m in dense)
    for m in dense:  # [IN, OUT]: 32 features in (the model's width), the layer's outputs out
        assert compiled.graph.constants[m.inputs[1]].shape in ((32, m.shape[-1]), (64, m.shape[-1]))
    with torch.no_grad():
        _close(compiled(x), model(x))
