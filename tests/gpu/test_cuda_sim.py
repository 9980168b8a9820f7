"""The numpy GPU simulator (backends/cuda/sim.py): results against numpy and the reference
interpreter, masks and select, races, barriers, bounds, and the argument checks."""

import gpu_schedules
import numpy as np
import pytest

import minitc as tc
from minitc import ir
from minitc.backends.cuda import sim
from minitc.backends.cuda.sim import SimFunction
from minitc.errors import DTypeError, IRError, LayoutError, RaceError, ScheduleError, ShapeError
from minitc.expr import Var, const, select
from minitc.interp import interpret
from minitc.ir import Allocate, Barrier, Buffer, For, IfThenElse, Kernel, Load, Store, seq
from minitc.lowering.gpu import GpuProgram, Launch, plan_launches
from minitc.ops import reference as ref_ops

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def example(name, **sizes):
    s, reference, shapes = gpu_schedules.ALL[name](**sizes)
    return tc.build(s, target="cuda-sim"), reference, [rand(*shape) for shape in shapes]


SMALL = {"matmul_shared": dict(M=32, N=32, K=16)}  # the interpreter is slow


@pytest.mark.parametrize("name", sorted(gpu_schedules.ALL))
def test_examples_match_numpy_and_the_interpreter(name):
    f, reference, args = example(name, **SMALL.get(name, {}))
    y = f(*args)
    np.testing.assert_allclose(y, reference(*args), rtol=1e-5, atol=1e-5)
    expected = np.zeros(f.kernel.outputs[0].shape, "float32")
    interpret(f.kernel, args + [expected])  # the whole kernel, one thread at a time
    np.testing.assert_array_equal(y, expected)


def test_softmax_passes_temporaries_between_launches():
    f, reference, args = example("softmax_rows")
    assert len(f.program.launches) == 4 and [b.name for b in f.program.temporaries] == ["Y_max", "Y_exp", "Y_sum"]
    assert "4 launch(es)" in repr(f) and "Y_exp" in repr(f)
    np.testing.assert_allclose(f(*args), reference(*args), rtol=1e-6, atol=1e-6)


def test_chunks_of_blocks_give_the_same_result(monkeypatch):
    f, reference, args = example("matmul_shared")
    expected = f(*args)
    monkeypatch.setattr(sim, "MAX_LANES", 40)  # 16 threads a block: 2 blocks a chunk, 6 chunks
    np.testing.assert_array_equal(f(*args), expected)
    np.testing.assert_array_equal(SimFunction(f.program, check_races=False)(*args), expected)


def test_conv2d_with_padding_reads_out_of_bounds_only_in_the_unselected_branch():
    X, W = tc.placeholder((1, 3, 7, 6), name="X"), tc.placeholder((4, 3, 3, 3), name="W")
    f = tc.build(tc.ops.conv2d(X, W, padding=1), target="cuda-sim")
    x, w = rand(1, 3, 7, 6), rand(4, 3, 3, 3)
    np.testing.assert_allclose(f(x, w), ref_ops.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [(), (3,)])  # (3,): a blockIdx.z per batch
def test_default_gpu_matmul_with_partial_tiles(batch):
    A, B = tc.placeholder(batch + (50, 20), name="A"), tc.placeholder(batch + (20, 30), name="B")
    f = tc.build((tc.ops.batch_matmul if batch else tc.ops.matmul)(A, B), target="cuda-sim")
    a, b = rand(*batch, 50, 20), rand(*batch, 20, 30)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# hand-built launches


def program(body, inputs, outputs, name="k"):
    return plan_launches(Kernel(name, inputs + outputs, len(inputs), body))


def threads(n, body_fn, blocks=1):
    """for bx in blockIdx.x(blocks): for tx in threadIdx.x(n): body_fn(bx, tx)."""
    bx, tx = Var("bx"), Var("tx")
    return For(bx, blocks, "blockIdx.x", For(tx, n, "threadIdx.x", body_fn(bx, tx)))


