"""The template's program or the records' best, chosen inside the model (minitc/frontend/choice.py).

The kernels here are real minitc kernels; one side is slowed by a fixed sleep so that which side
is faster is known, whatever the machine."""

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend.choice import choose_programs  # noqa: E402
from minitc.templates import template_schedule  # noqa: E402

DELAY = 0.004  # seconds: far above a tiny dense kernel's time and a shared machine's jitter


class Slowed:
    """A compiled kernel that sleeps before each call."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, out=None):
        time.sleep(DELAY)
        return self.fn(*args, out=out)

    def run_unchecked(self, arrays):
        time.sleep(DELAY)
        self.fn.run_unchecked(arrays)

    def bind(self, arrays):
        bound = self.fn.bind(arrays)

        def call():
            time.sleep(DELAY)
            bound()

        return call


def _compiled():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    compiled = tc.compile(model, (x,), db=False)
    kernels = {node.name: fn for kind, node, fn in compiled.plan.steps if kind == "kernel"}
    return compiled, kernels, [x.numpy()]


def test_a_tuned_program_slower_in_the_model_is_dropped():
    compiled, kernels, arrays = _compiled()
    first = compiled.tasks[0]
    slow = {n: Slowed(kernels[n]) for n in first.nodes}
    chosen, choices = choose_programs(compiled.graph, compiled.tasks, kernels, slow, arrays, rounds=3)
    assert [c.kept for c in choices] == ["template"]
    assert choices[0].task == str(first) and choices[0].tuned_ms > choices[0].template_ms + 1e3 * DELAY / 2
    assert all(chosen[n] is kernels[n] for n in kernels)


def test_a_tuned_program_faster_in_the_model_is_kept():
    compiled, kernels, arrays = _compiled()
    first = compiled.tasks[0]
    slow_template = {**kernels, **{n: Slowed(kernels[n]) for n in first.nodes}}
    fast = {n: kernels[n] for n in first.nodes}
    chosen, choices = choose_programs(compiled.graph, compiled.tasks, slow_template, fast, arrays, rounds=3)
    assert [c.kept for c in choices] == ["tuned"]
    assert all(chosen[n] is kernels[n] for n in first.nodes)


def test_nothing_contested_runs_nothing():
    compiled, kernels, arrays = _compiled()
    chosen, choices = choose_programs(compiled.graph, compiled.tasks, kernels, {}, [None], rounds=3)
    assert choices == [] and chosen == kernels  # the inputs were never touched


def test_a_compile_from_records_chooses_each_contested_task_and_stays_correct(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    db = str(tmp_path / "records.db")
    tuned = tc.compile(model, (x,), db=db, trials=8, strategy="random")
    again = tc.compile(model, (x,), db=db)  # the same records: decided again
    for compiled in (tuned, again):
        template = {str(t): template_schedule(t.outputs).trace.to_json() for t in compiled.tasks}
        for choice in compiled.choices:
            task = next(t for t in compiled.tasks if str(t) == choice.task)
            assert (task.trace.to_json() == template[choice.task]) == (choice.kept == "template")
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_task_its_template_refuses_runs_as_the_naive_loop_nest(monkeypatch):
    """A template error on an unusual but valid task does not stop the model from compiling:
    the task runs its naive loop nest, correct, and a warning names it and the reason."""
    from minitc.frontend import compiler

    real = compiler.default_schedule

    def refusing(outputs, target="llvm"):
        if "dense" in str(outputs):
            raise tc.ScheduleError("planted: this template refuses")
        return real(outputs, target)

    monkeypatch.setattr(compiler, "default_schedule", refusing)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    with pytest.warns(UserWarning, match="no template schedule for task .*planted: this template refuses"):
        compiled = tc.compile(model, (x,), db=False)
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_compiled_model_takes_numpy_arrays_too():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU()).eval()
    x = torch.randn(4, 16)
    for target in ("llvm", "cuda-sim"):
        compiled = tc.compile(model, (x,), target=target, db=False)
        with torch.no_grad():
            np.testing.assert_allclose(compiled(x.numpy()).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
            other = np.random.default_rng(0).standard_normal((2, 16)).astype("float32")
            with pytest.warns(UserWarning, match="new input shapes"):  # another shape compiles again, from numpy
                got = compiled(other)
            np.testing.assert_allclose(got.numpy(), model(torch.from_numpy(other)).numpy(), rtol=1e-5, atol=1e-6)
