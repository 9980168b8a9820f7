"""GPU lowering: the bind primitive, shared tiles and barriers, the launch rules that make a
schedule race-free (minitc/lowering/gpu.py), the GPU templates of every op and the GPU design
space, all checked against numpy in the GPU simulator (target "cuda-sim"); the tests marked
`cuda` run design-space samples and the tuner on a real GPU."""

import numpy as np
import pytest
from cuda_tools import cupy_usable
from gpu_schedules import matmul_shared

import minitc as tc
import minitc.ops as ops
from minitc.autotune.space import Space
from minitc.driver import lower_gpu
from minitc.errors import ScheduleError
from minitc.lowering.gpu import GpuLimits, plan_launches

needs_gpu = pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")


def _matmul(M=32, N=32, K=16):
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    return A, B, tc.ops.matmul(A, B, name="C")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# -- the primitive -----------------------------------------------------------------------------


def test_bind_is_recorded_replayed_and_printed():
    s, _, _ = matmul_shared()
    assert any(step.kind == "bind" for step in s.trace)
    again = tc.Schedule(s.outputs).replay(tc.Trace.from_json(s.trace.to_json()))
    text = str(tc.lower(again))
    assert text == str(tc.lower(s))
    assert 'bind("threadIdx.x", 4)' in text and "barrier()" in text and 'alloc("shared"' in text


def test_bind_rejects_bad_requests():
    _, _, C = _matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(ScheduleError, match="unknown thread tag"):
        s.bind(i, "threadIdx.w")
    with pytest.raises(ScheduleError, match="reduction loop; only threadIdx.x"):
        s.bind(k, "threadIdx.y")
    s.bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError, match="already bound"):
        s.bind(j, "blockIdx.x")


def test_cpu_build_of_a_bound_schedule_says_to_use_a_gpu_target():
    s, _, _ = matmul_shared()
    with pytest.raises(ScheduleError, match="target='cuda'"):
        tc.build(s)
    with pytest.raises(tc.BuildError, match="unknown target"):
        tc.build(s, target="opencl")


# -- launches and their rules ------------------------------------------------------------------


def test_shared_tile_spans_the_block_and_matches_numpy():
    s, ref, shapes = matmul_shared()
    program = lower_gpu(s, "cuda-sim")
    (launch,) = program.launches
    assert launch.grid == (3, 4, 1) and launch.block == (4, 4, 1)
    # one tile for the whole block, not per thread; A's rows (along k) get a word of padding
    assert launch.shared_bytes == (16 * (8 + 1) + 8 * 16) * 4
    a, b = (_rand(*sh, seed=n) for n, sh in enumerate(shapes))
    np.testing.assert_allclose(tc.build(s, target="cuda-sim")(a, b), ref(a, b), rtol=1e-5, atol=1e-5)


def test_gemm_shared_tiles_are_laid_out_k_major():
    """The GEMM template lays every shared tile out [k][m] or [k][n], whatever the operand's
    layout (dense's W[n, k] included): a thread's values of one k are contiguous (float4
    reads), so no tile is read down a column and none needs the padded row."""
    X, W = tc.placeholder((128, 64), name="X"), tc.placeholder((96, 64), name="W")
    A, B = tc.placeholder((128, 64), name="A"), tc.placeholder((64, 96), name="B")
    shapes = {}
    for out in (ops.dense(X, W), ops.matmul(A, B)):
        program = lower_gpu(tc.templates.gpu.gpu_template_schedule([out], None), "cuda-sim")
        shapes.update({b.name: b.shape[-2:] for b in _shared_buffers(program)})
    assert shapes == {"X_shared": (16, 32), "W_shared": (16, 32), "A_shared": (16, 32), "B_shared": (16, 32)}
    x, w = _rand(128, 64), _rand(96, 64, seed=1)
    np.testing.assert_allclose(
        tc.build(ops.dense(X, W), target="cuda-sim", db=False)(x, w), x @ w.T, rtol=1e-4, atol=1e-4
    )


def _shared_buffers(program):
    from minitc import ir

    for launch in program.launches:
        for node in ir.walk_stmts(launch.body):
            if isinstance(node, ir.Allocate) and node.buffer.scope == "shared":
                yield node.buffer


def test_too_many_threads_or_too_much_shared_memory():
    _, _, C = _matmul(64, 64, 64)
    s = tc.Schedule(C)
    i, j, _ = s.loops(C)
    s.bind(i, "threadIdx.y")
    s.bind(j, "threadIdx.x")  # 64 x 64 = 4096 threads
    with pytest.raises(ScheduleError, match="4096 threads per block"):
        lower_gpu(s, "cuda-sim")
    s, _, _ = matmul_shared()
    with pytest.raises(ScheduleError, match="shared memory"):
        plan_launches(tc.lower(s), GpuLimits(max_shared_bytes=512))


