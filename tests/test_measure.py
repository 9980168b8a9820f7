"""Safe measurement: candidates are built in worker processes and run in an isolated runner;
planted crashing, hanging and wrong kernels become error results and measuring goes on."""

import llvmlite.binding as llvm
import pytest

import minitc as tc
from minitc.autotune.runner import BuildResult, LocalBuilder, LocalRunner, Task
from minitc.backends.llvm import jit
from minitc.target import parse_target


@pytest.fixture(scope="module")
def task():
    A = tc.placeholder((64, 64), name="A")
    B = tc.placeholder((64, 64), name="B")
    return Task.from_outputs(tc.ops.matmul(A, B))


def _object(body: str, name: str) -> BuildResult:
    """A hand-written kernel with the matmul's signature (A, B, C)."""
    target = parse_target("llvm")
    mod = llvm.parse_assembly(f"define void @{name}(ptr %a, ptr %b, ptr %c) {{\n{body}\n}}")
    mod.triple = target.triple
    return BuildResult(name, name, jit._target_machine(target).emit_object(mod), 3)


def _vectorized(C):
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    jo, ji = s.split(j, factor=8)
    s.reorder(i, jo, k, ji)
    s.vectorize(ji)
    return s.trace.to_json()


def test_build_and_measure(task):
    C = task.outputs[0]
    bad = '[{"kind": "vectorize", "stage": "matmul", "loops": ["k"]}]'
    builder, runner = LocalBuilder(workers=2), LocalRunner(repeats=3, min_repeat_ms=2)
    try:
        built = builder.build(task, [tc.Schedule(C).trace.to_json(), _vectorized(C), bad])
        assert [b.error is None for b in built] == [True, True, False]
        assert "schedule: cannot vectorize loop k" in built[2].error
        results = runner.run(task, built)
    finally:
        builder.close()
        runner.close()
    assert all(r.median_ms > 0 and len(r.latencies_ms) == 3 for r in results[:2])
    assert results[2].error.startswith("schedule:")


def test_planted_crash_hang_and_wrong_kernels(task):
    crash = _object("store volatile i32 1, ptr null\nret void", "planted_crash")
    hang = _object("entry:\nbr label %l\nl:\n%v = load volatile i32, ptr %a\nbr label %l", "planted_hang")
    wrong = _object("store float 0.0, ptr %c\nret void", "planted_wrong")
    builder, runner = LocalBuilder(), LocalRunner(timeout=3, repeats=2, min_repeat_ms=1)
    try:
        (good,) = builder.build(task, [_vectorized(task.outputs[0])])
        results = runner.run(task, [crash, good, hang, wrong, good])
    finally:
        builder.close()
        runner.close()
    errors = [r.error or "" for r in results]
    assert errors[0].startswith("crash:") and "signal 11" in errors[0]
    assert errors[2].startswith("timeout:")
    assert errors[3].startswith("wrong:")
    assert results[1].median_ms > 0 and results[4].median_ms > 0  # measuring went on after each
