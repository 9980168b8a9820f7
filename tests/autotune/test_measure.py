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


def test_constant_inputs_are_measured_flushed_from_the_caches():
    """A placeholder marked constant (a model's weight) is another workload than the same
    computation on a warm input, and each timed call runs with it evicted from the caches:
    single calls, three per repeat."""
    A = tc.placeholder((64, 64), name="A")
    W = tc.placeholder((64, 64), name="W", constant=True)
    cold = Task.from_outputs(tc.ops.matmul(A, W))
    warm = Task.from_outputs(tc.ops.matmul(A, tc.placeholder((64, 64), name="W")))
    assert cold.cold == (1,) and warm.cold == () and cold.key != warm.key
    builder, runner = LocalBuilder(), LocalRunner(repeats=2, min_repeat_ms=2)
    try:
        (result,) = runner.run(cold, builder.build(cold, [_vectorized(cold.outputs[0])]))
        (warm_result,) = runner.run(warm, builder.build(warm, [_vectorized(warm.outputs[0])]))
    finally:
        builder.close()
        runner.close()
    assert result.error is None and len(result.latencies_ms) == 6 and result.median_ms > 0
    assert warm_result.error is None and len(warm_result.latencies_ms) == 2


def test_flushing_arrays_of_any_size_and_alignment():
    import numpy as np

    from minitc.backends.llvm.cache_flush import flush_from_caches

    base = np.arange(1000, dtype="float32")
    flush_from_caches([base, base[3:7], base[:0], np.zeros((3, 5), "float64")])
    assert base.sum() == 499500  # the data is unchanged: evicted, not cleared


def test_a_prepared_runner_measures_and_a_failed_setup_says_why(task):
    """`prepare` posts the setup (the process starts while the caller builds); the first run
    reads its answer. A setup that failed raises its own error at the first run."""
    builder, runner = LocalBuilder(), LocalRunner(repeats=2, min_repeat_ms=1)
    try:
        builder.start()
        runner.prepare(task)
        assert runner._worker.proc is not None and all(w.proc is not None for w in builder._workers)
        (built,) = builder.build(task, [_vectorized(task.outputs[0])])
        (result,) = runner.run(task, [built])
        assert result.error is None and result.median_ms > 0
        runner._worker.post("setup", "not", "enough", "arguments")
        with pytest.raises(tc.MinitcError, match="TypeError"):
            runner._worker.call("run", built.symbol, built.object_code, built.num_params, 1, 1.0, timeout=10)
    finally:
        builder.close()
        runner.close()


def test_the_gpu_re_measurement_shares_the_runner_process():
    """GpuRunner.fresh (the final re-measurement's runner) uses the same process: closing it
    leaves the session's runner running."""
    from minitc.autotune.gpu_runner import GpuRunner

    A = tc.placeholder((8, 8), name="A")
    gpu_task = Task.from_outputs(tc.ops.relu(A), "cuda-sim")
    runner = GpuRunner(target="cuda-sim")
    try:
        runner.prepare(gpu_task)
        fresh = runner.fresh(7)
        assert fresh.repeats == 7 and fresh._worker is runner._worker
        proc = runner._worker.proc
        fresh.close()
        assert runner._worker.proc is proc and proc.poll() is None
    finally:
        runner.close()
    assert runner._worker.proc is None
