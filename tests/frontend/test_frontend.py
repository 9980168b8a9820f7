"""The model front end: torch.export import, graph passes, fallback to PyTorch, and compiled
models checked against PyTorch eager on small models (an MLP, a ResNet-style CNN, a transformer
encoder layer)."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend import import_model, unsupported  # noqa: E402
from minitc.frontend.passes import fold_batch_norm, fuse_dense_activation  # noqa: E402
from minitc.target import parse_target  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    """torchvision's ResNet BasicBlock, layer for layer."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.layers(self.pool(self.stem(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class EncoderLayer(nn.Module):
    """A BERT encoder layer: attention by linear, view, permute, matmul and softmax."""

    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def split(self, t):
        b, s, d = t.shape
        return t.view(b, s, self.heads, d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).reshape(b, s, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


@pytest.mark.parametrize(
    "make, shape",
    [(MLP, (4, 16)), (SmallResNet, (1, 3, 16, 16)), (EncoderLayer, (2, 8, 32))],
    ids=["mlp", "resnet", "encoder"],
)
def test_compiled_model_matches_torch(make, shape):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    compiled = tc.compile(model, (x,))
    assert not unsupported(compiled.graph), unsupported(compiled.graph)
    with torch.no_grad():
        close(compiled(x), model(x))
        x2 = torch.randn(*shape)
        close(compiled(x2), model(x2))


def test_mlp_graph_fuses_relu_into_the_dense_kernel():
    torch.manual_seed(0)
    graph = tc.compile(MLP(), (torch.randn(4, 16),)).graph
    assert [n.op for n in graph.nodes] == ["dense", "dense"]
    lanes = parse_target("llvm").lanes("float32")  # the host's: weights come in blocks of its vectors
    assert graph.nodes[0].attrs == {"weight_block": lanes, "activation": "relu"}
    text = str(graph)
    assert text.startswith("graph(x: float32[4, 16]) {")
    assert f"  const fc1.weight_t_blocked: float32[{32 // lanes}, 16, {lanes}]\n" in text  # packed once
    assert f"%linear = dense(%x, %fc1.weight_t_blocked, %fc1.bias, weight_block={lanes}, activation=relu)" in text
    assert text.rstrip().endswith("return %linear_1\n}")


def test_batch_norm_folds_into_the_convolution():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    graph = import_model(model, (x,))
    assert [n.op for n in graph.nodes] == ["conv2d", "add", "scale_shift"]
    folded = fold_batch_norm(graph)
    assert [n.op for n in folded.nodes] == ["conv2d", "add"]
    conv, add = folded.nodes
    assert conv.inputs[1].endswith("_folded") and add.inputs[0] == conv.name
    assert set(folded.constants) == {conv.inputs[1], add.inputs[1]}  # the unfolded weights are gone
    with torch.no_grad():
        close(tc.compile(model, (x,))(x), model(x))


@pytest.mark.parametrize("layout, conv", [("auto", "conv2d_nchwc"), ("nchw", "conv2d")])
def test_convolutions_take_bias_residual_and_relu_as_their_epilogue(layout, conv):
    """In channel blocks (8 lanes: every convolution of the model fills them) or in NCHW."""
    torch.manual_seed(0)
    model, x = SmallResNet().eval(), torch.randn(1, 3, 16, 16)
    compiled = tc.compile(model, (x,), target="llvm -mcpu=znver2 -num-cores=2", layout=layout)
    bodies = [[b.op for b in n.body] for n in compiled.graph.nodes if n.op == "fused"]
    assert bodies.count([conv, "add", "relu"]) == 3  # the stem and each block's first conv
    assert bodies.count([conv, "add", "add", "relu"]) == 2  # the second, with the residual
    assert [conv, "add"] in bodies  # the downsampling shortcut
    assert not any(n.op in (conv, "add", "relu") for n in compiled.graph.nodes)  # no separate passes
    with torch.no_grad():
        close(compiled(x), model(x))


def test_activation_fuses_only_when_the_product_has_no_other_reader():
    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = self.fc(x)
            return torch.relu(y) + y

    graph = fuse_dense_activation(import_model(TwoReaders(), (torch.randn(2, 8),)))
    assert [n.op for n in graph.nodes] == ["dense", "relu", "add"]


def test_encoder_graph_folds_transposes_and_fuses_residual_adds():
    torch.manual_seed(0)
    graph = tc.compile(EncoderLayer().eval(), (torch.randn(2, 8, 32),)).graph
    text = str(graph)
    ops = [n.op for n in graph.nodes if n.op != "view"]
    assert ops.count("permute") == 1  # the context back; q, k, v are read in place, k's transpose is gone
    assert "batch_matmul(%permute_view, %permute_1_t1, transpose_b=True)" in text
    fused = [n for n in graph.nodes if n.op == "fused"]
    # the head permutes are the batch matmuls' prologues, the scores' scale is the softmax's,
    # the residual adds are the dense epilogues
    assert [[b.op for b in n.body] for n in fused] == [
        ["permute", "view", "permute", "view", "batch_matmul"],
        ["div", "softmax"],
        ["permute", "view", "batch_matmul"],
        ["dense", "add"],
        ["dense", "add"],
    ]
    assert "%add_2d = fused[dense, add](%permute_4_view_view, %o.weight_t_blocked, %o.bias, %x_2d)" in text
    assert "      %add_2d = add(%x_2d, %linear_3)" in text  # the body, indented under its group
    assert "%add = view(%add_2d, shape=[2, 8, 32])" in text


def test_elementwise_chains_become_one_kernel():
    class Chain(nn.Module):
        def forward(self, x, y):
            return torch.sigmoid(torch.relu(x * 2.0) + y)

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    compiled = tc.compile(Chain(), (x, y))
    (node,) = compiled.graph.nodes
    assert node.op == "fused" and [b.op for b in node.body] == ["mul", "relu", "add", "sigmoid"]
    assert node.inputs == ("x", "y") and len(compiled.tasks) == 1
    close(compiled(x, y), Chain()(x, y))


class Conv1DGelu(nn.Module):
    """GPT-2's MLP: Conv1D layers (addmm with an [in, out] weight) and the tanh GELU, which
    cubes through pow; then ReLU6 (hardtanh) and a one-sided clamp."""

    def __init__(self, d=16, ff=32):
        super().__init__()
        self.w1, self.b1 = nn.Parameter(torch.randn(d, ff) / 4), nn.Parameter(torch.randn(ff))
        self.w2, self.b2 = nn.Parameter(torch.randn(ff, d) / 4), nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = torch.addmm(self.b1, x, self.w1)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        y = torch.addmm(self.b2, h, self.w2)
        return nn.functional.relu6(y) + torch.clamp(y, min=-0.5) + torch.pow(y, 2)


def test_conv1d_tanh_gelu_relu6_and_clamp_compile_without_torch():
    torch.manual_seed(0)
    model, x = Conv1DGelu().eval(), torch.randn(4, 16)
    x[0, :3] = torch.tensor([float("nan"), 7.0, -7.0])
    compiled = tc.compile(model, (x,))
    assert not unsupported(compiled.graph), unsupported(compiled.graph)
    ops = [n.op for n in compiled.graph.nodes]
    assert "matmul" not in ops and ops.count("fused") == 2  # each addmm is a dense anchor of a group
    dense_bodies = [[b.op for b in n.body] for n in compiled.graph.nodes if n.op == "fused"]
    assert all(body[0] == "dense" for body in dense_bodies), dense_bodies
    assert "clamp" in dense_bodies[1] and dense_bodies[0].count("mul") >= 4  # pow(h, 3): two products
    with torch.no_grad():
        ours, theirs = compiled(x), model(x)
    np.testing.assert_array_equal(ours[0].isnan().numpy(), theirs[0].isnan().numpy())
    close(ours, theirs)
    # the Conv1D weights, stored [in, out], are packed into blocks of output features
    lanes = parse_target("llvm").lanes("float32")
    dense = [b for n in compiled.graph.nodes for b in n.body if b.op == "dense"]
    assert [d.attrs["weight_block"] for d in dense] == [lanes, lanes]
    assert [d.inputs[1] for d in dense] == ["w1_blocked", "w2_blocked"]
    blocks = compiled.graph.constants["w1_blocked"]  # [out / lanes, in, lanes]
    assert np.array_equal(blocks.transpose(1, 0, 2).reshape(16, 32), model.w1.detach().numpy())


class WithUnsupported(nn.Module):
    def forward(self, x):
        return torch.cumsum(torch.relu(x), 1) + torch.flip(x, (1,))


def test_unsupported_ops_run_through_torch_and_are_reported_together():
    x = torch.randn(3, 5)
    reported = r"PyTorch: aten\.cumsum\.default x1 \(no converter for this operator\), aten\.flip\.default x1 \("
    with pytest.warns(UserWarning, match=reported):
        compiled = tc.compile(WithUnsupported(), (x,))
    assert unsupported(compiled.graph) == {"aten.cumsum.default": 1, "aten.flip.default": 1}
    close(compiled(x), WithUnsupported()(x))


def test_a_scalar_value_runs_through_torch():
    """minitc's tensors have at least one axis: the sum to a 0-d tensor, and the product that
    reads it, run through PyTorch instead of failing the compile."""

    class Scaled(nn.Module):
        def forward(self, x):
            return torch.relu(x) * x.sum()

    x = torch.randn(8, 4)
    with pytest.warns(UserWarning, match=r"through PyTorch: aten\.mul\.Tensor x1 \(.*\), aten\.sum\.dim_IntList x1"):
        compiled = tc.compile(Scaled(), (x,))
    assert [n.op for n in compiled.graph.nodes] == ["relu", "torch", "torch"]
    close(compiled(x), Scaled()(x))


def test_fallback_false_lists_every_unsupported_op_in_one_error():
    with pytest.raises(tc.MinitcError, match=r"2 operator\(s\).*cumsum.*flip"):
        tc.compile(WithUnsupported(), (torch.randn(3, 5),), fallback=False)


def test_new_input_shapes_compile_again_and_say_so():
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = tc.compile(model, (torch.randn(4, 16),))
    x = torch.randn(6, 16)
    with pytest.warns(UserWarning, match="new input shapes"):
        out = compiled(x)
    with torch.no_grad():
        close(out, model(x))


def test_wrong_inputs_get_clear_errors():
    compiled = tc.compile(MLP(), (torch.randn(4, 16),))
    with pytest.raises(tc.DTypeError, match="expected float32, got float64"):
        compiled(torch.randn(4, 16, dtype=torch.float64))


def test_tasks_share_one_kernel_between_identical_layers():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)))

    compiled = tc.compile(Twice(), (torch.randn(4, 16),))
    dense = [t for t in compiled.tasks if t.key[0] == "dense"]
    assert [t.weight for t in dense] == [1, 1]  # one with the tanh epilogue, one without

    class Same(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            return self.b(self.a(x))

    assert [t.weight for t in tc.compile(Same(), (torch.randn(4, 16),)).tasks] == [2]


def test_a_model_that_cannot_be_exported_gets_one_clear_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(tc.MinitcError, match="torch.export could not export DataDependent"):
        tc.compile(DataDependent(), (torch.randn(3),))


def test_torch_compile_backend_minitc(monkeypatch):
    """The backend found by its name runs the graph through minitc's kernels: a fallback to
    eager would give the same numbers, so the test also counts the compiled graph's calls."""
    from minitc.frontend import dynamo

    calls = []
    original = dynamo.CompiledGraph.__call__
    monkeypatch.setattr(
        dynamo.CompiledGraph, "__call__", lambda self, *args: calls.append(self) or original(self, *args)
    )
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = MLP().eval()
    x = torch.randn(4, 16)
    fast = torch.compile(model, backend="minitc")
    with torch.no_grad():
        close(fast(x), model(x))
    assert calls and calls[-1].compiled is not None and len(calls[-1].compiled.tasks) >= 2


def test_tuning_across_the_model_writes_records_that_a_second_compile_uses(tmp_path):
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(4, 16)
    db = str(tmp_path / "records.db")
    rounds = []
    tuned = tc.compile(model, (x,), db=db, trials=8, strategy="random", progress=lambda i, s: rounds.append(i))
    assert len(tuned.tune_results) == len(tuned.tasks) == 2
    assert sorted(set(rounds)) == [0, 1]  # both tasks got rounds within the 8 trials
    assert all(r.best_ms is not None for r in tuned.tune_results)
    with torch.no_grad():
        close(tuned(x), model(x))
    from minitc.autotune.database import Database

    with Database(db) as records:
        assert len(records) >= 8
    again = tc.compile(model, (x,), db=db)  # no tuning: the records' best programs
    close(again(x), tuned(x))


def test_tc_compile_passes_the_scheduler_the_runner_and_the_space_to_every_task(tmp_path):
    """tc.compile(model, trials=N, scheduler=..., runner=..., space=...): the runner measures
    every task's candidates (here a LocalRunner of one's own, counting), the scheduler picks the
    rounds, and the space is each task's (the generic rules only: no template program)."""
    from minitc.autotune.database import Database
    from minitc.autotune.runner import LocalRunner
    from minitc.autotune.tuner import decode_trace

    class Counting(LocalRunner):
        measured = 0

        def run(self, task, built):
            Counting.measured += len(built)
            return super().run(task, built)

    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(4, 16)
    db = tmp_path / "records.db"
    runner = Counting()
    try:
        compiled = tc.compile(
            model, (x,), db=db, trials=4, strategy="random", scheduler="round-robin", runner=runner, space="generic"
        )
    finally:
        runner.close()
    assert Counting.measured >= 4 and [r.trials for r in compiled.tune_results] == [2, 2]
    with Database(db) as records:
        traces = [r.trace for task in compiled.tune_results for r in records.records(task.workload)]
    assert len(traces) >= 4 and {decode_trace(t)[0][0] for t in traces} == {"generic"}
    with torch.no_grad():
        close(compiled(x), model(x))


def test_benchmark_reports_the_total_and_each_task():
    torch.manual_seed(0)
    compiled = tc.compile(EncoderLayer().eval(), (torch.randn(2, 8, 32),))
    report = compiled.benchmark(repeats=3)
    assert set(report["tasks_ms"]) == {str(t) for t in compiled.tasks}
    assert report["total_ms"] > 0 and all(v > 0 for v in report["tasks_ms"].values())
    assert sum(report["tasks_ms"].values()) <= report["total_ms"]


def test_save_and_load_round_trip_without_the_torch_model(tmp_path):
    from minitc.frontend import load

    torch.manual_seed(0)
    model = nn.Sequential(SmallResNet(), nn.Softmax(-1)).eval()
    x = torch.randn(1, 3, 16, 16)
    compiled = tc.compile(WithUnsupported(), (torch.randn(3, 5),))  # a torch node must survive too
    for m, inputs in ((compiled, (torch.randn(3, 5),)), (tc.compile(model, (x,)), (x,))):
        path = tmp_path / "m.minitc"
        m.save(path)
        loaded = load(path)
        assert str(loaded.graph) == str(m.graph)
        assert [t.trace.to_json() for t in loaded.tasks] == [t.trace.to_json() for t in m.tasks]
        close(loaded(*inputs), m(*inputs), rtol=0, atol=0)
    with pytest.raises(tc.ShapeError, match="loaded from .* runs inputs of shapes \\[\\[1, 3, 16, 16\\]\\] only"):
        loaded(torch.randn(2, 3, 16, 16))


def test_a_damaged_saved_model_gets_a_clear_error(tmp_path):
    from minitc.frontend import SavedModelError, load

    path = tmp_path / "m.minitc"
    tc.compile(MLP(), (torch.randn(4, 16),)).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SavedModelError, match="m.minitc: not a saved minitc model, or damaged"):
        load(path)
    (tmp_path / "text.minitc").write_text("hello")
    with pytest.raises(SavedModelError, match="text.minitc: not a saved minitc model"):
        load(tmp_path / "text.minitc")