def test_a_store_not_bound_to_every_thread_dimension_is_a_race():
    X = tc.placeholder((64,), name="X")
    Y = tc.compute((64,), lambda i: X[i] * 2.0, name="Y")
    Z = tc.compute((64,), lambda i: Y[i] + 1.0, name="Z")
    s = tc.Schedule(Z)
    (i,) = s.loops(Z)
    io, ii = s.split(i, factor=16)
    s.bind(io, "blockIdx.x")
    s.bind(ii, "threadIdx.x")
    Ys = s.cache_read(Y, "shared", [Z])  # a shared copy nobody distributes over the threads
    s.compute_at(Ys, io)
    with pytest.raises(ScheduleError, match="not inside a loop bound to threadIdx.x"):
        lower_gpu(s, "cuda-sim")


def test_rebinding_an_index_the_inner_stage_uses_is_rejected():
    X = tc.placeholder((8, 8), name="X")
    Y = tc.compute((8, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = tc.compute((8, 8), lambda i, j: Y[i, j] + 1.0, name="Z")
    s = tc.Schedule(Z)
    zi, zj = s.loops(Z)
    s.bind(zi, "threadIdx.x")
    s.compute_at(Y, zi)  # per-thread tile of Y, whose own loop takes threadIdx.x again
    _, yj = s.loops(Y)
    s.bind(yj, "threadIdx.x")
    s.bind(zj, "threadIdx.y")
    with pytest.raises(ScheduleError, match="also bound to threadIdx.x"):
        lower_gpu(s, "cuda-sim")


def test_guards_move_below_barriers_so_partial_tiles_work():
    """N = 48 with 64-wide block tiles and one column per thread: the column guard would
    enclose the shared fills; it is pushed down to the stores instead."""
    from minitc.templates.gpu.gemm import schedule_dense_epilogue

    X, W, b = tc.placeholder((32, 64), name="X"), tc.placeholder((48, 64), name="W"), tc.placeholder((48,), name="b")
    out = tc.ops.dense(X, W, b, activation="relu")
    s = tc.Schedule(out)
    schedule_dense_epilogue(s, s.state.outputs[0], None, bm=32, bn=64, tm=4, tn=1, bk=16)
    x, w, bias = _rand(32, 64), _rand(48, 64, seed=1), _rand(48, seed=2)
    got = tc.build(s, target="cuda-sim")(x, w, bias)
    np.testing.assert_allclose(got, np.maximum(x @ w.T + bias, 0), rtol=1e-4, atol=1e-4)


def test_softmax_stages_at_the_root_run_as_launches_passing_temporaries():
    """(The default GPU schedule runs softmax as one launch: tests/gpu/test_gpu_reductions.py.)"""
    from minitc.templates.gpu import bind_unbound

    s = tc.Schedule(tc.ops.softmax(tc.placeholder((8, 40), name="X")))
    bind_unbound(s)
    program = lower_gpu(s, "cuda-sim")
    assert len(program.launches) > 1 and program.temporaries
    assert all(t.scope == "global" for t in program.temporaries)


# -- every op through its default GPU schedule ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(ops.OPS))
def test_default_gpu_schedule_of_every_op_matches_numpy(name):
    inst = ops.OPS[name].instantiate("tiny", np.random.default_rng(3))
    f = tc.build(inst.output, target="cuda-sim", db=False)
    args = [inst.inputs[t] for t in sorted(inst.inputs, key=lambda t: t.order)]
    np.testing.assert_allclose(f(*args), inst.expected(), rtol=1e-4, atol=1e-4, err_msg=f"{name} {inst.params}")


# -- the GPU design space --------------------------------------------------------------------


def _workloads():
    A, B, C = _matmul(32, 32, 32)
    X, W = tc.placeholder((1, 4, 6, 6), name="X"), tc.placeholder((8, 4, 3, 3), name="W")
    Xd, Wd, bd = tc.placeholder((16, 32), name="X"), tc.placeholder((24, 32), name="W"), tc.placeholder((24,), name="b")
    S = tc.placeholder((8, 16), name="S")
    return {
        "matmul": C,
        "conv2d": tc.ops.conv2d(X, W, padding=1),
        "dense_gelu": tc.ops.dense(Xd, Wd, bd, activation="gelu"),
        "softmax": tc.ops.softmax(S),
    }


SPACE_CASES = [(name, "cuda-sim", 4) for name in ("matmul", "conv2d", "dense_gelu", "softmax")]
# on a real GPU every drawn program is built and run (the simulator is too slow for that)
SPACE_CASES += [pytest.param(name, "cuda", 40, marks=[pytest.mark.cuda, needs_gpu]) for name, _, _ in SPACE_CASES]


@pytest.mark.parametrize("name,target,runs", SPACE_CASES)
def test_gpu_space_samples_are_legal_and_correct(name, target, runs):
    from minitc.te_eval import evaluate

    out = _workloads()[name]
    space = Space(out, target)
    assert space.gpu
    rng = np.random.default_rng(0)
    drawn, ran = 0, 0
    s0 = tc.Schedule(out)
    inputs = [s0.tensor(n) for n in s0.arguments()[0]]
    arrays = [_rand(*t.shape, seed=n) for n, t in enumerate(inputs)]
    (expected,) = evaluate([out], dict(zip(inputs, arrays)))
    sketches = set()
    while drawn < 40:
        cand = space.sample(rng)  # legal by construction: no draw is rejected
        drawn += 1
        sketches.add(cand.sketch)
        program = lower_gpu(cand.schedule, target)  # every drawn program lowers legally
        assert program.launches
        if ran < runs:  # and the first few compute the right thing
            f = tc.build(cand.schedule, target=target)
            np.testing.assert_allclose(f(*arrays), expected, rtol=1e-4, atol=1e-4, err_msg=str(cand.values))
            ran += 1
    assert sketches == set(space.sketches)


@pytest.mark.parametrize(
    "target,n,trials", [("cuda-sim", 16, 4), pytest.param("cuda", 256, 16, marks=[pytest.mark.cuda, needs_gpu])]
)
def test_tuning_pipeline_runs(tmp_path, target, n, trials):
    _, _, C = _matmul(n, n, n)
    r = tc.tune(C, trials=trials, strategy="random", target=target, db=tmp_path / "r.db")
    assert r.trials == trials and r.errors == 0 and r.best_ms is not None
    a, b = _rand(n, n), _rand(n, n, seed=1)
    np.testing.assert_allclose(r.kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_local_tile_written_by_several_threads_is_rejected():
    _, _, C = _matmul(16, 16, 16)
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s.loops(C)
    s.bind(i, "blockIdx.x")
    s.compute_at(CL, i)
    ci, cj, _ = s.loops(CL)
    s.bind(cj, "threadIdx.x")
    s.bind(j, "threadIdx.x")
    with pytest.raises(ScheduleError, match="every thread would get its own copy"):
        lower_gpu(s, "cuda-sim")


def test_minitc_tune_on_the_simulator_and_without_a_gpu(tmp_path):
    import json

    from click.testing import CliRunner

    from minitc.cli import main

    db, out = str(tmp_path / "r.db"), str(tmp_path / "r.json")
    res = CliRunner().invoke(
        main,
        [
            "tune",
            "matmul",
            "--shape",
            "16,16,16",
            "--target",
            "cuda-sim",
            "--trials",
            "2",
            "--strategy",
            "random",
            "--db",
            db,
            "--json",
            out,
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "template (measured first)" in res.output and "cuda-sim times the numpy simulator" in res.output
    data = json.load(open(out))
    assert data["trials"] == 2 and data["errors"] == 0 and data["best_ms"] > 0
    try:
        import cupy  # noqa: F401

        return  # a GPU machine: the no-GPU message cannot be seen here
    except ImportError:
        pass
    res = CliRunner().invoke(
        main, ["tune", "matmul", "--shape", "16,16,16", "--target", "cuda", "--trials", "1", "--db", db]
    )
    assert res.exit_code != 0 and "needs CuPy" in res.output


def test_gemm_tiles_fill_the_gpu_and_respect_the_thread_tile():
    from minitc.templates.gpu.gemm import pick_gpu_tiles

    assert pick_gpu_tiles(4096, 4096, 4096) == {"bm": 64, "bn": 64, "tm": 4, "tn": 4, "bk": 16}
    # B read along its rows (float4 loads): 16x8 per thread, k-steps of 8, where 128x128 tiles fill the GPU
    assert pick_gpu_tiles(4096, 4096, 4096, rows_of_b=True) == {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "bk": 8}
    assert pick_gpu_tiles(1024, 1024, 1024, rows_of_b=True)["tm"] == 4  # 64 blocks: too few for 132 SMs
    for shape in [(64, 64, 64), (50, 70, 40), (100, 100, 100), (4096, 3072, 768), (7, 9, 5)]:
        t = pick_gpu_tiles(*shape)
        assert t["bm"] % t["tm"] == 0 and t["bn"] % t["tn"] == 0, (shape, t)
    small = pick_gpu_tiles(512, 512, 512)
    assert (512 // small["bm"]) * (512 // small["bn"]) >= 132  # enough blocks for every SM of an H100


def test_full_size_gpu_spaces_lower_and_render_without_rejections():
    """At the gpu-core shapes every sampled program fits the launch limits (threads, shared
    memory, per-thread tiles) and renders; before the region fix for repeated reads through
    fused loops, half the dense + gelu programs got whole-matrix per-thread tiles."""
    from minitc.backends.cuda.codegen import render_program

    X, W, b = (
        tc.placeholder((4096, 768), name="X"),
        tc.placeholder((3072, 768), name="W"),
        tc.placeholder((3072,), name="b"),
    )
    Xc, Wc = tc.placeholder((8, 256, 14, 14), name="X"), tc.placeholder((256, 256, 3, 3), name="W")
    for out in (tc.ops.dense(X, W, b, activation="gelu"), tc.ops.conv2d(Xc, Wc, padding=1)):
        space, rng = Space(out, "cuda"), np.random.default_rng(1)
        for _ in range(20):
            program = lower_gpu(space.sample(rng).schedule, "cuda")
            assert "__global__" in render_program(program)


def test_the_gpu_example_runs(capsys):
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).parents[2] / "examples" / "gpu_matmul.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "__syncthreads()" in out and "float4" in out and "the simulator agrees with numpy" in out
