"""A model's plan under load and misuse (issue 55): the checked mode (MINITC_CHECK=1,
minitc/frontend/checked.py) catches an injected wrong pointer, wrong shape, arena overlap and
write past an output, each naming the kernel and the value; and a torch node's view of an arena
result is no longer overwritten when the arena reuses its bytes."""

import ctypes
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.backends import function as host  # noqa: E402
from minitc.backends.function import BoundCall  # noqa: E402
from minitc.errors import RuntimeCheckError  # noqa: E402
from minitc.frontend import runtime  # noqa: E402
from minitc.frontend.checked import CheckedKernel  # noqa: E402
from minitc.frontend.runtime import Plan  # noqa: E402


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x):
        return self.net(x)


class SelectOfAnArenaResult(nn.Module):
    """y[:, 0, 0] runs through PyTorch (aten.select) and returns a view of y's arena bytes; the
    arena reuses them for the next kernel's result while the view is still to be read."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 64), nn.Linear(16, 32), nn.Linear(16, 32)

    def forward(self, x):
        y = torch.relu(self.a(x)).reshape(1, 4, 2, 32)
        first = y[:, 0, 0]
        return first + torch.relu(self.b(x)) * 3.0 + torch.sigmoid(self.c(x))


def compiled_mlp(monkeypatch, check="1"):
    monkeypatch.setenv("MINITC_CHECK", check)
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(4, 16)
    return model, x, tc.compile(model, (x,), db=False)


def kernels_of(plan) -> dict:
    return {node.name: k for kind, node, k in plan.steps if kind == "kernel"}


@pytest.mark.parametrize("check", ["0", "1"])
def test_a_torch_view_of_an_arena_result_survives_the_arena_reusing_its_bytes(monkeypatch, check):
    """Before the fix the output was off by up to 0.73 (its `first` read the next kernel's result)."""
    monkeypatch.setenv("MINITC_CHECK", check)
    torch.manual_seed(0)
    model, x = SelectOfAnArenaResult().eval(), torch.randn(4, 16)
    compiled = tc.compile(model, (x,), db=False)
    offsets = compiled.plan.offsets
    assert offsets["linear"] == offsets["linear_2"]  # the arena does reuse the bytes
    with torch.no_grad():
        expected = model(x).numpy()
    for _ in range(2):  # the first run and the bound steps
        np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_default_plans_have_no_checks(monkeypatch):
    _, x, compiled = compiled_mlp(monkeypatch, check="0")
    plan = compiled.plan
    assert plan.checker is None and plan._run_steps is plan.steps
    compiled(x)
    bound = [call for kind, _, call in plan._bound if kind == "bound"]
    assert bound and all(isinstance(call, BoundCall) for call in bound)  # plain kernels, no CheckedKernel


def test_checked_mode_catches_a_wrong_pointer(monkeypatch):
    model, x, compiled = compiled_mlp(monkeypatch)
    real = host._addresses

    def stray(arrays):  # the [4, 32] result passed as address 0x81, as in the crash
        return [0x81 if a.shape == (4, 32) else p for a, p in zip(arrays, real(arrays))]

    monkeypatch.setattr(host, "_addresses", stray)
    with pytest.raises(
        RuntimeCheckError, match=r"kernel \w+ \(node linear_1\): the pointer for value linear_1 .* 0x81"
    ):
        Plan(compiled.graph, kernels_of(compiled.plan)).run([x.numpy()])


def test_checked_mode_catches_a_wrong_pointer_in_a_bound_call(monkeypatch):
    """Later runs call kernels bound to addresses once: a bound address that is not its value's."""
    model, x, compiled = compiled_mlp(monkeypatch)
    real_bind = host.Function.bind

    def bind_off_by_a_page(self, arrays):
        bound = real_bind(self, arrays)
        return replace(bound, args=(*bound.args[:-1], bound.args[-1] + 4096))

    monkeypatch.setattr(host.Function, "bind", bind_off_by_a_page)
    plan = Plan(compiled.graph, kernels_of(compiled.plan))
    plan.run([x.numpy()])  # the first run checks and binds
    with pytest.raises(RuntimeCheckError, match=r"kernel \w+ \(node linear_1\): the pointer for value linear_1"):
        plan.run([x.numpy()])


def test_checked_mode_catches_a_wrong_shape(monkeypatch):
    """A kernel handed a buffer that is not its own (the issue's ShapeError, caught before the call)."""
    model, x, compiled = compiled_mlp(monkeypatch)
    kernels = kernels_of(compiled.plan)
    kernels["linear_1"] = kernels["linear"]  # a [4, 16] -> [4, 64] kernel on the [4, 64] -> [4, 32] node
    with pytest.raises(RuntimeCheckError, match=r"kernel \w+ \(node linear_1\): value \w+ is float32\[4, 64\]"):
        Plan(compiled.graph, kernels).run([x.numpy()])


def test_checked_mode_catches_an_arena_overlap(monkeypatch):
    model, x, compiled = compiled_mlp(monkeypatch)
    real = runtime.plan_arena

    def everything_at_zero(graph, guard=0):
        offsets, size = real(graph, guard)
        return dict.fromkeys(offsets, 0), size

    monkeypatch.setattr(runtime, "plan_arena", everything_at_zero)
    plan = Plan(compiled.graph, kernels_of(compiled.plan))
    with pytest.raises(
        RuntimeCheckError, match=r"kernel \w+ \(node linear_1\): its output linear_1 overlaps value linear\b"
    ):
        plan.run([x.numpy()])


def test_checked_mode_catches_a_write_past_an_output(monkeypatch):
    model, x, compiled = compiled_mlp(monkeypatch)
    kernels = kernels_of(compiled.plan)
    faulty = kernels["linear"]
    real_run = type(faulty)._run

    def run_and_overrun(arrays):
        real_run(faulty, arrays)
        out = arrays[-1]
        ctypes.memset(out.__array_interface__["data"][0] + out.nbytes, 0, 4)  # one float past the end

    monkeypatch.setattr(faulty, "_run", run_and_overrun)
    with pytest.raises(RuntimeCheckError, match=r"kernel \w+ \(node linear\) wrote past the end of value linear\b"):
        Plan(compiled.graph, kernels).run([x.numpy()])


def test_checked_runs_give_the_default_runs_results(monkeypatch):
    model, x, checked = compiled_mlp(monkeypatch, check="1")
    _, _, default = compiled_mlp(monkeypatch, check="0")
    assert checked.plan.checker is not None
    checked(x)
    bound = [call for kind, _, call in checked.plan._bound if kind == "bound"]
    assert bound and all(isinstance(call.func.__self__, CheckedKernel) for call in bound)
    for _ in range(3):
        np.testing.assert_array_equal(checked(x).numpy(), default(x).numpy())


class SqueezeExcitation(nn.Module):
    """The global mean of a blocked (NCHWc) value read by a convolution: the layout pass named
    both the mean's blocked result and the blocked conversion of its NCHW value `mean_nchwc`."""

    def __init__(self):
        super().__init__()
        self.stem, self.down, self.up = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 8, 1), nn.Conv2d(8, 32, 1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        return h * torch.sigmoid(self.up(torch.relu(self.down(h.mean((2, 3), keepdim=True)))))


@pytest.mark.parametrize("check", ["0", "1"])
def test_a_squeeze_excitation_block_runs_each_kernel_on_its_own_buffers(monkeypatch, check):
    """Before the fix: ShapeError 'input in0 has shape (1, 2, 32, 32, 16), expected (1, 2, 16, 1,
    1)' on the first call, as the issue's transformers RegNet at 224x224 (1, 2, 112, 112, 16)."""
    monkeypatch.setenv("MINITC_CHECK", check)
    torch.manual_seed(0)
    model, x = SqueezeExcitation().eval(), torch.randn(1, 3, 32, 32)
    compiled = tc.compile(model, (x,), db=False)
    names = [node.name for node in compiled.graph.nodes]
    assert len(names) == len(set(names)) and any(n.endswith("_nchwc") for n in names)
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_checked_mode_refuses_a_graph_that_names_two_values_alike(monkeypatch):
    model, x, compiled = compiled_mlp(monkeypatch)
    graph = compiled.graph.copy()
    graph.nodes[1] = replace(graph.nodes[1], name=graph.nodes[0].name)
    with pytest.raises(RuntimeCheckError, match=f"names more than one value {graph.nodes[0].name}"):
        Plan(graph, kernels_of(compiled.plan))