def test_select_and_masks_are_per_lane():
    X, Y = Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32")
    Z = Buffer("Z", (4,), "int64")
    t2 = Var("t2")

    def body(bx, tx):
        shifted = Store(Y, (tx,), select(tx >= 1, Load(X, (tx - 1,)), 0.0))  # X[-1] is never read
        divide = Store(Z, (t2,), (t2 - 2) // 3 * 10 + (t2 - 2) % 3)
        return seq(shifted, For(t2, 4, "threadIdx.x", divide))  # 4 of the 8 threads

    body = threads(8, body)
    f = SimFunction(program(body, [X], [Y, Z]))
    x = rand(8)
    y, z = f(x)
    np.testing.assert_array_equal(y, np.concatenate([[0.0], x[:-1]]).astype("float32"))
    t = np.arange(4) - 2
    np.testing.assert_array_equal(z, t // 3 * 10 + t % 3)  # rounding toward minus infinity


def test_every_block_and_thread_index():
    Y = Buffer("Y", (2, 3, 4, 2, 3, 4), "int64")
    tags = ir.BLOCK_TAGS[::-1] + ir.THREAD_TAGS[::-1]  # z, y, x: Y's dimensions, outermost first
    loops = [Var(tag.replace("Idx.", "")) for tag in tags]
    body = Store(Y, tuple(loops), sum(v * 10**n for n, v in enumerate(loops)))
    for v, tag, extent in reversed(list(zip(loops, tags, Y.shape))):
        body = For(v, extent, tag, body)
    prog = program(body, [], [Y])
    assert prog.launches[0].grid == (4, 3, 2) and prog.launches[0].block == (4, 3, 2)
    index = np.indices(Y.shape)
    np.testing.assert_array_equal(SimFunction(prog)(), sum(index[n] * 10**n for n in range(6)))


def test_unwritten_output_elements_stay_nan():
    X, Y = Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32")
    body = threads(8, lambda bx, tx: IfThenElse(tx < 5, Store(Y, (tx,), Load(X, (tx,)))))
    y = SimFunction(program(body, [X], [Y]))(np.ones(8, "float32"))
    assert (y[:5] == 1).all() and np.isnan(y[5:]).all()


def shared_roll(barrier: bool, write_after_read=False):
    """Each thread puts X[t] in shared memory and reads its neighbour's element back."""
    X, Y = Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32")
    S = Buffer("S", (4,), "float32", "shared")

    def body(bx, tx):
        fill = Store(S, (tx,), Load(X, (bx * 4 + tx,)))
        use = Store(Y, (bx * 4 + tx,), Load(S, ((tx + 1) % 4,)))
        if write_after_read:  # then overwrite one's own element, which a neighbour read
            again = Store(S, (tx,), Load(X, (bx * 4 + tx,)) * 2.0)
            return Allocate(S, seq(fill, Barrier(), use, Barrier() if barrier else None, again))
        return Allocate(S, seq(fill, Barrier() if barrier else None, use))

    return SimFunction(program(threads(4, body, blocks=2), [X], [Y]))


def test_shared_memory_with_barriers_is_fine():
    x = rand(8)
    expected = np.roll(x.reshape(2, 4), -1, axis=1).reshape(8)
    np.testing.assert_array_equal(shared_roll(True)(x), expected)
    np.testing.assert_array_equal(shared_roll(True, write_after_read=True)(x), expected)


def test_reading_a_shared_element_another_thread_wrote_without_a_barrier_races():
    message = (
        r"race on shared buffer S\[1\] \(in block \(0, 0, 0\)\): thread \(0, 0, 0\) of block \(0, 0, 0\) reads it "
        r"and thread \(1, 0, 0\) of block \(0, 0, 0\) wrote it before it; no barrier"
    )
    with pytest.raises(RaceError, match=message):
        shared_roll(False)(rand(8))


def test_overwriting_a_shared_element_another_thread_read_without_a_barrier_races():
    with pytest.raises(
        RaceError, match=r"shared buffer S\[\d\].* writes it and thread .* read it before it; no barrier"
    ):
        shared_roll(False, write_after_read=True)(rand(8))


def without_barriers(program, which=None):
    """The program with its barriers removed (`which`: only those positions in walk order)."""
    launches = []
    for launch in program.launches:
        barriers = [s for s in ir.walk_stmts(launch.body) if isinstance(s, Barrier)]
        drop = set(barriers if which is None else [barriers[i] for i in which])
        body = ir.map_stmt(launch.body, lambda s: ir.Seq(()) if s in drop else None)
        launches.append(Launch(launch.name, launch.params, body, launch.grid, launch.block, launch.shared_bytes))
    return GpuProgram(program.kernel, launches, program.temporaries)


def test_matmul_without_barriers_races():
    f, _, args = example("matmul_shared")
    with pytest.raises(RaceError, match=r"C_kernel: race on shared buffer (A|B)_shared.*no barrier orders them"):
        SimFunction(without_barriers(f.program))(*args)


def test_matmul_without_the_first_barrier_races_across_iterations():
    """Iteration k_o + 1 refills the tile while slower threads may still read iteration k_o's."""
    f, _, args = example("matmul_shared")
    assert sum(isinstance(s, Barrier) for s in ir.walk_stmts(f.program.launches[0].body)) == 3
    with pytest.raises(RaceError, match=r"race on shared buffer A_shared.* writes it and .* read it before it"):
        SimFunction(without_barriers(f.program, which=[0]))(*args)


def test_two_threads_writing_one_global_element_race():
    X, Y = Buffer("X", (4,), "float32"), Buffer("Y", (4,), "float32")
    body = threads(4, lambda bx, tx: Store(Y, (const(0),), Load(X, (tx,))))
    with pytest.raises(
        RaceError, match=r"kernel k: race on global buffer Y\[0\]: thread \(\d, 0, 0\) .* in the same store"
    ):
        SimFunction(program(body, [X], [Y]))(rand(4))


@pytest.mark.parametrize("max_lanes", [1 << 17, 4])  # blocks in one chunk, or one block a chunk
def test_blocks_racing_on_global_memory(monkeypatch, max_lanes):
    monkeypatch.setattr(sim, "MAX_LANES", max_lanes)
    X, Y = Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32")
    same_elements = threads(4, lambda bx, tx: Store(Y, (tx,), Load(X, (bx * 4 + tx,))), blocks=2)
    with pytest.raises(
        RaceError, match=r"Y\[0\]: thread \(0, 0, 0\) of block \(\d, 0, 0\) writes it .*different blocks"
    ):
        SimFunction(program(same_elements, [X], [Y]))(rand(8))

    def neighbours(bx, tx):  # write one's own element, then read the other block's (in any order)
        i = bx * 4 + tx
        return seq(Store(Y, (i,), Load(X, (i,))), Store(X, (i,), Load(Y, ((i + 4) % 8,))))

    message = (
        r"global buffer Y\[\d\]: .* (reads it and .* wrote|writes it and .* read) it before it; threads of different"
    )
    with pytest.raises(RaceError, match=message):
        SimFunction(program(threads(4, neighbours, blocks=2), [], [X, Y]))(rand(8), rand(8))


def test_many_threads_reading_one_element_is_fine():
    X, Y = Buffer("X", (1,), "float32"), Buffer("Y", (2, 4), "float32")
    T = Buffer("T", (2,), "float32")
    body = threads(
        4,
        lambda bx, tx: seq(
            IfThenElse(tx < 1, Store(T, (bx,), Load(X, (const(0),)) + 1.0)),
            Barrier(),
            Store(Y, (bx, tx), Load(T, (bx,)) + Load(X, (const(0),))),
        ),
        blocks=2,
    )
    y, _ = SimFunction(program(body, [X], [Y, T]))(np.ones(1, "float32"))
    np.testing.assert_array_equal(y, np.full((2, 4), 3.0, "float32"))


def test_a_barrier_reached_by_some_threads_of_a_block_is_an_error():
    Y = Buffer("Y", (4,), "float32")
    body = threads(4, lambda bx, tx: seq(IfThenElse(tx < 2, Barrier()), Store(Y, (tx,), const(1.0))))
    with pytest.raises(ScheduleError, match="condition that differs"):
        program(body, [], [Y])  # lowering refuses it; the simulator does not rely on that
    f = SimFunction(GpuProgram(Kernel("k", [Y], 0, body), [Launch("k", [Y], body, (1, 1, 1), (4, 1, 1))]))
    message = r"only some threads of a block: thread \(0, 0, 0\) .* waits at it, thread \(2, 0, 0\)"
    with pytest.raises(RaceError, match=message):
        f()


def test_out_of_bounds_on_an_active_lane_is_an_error():
    X, Y = Buffer("X", (4,), "float32"), Buffer("Y", (4,), "float32")
    body = threads(4, lambda bx, tx: Store(Y, (tx,), Load(X, (tx + 1,))))
    message = (
        r"kernel k: out-of-bounds load from X\[4\]: shape is \(4,\) "
        r"\(thread \(3, 0, 0\) of block \(0, 0, 0\), at bx=0, tx=3\)"
    )
    with pytest.raises(IRError, match=message):
        SimFunction(program(body, [X], [Y]))(rand(4))


# ---------------------------------------------------------------------------------------------
# arguments


def test_argument_conventions_and_errors():
    f, reference, (x,) = example("elementwise")
    assert f.name == "Y_kernel" and f.kernel is f.program.kernel and "SimFunction Y_kernel(X, Y)" in repr(f)
    expected = reference(x)
    y = np.zeros_like(x)
    assert f(x, out=y) is y
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    y2 = np.zeros_like(x)
    f(x, y2)
    np.testing.assert_array_equal(y, y2)
    with pytest.raises(ShapeError, match="takes 1 input"):
        f()
    with pytest.raises(ShapeError, match="has shape"):
        f(x[:10])
    with pytest.raises(DTypeError, match="float64, expected float32"):
        f(x.astype("float64"))
    with pytest.raises(LayoutError, match="C-contiguous"):
        f(np.zeros(2000, "float32")[::2])
    with pytest.raises(LayoutError, match="overlaps"):
        f(x, out=x)
    with pytest.raises(LayoutError, match="numpy array"):
        f(list(x))


def test_torch_tensors_in_give_torch_tensors_out():
    torch = pytest.importorskip("torch")
    f, reference, (x,) = example("elementwise")
    y = f(torch.from_numpy(x))
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-6)
