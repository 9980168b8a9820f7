"""A plan's bound kernel calls chained into one native call (backends/llvm/step_chain.py)."""

import ctypes

import numpy as np
import pytest

import minitc as tc
from minitc.backends.function import BoundCall
from minitc.backends.llvm.step_chain import StepChain

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402


def _kernel(body):
    A = tc.placeholder((64,), name="A")
    return tc.build(tc.compute((64,), lambda i: body(A[i]), name="B"), "llvm")


def test_a_chain_runs_its_calls_in_order_and_notes_each():
    double, plus_one = _kernel(lambda v: v * 2.0), _kernel(lambda v: v + 1.0)
    a = np.arange(64, dtype="float32")
    b, c = np.zeros_like(a), np.zeros_like(a)
    calls = [double.bind([a, b]), plus_one.bind([b, c])]  # c reads what the first call wrote
    assert all(isinstance(call, BoundCall) for call in calls)
    texts = [ctypes.create_string_buffer(b"first"), ctypes.create_string_buffer(b"second")]
    note = ctypes.c_void_p()
    chain = StepChain(calls, [ctypes.addressof(t) for t in texts], note)
    chain()
    np.testing.assert_array_equal(b, 2 * a)
    np.testing.assert_array_equal(c, 2 * a + 1)
    assert note.value == ctypes.addressof(texts[1])  # the last call's note is left for the plan to clear


def test_a_model_runs_its_bound_kernels_as_one_chain(monkeypatch):
    monkeypatch.setenv("MINITC_CHECK", "0")  # checked plans (the tests' default) call each kernel through its checks
    model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 4)).eval()
    x = torch.randn(8, 32)
    compiled = tc.compile(model, (x,), db=False)
    compiled(x)  # the first run checks every call and binds them
    plan = compiled.plan
    chains = [what for kind, _, what in plan._chained if kind == "chain"]
    assert len(chains) == 1 and chains[0].size == sum(kind == "bound" for kind, _, _ in plan._bound) >= 2
    with torch.no_grad():
        expected = model(x).numpy()
    chained = plan.run([x.numpy()])[0]
    step_by_step = plan.run([x.numpy()], times={})[0]  # timed runs call the kernels one by one
    np.testing.assert_array_equal(chained, step_by_step)
    np.testing.assert_allclose(chained, expected, rtol=1e-4, atol=1e-5)