def test_the_arena_never_gives_two_live_results_the_same_bytes():
    from minitc.frontend.memory import lifetimes, nbytes

    torch.manual_seed(0)
    compiled = tc.compile(SmallResNet().eval(), (torch.randn(1, 3, 16, 16),))
    plan, graph = compiled.plan, compiled.graph
    spans, sizes = lifetimes(graph), {n.name: nbytes(n) for n in graph.nodes}
    placed = sorted(plan.offsets)
    assert placed and graph.outputs[0] not in plan.offsets  # the output is the caller's, not the arena's
    for a in placed:
        for b in placed:
            if a < b and spans[a][0] <= spans[b][1] and spans[b][0] <= spans[a][1]:
                lo, hi = sorted(
                    [(plan.offsets[a], plan.offsets[a] + sizes[a]), (plan.offsets[b], plan.offsets[b] + sizes[b])]
                )
                assert lo[1] <= hi[0], (a, b)
    assert plan.arena_bytes < sum(sizes[n] for n in placed)  # buffers are reused
    x = torch.randn(1, 3, 16, 16)
    first = compiled(x).clone()
    compiled(torch.randn(1, 3, 16, 16))
    close(compiled(x), first)  # the reused arena leaves nothing behind between calls


def test_kernel_calls_are_checked_on_the_first_run_only(monkeypatch):
    """The first run of a plan calls every kernel through its checks; later runs, with the same
    static shapes and arena buffers, call the kernels on constants and arena buffers bound to
    their addresses once, the others unchecked, with the same results."""
    from minitc.backends.function import Function, HostCallable

    calls = {"checked": 0, "unchecked": 0, "bound": 0}
    checked_call, unchecked_run, bind = HostCallable.__call__, HostCallable.run_unchecked, Function.bind

    def spy_call(self, *args, **kwargs):
        calls["checked"] += 1
        return checked_call(self, *args, **kwargs)

    def spy_run(self, arrays):
        calls["unchecked"] += 1
        return unchecked_run(self, arrays)

    def spy_bind(self, arrays):
        run = bind(self, arrays)

        def bound():
            calls["bound"] += 1
            run()

        return bound

    monkeypatch.setattr(HostCallable, "__call__", spy_call)
    monkeypatch.setattr(HostCallable, "run_unchecked", spy_run)
    monkeypatch.setattr(Function, "bind", spy_bind)
    torch.manual_seed(0)
    model = SmallResNet().eval()
    x = torch.randn(1, 3, 16, 16)
    compiled = tc.compile(model, (x,))
    kernels = [node for kind, node, _ in compiled.plan.steps if kind == "kernel"]
    in_arena = [node for node in kernels if node.name in compiled.plan.offsets]
    input_views = {compiled.graph.inputs[0].name}
    for kind, node, _ in compiled.plan.steps:
        if kind == "view" and node.inputs[0] in input_views:
            input_views.add(node.name)
    on_input = [node for node in in_arena if input_views.intersection(node.inputs)]
    first = compiled(x).clone()
    assert calls == {"checked": len(kernels), "unchecked": 0, "bound": 0}
    calls.update(checked=0)
    compiled(torch.randn(1, 3, 16, 16))
    second = compiled(x)
    assert calls["bound"] == 2 * (len(in_arena) - len(on_input)) > 0
    assert calls["unchecked"] == 2 * len(on_input)
    assert calls["checked"] == 2 * (len(kernels) - len(in_arena))
    close(second, first)
    with torch.no_grad():
        close(second, model(x))


def test_zero_dimensional_outputs_keep_their_shape():
    """A 0-d output made from a 0-d constant (a Mamba-style cache's step counter) is 0-d, as in
    eager: numpy's ascontiguousarray made such constants (1,)."""

    class Scalars(torch.nn.Module):
        def forward(self, x):
            return x * 2, x.sum() * 0 + torch.tensor(1.0), (x * 3).sum()

    x = torch.randn(4, 8)
    model = Scalars().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the 0-d values run through PyTorch
        got = tc.compile(model, (x,))(x)
    for out, want in zip(got, model(x)):
        assert out.shape == want.shape
        torch.testing.assert_close(out, want)
