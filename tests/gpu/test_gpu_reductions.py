"""Cross-thread reductions on the GPU (minitc/lowering/allreduce.py) and the templates that use
them (minitc/templates/gpu/reduce.py): the simulator against numpy for every lowering path
(one warp, whole warps, the shared-memory tree for partial warps), special values, nvcc --ptx,
race detection, illegal schedules, and the design space. Marked `cuda`: the same on a GPU."""

import re
import subprocess

import numpy as np
import pytest
from cuda_tools import cupy_usable, find_nvcc, ptxas_log

import minitc as tc
from minitc import ir, te
from minitc.autotune.space import Space
from minitc.backends.cuda.codegen import render_program
from minitc.backends.cuda.sim import SimFunction
from minitc.driver import lower_gpu
from minitc.errors import RaceError, ScheduleError
from minitc.lowering.gpu import GpuProgram, Launch
from minitc.te import compute
from minitc.templates import template_schedule

REFERENCE = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}
THREADS = (1, 7, 32, 33, 96, 100, 256, 1024)


def row_reduction(op: str, rows: int, cols: int, threads: int, rows_per_block: int = 1):
    """op over the last axis, `threads` threads a row (reduction loop bound to threadIdx.x)."""
    X = tc.placeholder((rows, cols), name="X")
    Y = getattr(tc.ops, op)(X, axis=1, name="Y")
    s = tc.Schedule(Y)
    i, k = s.loops(Y)
    io, ii = s.split(i, factor=rows_per_block)
    s.bind(io, "blockIdx.x")
    s.bind(ii, "threadIdx.y")
    s.bind(s.split(k, factor=threads)[1], "threadIdx.x")
    return s


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_cross_thread_reduction_matches_numpy(op, threads):
    rows_per_block = 3 if threads <= 256 else 1  # several row groups a block; 5 rows: a partial block
    cols = max(70, threads + 5)  # some threads get one element more than others
    f = tc.build(row_reduction(op, 5, cols, threads, rows_per_block), target="cuda-sim")
    x = rand(5, cols)
    np.testing.assert_allclose(f(x), REFERENCE[op](x, axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "threads, shuffles, barriers", [(8, 3, 0), (32, 5, 0), (96, 5 + 2, 1), (100, 0, 8), (1024, 5 + 5, 1)]
)
def test_lowering_paths(threads, shuffles, barriers):
    """A power of two up to a warp: shuffles only; whole warps: shuffles, one shared word a
    warp and a barrier; otherwise the shared-memory tree, a barrier per level."""
    body = lower_gpu(row_reduction("sum", 4, 2048, threads), "cuda").launches[0].body
    stmts = list(ir.walk_stmts(body))
    assert sum(isinstance(s, ir.ShuffleXor) for s in stmts) == shuffles
    assert sum(isinstance(s, ir.Barrier) for s in stmts) == barriers


def test_the_result_reaches_every_thread():
    """A local result of a cross-thread reduction is each thread's own copy, used by the
    consumer in the same launch (softmax's statistics)."""
    X = tc.placeholder((6, 40), name="X")
    Y = tc.ops.softmax(X, name="Y")
    s = template_schedule(Y, "cuda")
    p = lower_gpu(s, "cuda")
    assert len(p.launches) == 1 and not p.temporaries
    x = rand(6, 40)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(tc.build(s, target="cuda-sim")(x), e / e.sum(1, keepdims=True), rtol=1e-5)


def test_reduction_inside_a_serial_loop_gets_its_trailing_barrier():
    """Two rows a thread group: the scratch is reused, so the second reduction must not write
    it before every thread has read the first total."""
    X = tc.placeholder((8, 64), name="X")
    Y = tc.ops.sum(X, axis=1, name="Y")
    s = tc.Schedule(Y)
    i, k = s.loops(Y)
    io, ii = s.split(i, factor=2)
    s.bind(io, "blockIdx.x")
    s.bind(s.split(k, factor=64)[1], "threadIdx.x")
    f = tc.build(s, target="cuda-sim")
    assert sum(isinstance(st, ir.Barrier) for st in ir.walk_stmts(f.program.launches[0].body)) == 2
    x = rand(8, 64)
    np.testing.assert_allclose(f(x), x.sum(1), rtol=1e-5)
    with pytest.raises(RaceError, match="race on shared buffer Y_red_warps"):
        SimFunction(_without_barrier(f.program, -1))(x)


def _without_barrier(program, index):
    launch = program.launches[0]
    drop = [s for s in ir.walk_stmts(launch.body) if isinstance(s, ir.Barrier)][index]
    body = ir.map_stmt(launch.body, lambda s: ir.Seq(()) if s is drop else None)
    return GpuProgram(program.kernel, [Launch(launch.name, launch.params, body, launch.grid, launch.block)])


@pytest.mark.parametrize("threads", [96, 100])
def test_race_detection_fires_without_the_shared_barrier(threads):
    f = tc.build(row_reduction("max", 4, 300, threads, 2), target="cuda-sim")
    with pytest.raises(RaceError, match="race on shared buffer Y_red_(warps|tree)"):
        SimFunction(_without_barrier(f.program, 0))(rand(4, 300))


def test_illegal_cross_thread_schedules_say_why():
    X = tc.placeholder((8, 64), name="X")
    Y = tc.ops.sum(X, axis=1, name="Y")
    s = tc.Schedule(Y)
    i, k = s.loops(Y)
    with pytest.raises(ScheduleError, match="only threadIdx.x can carry a cross-thread reduction"):
        s.bind(k, "threadIdx.y")
    ko, ki = s.split(k, factor=32)
    s.bind(ki, "threadIdx.x")
    s.reorder(ko, i)  # a spatial loop inside the reduction loops
    with pytest.raises(ScheduleError, match="spatial loops must all come before its reduction loops"):
        lower_gpu(s, "cuda")
    # the softmax's output on 64 threads in x but its statistics' reductions on 32: the 32 extra
    # threads would miss the shuffles and barriers
    Z = tc.ops.softmax(tc.placeholder((8, 64), name="A"), name="Z")
    s2 = tc.Schedule(Z)
    s2.compute_inline(s2.tensor("Z_exp"))
    r, j = s2.loops(Z)
    s2.bind(r, "blockIdx.x")
    s2.bind(s2.split(j, factor=64)[1], "threadIdx.x")
    for stat in ("Z_max", "Z_sum"):
        s2.compute_at(s2.tensor(stat), r)
        _, k = s2.loops(s2.tensor(stat))
        s2.bind(s2.split(k, factor=32)[1], "threadIdx.x")
    with pytest.raises(ScheduleError, match="runs over 32 threads in x, but its kernel has 64"):
        lower_gpu(s2, "cuda")


# -- templates ---------------------------------------------------------------------------------


def softmax_reference(x):
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def layer_norm_reference(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * g + b


TEMPLATE_CASES = [(5, 70, 32, 4), (3, 40, 16, 1), (4, 300, 100, 2), (2, 1100, 1024, 1), (7, 129, 64, 3)]


@pytest.mark.parametrize("rows, cols, threads, rows_per_block", TEMPLATE_CASES)
def test_softmax_and_layer_norm_templates(rows, cols, threads, rows_per_block):
    from minitc.templates.gpu.reduce import schedule_layer_norm, schedule_softmax

    X, g, b = (
        tc.placeholder((rows, cols), name="X"),
        tc.placeholder((cols,), name="g"),
        tc.placeholder((cols,), name="b"),
    )
    x, gv, bv = rand(rows, cols), rand(cols, seed=1), rand(cols, seed=2)
    for out, fn, inputs, ref in (
        (tc.ops.softmax(X), schedule_softmax, [x], softmax_reference(x)),
        (tc.ops.layer_norm(X, g, b), schedule_layer_norm, [x, gv, bv], layer_norm_reference(x, gv, bv)),
    ):
        s = tc.Schedule(out)
        fn(s, s.state.outputs[0], None, threads=threads, rows=rows_per_block)
        f = tc.build(s, target="cuda-sim")
        assert len(f.program.launches) == 1
        np.testing.assert_allclose(f(*inputs), ref, rtol=1e-4, atol=1e-5)


def test_softmax_special_values():
    """A NaN anywhere in a row makes the row NaN; a row of -inf is NaN (as torch); +inf gives
    NaN at the inf (inf - inf) and 0 elsewhere is not assumed: numpy decides."""
    x = rand(6, 50)
    x[1, 7] = np.nan
    x[2, :] = -np.inf
    x[3, 4] = np.inf
    x[4, :10] = -np.inf
    y = tc.build(tc.ops.softmax(tc.placeholder((6, 50), name="X")), target="cuda-sim")(x)
    ref = softmax_reference(x)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-5, atol=1e-7)


REDUCE_CASES = [
    ((6, 90), 1, False),
    ((3, 4, 40), -1, False),
    ((50,), None, False),
    ((40, 6), 0, False),
    ((3, 4, 5), (1,), True),  # the contiguous axis kept: one thread per output
    ((2, 5, 7, 7), (2, 3), False),  # global average pools: H and W fused, 49 values a row
    ((1, 3, 14, 14), (2, 3), True),
    ((2, 4, 1, 1), (2, 3), True),
    ((1, 2, 56, 56), (2, 3), False),
    ((3, 5, 6, 7), (1, 3), False),  # C and W: only W is contiguous
    ((4, 9, 5), (0, 1, 2), True),
]


@pytest.mark.parametrize("op", sorted(REFERENCE))
@pytest.mark.parametrize("shape, axis, keepdims", REDUCE_CASES)
def test_reduce_template(op, shape, axis, keepdims):
    X = tc.placeholder(shape, name="X")
    out = getattr(tc.ops, op)(X, axis=axis, keepdims=keepdims)
    x = rand(*shape)
    f = tc.build(out, target="cuda-sim", db=False)
    want = REFERENCE[op](x, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(f(x).reshape(-1), np.ravel(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "shape, axis, run, block",
    [
        ((1, 1280, 7, 7), (2, 3), ["r2", "r3"], (32, 4, 1)),  # MobileNet-V2's global pool: a warp a channel
        ((1, 64, 56, 56), (2, 3), ["r2", "r3"], (256, 1, 1)),
        ((5, 8, 6, 10), (1, 2, 3), ["r1", "r2", "r3"], (32, 4, 1)),
        ((3, 5, 6, 7), (1, 3), ["r3"], (7, 4, 1)),
        ((6, 90), 1, ["r1"], (32, 4, 1)),
    ],
)
def test_contiguous_reduced_axes_are_fused_across_the_threads(shape, axis, run, block):
    """A mean over H and W of NCHW data reduces H*W values an output with a whole warp (or
    more), not the W of one row with W threads."""
    from minitc.templates.gpu.reduce import contiguous_run

    out = tc.ops.mean(tc.placeholder(shape, name="X"), axis=axis, keepdims=True)
    s = tc.Schedule(out)
    assert [a.name for a in contiguous_run(s.state, s.state.stage(s.state.outputs[0]))] == run
    (launch,) = lower_gpu(template_schedule(out, "cuda"), "cuda").launches
    assert launch.block == block


def test_a_gap_between_the_rows_keeps_the_axes_apart():
    """A reduction over a window narrower than its rows (X[i, r0, r1] with r1 over 5 of 8
    columns) is not one contiguous run: only the last axis crosses the threads."""
    from minitc.templates.gpu.reduce import contiguous_run

    X = tc.placeholder((3, 4, 8), name="X")
    r0, r1 = tc.reduce_axis(4, name="r0"), tc.reduce_axis(5, name="r1")
    out = compute((3,), lambda i: te.sum(X[i, r0, r1], axis=(r0, r1)), name="Y", tag="reduce")
    s = tc.Schedule(out)
    assert [a.name for a in contiguous_run(s.state, s.state.stage("Y"))] == ["r1"]
    x = rand(3, 4, 8)
    np.testing.assert_allclose(tc.build(out, target="cuda-sim", db=False)(x), x[:, :, :5].sum((1, 2)), rtol=1e-5)


def test_defaults_follow_the_row_length():
    from minitc.templates.gpu.reduce import pick

    assert pick(64) == {"threads": 32, "rows": 4}
    assert pick(512) == {"threads": 32, "rows": 4}
    assert pick(768) == {"threads": 64, "rows": 2}
    assert pick(4096) == {"threads": 256, "rows": 1}
    assert pick(1 << 20) == {"threads": 1024, "rows": 1}


def test_design_space_programs_are_legal():
    """Every sampled template point (threads x rows) lowers and matches numpy."""
    rng = np.random.default_rng(0)
    x, p = rand(5, 70), rand(2, 5, 7, 7)
    X, P = tc.placeholder(x.shape, name="X"), tc.placeholder(p.shape, name="P")
    cases = [
        (tc.ops.softmax(X), x, softmax_reference(x)),
        (tc.ops.max(X, axis=1), x, x.max(1)),
        (tc.ops.mean(P, axis=(2, 3), keepdims=True), p, p.mean((2, 3), keepdims=True)),  # H and W fused
    ]
    for out, a, ref in cases:
        space = Space(out, "cuda-sim")
        seen = set()
        for _ in range(12):
            cand = space.sample(rng, sketch="template")
            seen.add(tuple(cand.values))
            f = tc.build(cand.schedule, target="cuda-sim")
            np.testing.assert_allclose(f(a), ref, rtol=1e-5, atol=1e-6)
        assert len(seen) > 3


# -- nvcc and the GPU --------------------------------------------------------------------------


def _kernels():
    out = [row_reduction(op, 5, 300, t, 3 if t <= 256 else 1) for op in ("sum", "max") for t in THREADS]
    X, g, b = tc.placeholder((7, 129), name="X"), tc.placeholder((129,), name="g"), tc.placeholder((129,), name="b")
    out += [template_schedule(o, "cuda") for o in (tc.ops.softmax(X), tc.ops.layer_norm(X, g, b))]
    return [lower_gpu(s, "cuda", name=f"k{n}") for n, s in enumerate(out)]


def test_nvcc_compiles_the_kernels(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin")
    (tmp_path / "all.cu").write_text("\n".join(render_program(p) for p in _kernels()))
    cmd = [nvcc, "-ptx", "-arch=sm_75", "-std=c++17", "-Werror", "all-warnings", "-o", "all.ptx", "all.cu"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "shfl.sync.bfly" in (tmp_path / "all.ptx").read_text()


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found on PATH or in /usr/local/cuda*/bin")
def test_global_pool_reductions_keep_to_registers(tmp_path):
    """The default kernels of the global average pools (MobileNet-V2, ResNet-50 at batch 8, a
    56x56 map) and of a row sum through ptxas: no spills, no stack frame."""
    shapes = [((1, 1280, 7, 7), (2, 3)), ((8, 2048, 7, 7), (2, 3)), ((1, 64, 56, 56), (2, 3)), ((37, 3000), 1)]
    sources = [
        tc.codegen(tc.ops.mean(tc.placeholder(shape, name="X"), axis=axis), "cuda", name=f"g{k}", db=False)
        for k, (shape, axis) in enumerate(shapes)
    ]
    log = ptxas_log("\n".join(sources), tmp_path)
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == len(shapes), log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


@pytest.mark.cuda
@pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("threads", THREADS)
def test_cross_thread_reduction_on_the_gpu(threads):
    x = rand(37, 3000)
    for op in ("sum", "max"):
        f = tc.build(row_reduction(op, 37, 3000, threads, 3 if threads <= 256 else 1), target="cuda")
        np.testing.assert_allclose(f(x), REFERENCE[op](x, axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")
def test_templates_on_the_gpu():
    x = rand(300, 700)
    x[3, 5], x[4, :] = np.nan, -np.inf
    X = tc.placeholder((300, 700), name="X")
    y = tc.build(tc.ops.softmax(X), target="cuda")(x)
    ref = softmax_reference(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-4, atol=1e-7)
    g, b = tc.placeholder((700,), name="g"), tc.placeholder((700,), name="b")
    gv, bv = rand(700, seed=1), rand(700, seed=2)
    xl = rand(300, 700)
    y = tc.build(tc.ops.layer_norm(X, g, b), target="cuda")(xl, gv, bv)
    np.testing.assert_allclose(y, layer_norm_reference(xl, gv, bv), rtol=1e-4, atol=1e-4)
    for op in sorted(REFERENCE):
        y = tc.build(getattr(tc.ops, op)(X, axis=1), target="cuda")(xl)
        np.testing.assert_allclose(y, REFERENCE[op](xl, axis=1), rtol=1e-4, atol=1e-4)
