"""Index checks before code exists (minitc/lowering/index_check.py): an access that can leave its
buffer, or an index divisor that can be 0, is refused at lowering with a ShapeError naming the
tensor, the expression and its range, on the CPU and the GPU alike; guarded accesses (split
tails, padding, select branches, else branches, compute_at tiles, shared-memory fills) build and
match numpy."""

import numpy as np
import pytest
from gpu_schedules import matmul_shared

import minitc as tc
from minitc import ir
from minitc.driver import lower_gpu
from minitc.expr import Var, compare, const
from minitc.lowering.index_check import Ranges, check_indices
from minitc.templates import template_schedule

B = tc.placeholder((8, 8), "float32", name="B")
b = np.arange(64, dtype="float32").reshape(8, 8)


def _naive(fn, shape=(8, 8)):
    return tc.Schedule(tc.compute(shape, fn, name="C"))


# -- the reproducers of issue 20 ------------------------------------------------------------------


def test_read_past_the_end_is_refused():
    with pytest.raises(tc.ShapeError, match=r"C reads B\[i \+ 1, j\]: index 0 ranges over \[1, 8\] but B has extent 8"):
        tc.build(_naive(lambda i, j: B[i + 1, j]))


def test_read_far_past_the_end_is_refused_not_a_crash():
    with pytest.raises(tc.ShapeError, match=r"index 1 ranges over \[1000000000, 1000000007\]"):
        tc.build(_naive(lambda i, j: B[i, j + 10**9]))


def test_negative_index_is_refused():
    with pytest.raises(tc.ShapeError, match=r"C reads B\[i - 1, j\]: index 0 ranges over \[-1, 6\]"):
        tc.lower(_naive(lambda i, j: B[i - 1, j]))


def test_division_by_constant_zero_is_refused():
    with pytest.raises(tc.ShapeError, match=r"C computes i // 0: it divides by 0"):
        tc.build(_naive(lambda i, j: B[i // 0, j]))
    with pytest.raises(tc.ShapeError, match=r"C computes j % 0"):
        tc.build(_naive(lambda i, j: B[i, j % 0]))


def test_divisor_that_can_be_zero_is_refused():
    with pytest.raises(tc.ShapeError, match=r"C computes j // \(i % 2\): the divisor i % 2 takes values in \[0, 1\]"):
        tc.build(_naive(lambda i, j: B[i, j // (i % 2)]))
    # in a stored value too, not only in an index
    with pytest.raises(tc.ShapeError, match=r"the divisor i - 3 takes values in \[-3, 4\]"):
        tc.build(_naive(lambda i, j: tc.cast(j // (i - 3), "float32")))


def test_divisor_provably_non_zero_builds():
    got = tc.build(_naive(lambda i, j: B[i, j // (i % 2 + 1)]))(b)
    i, j = np.indices((8, 8))
    np.testing.assert_array_equal(got, b[i, j // (i % 2 + 1)])
    got = tc.build(_naive(lambda i, j: B[i, (j + 8) // (i - 9) + 8]))(b)  # a negative divisor
    np.testing.assert_array_equal(got, b[i, (j + 8) // (i - 9) + 8])


def test_arithmetic_that_wraps_around_proves_nothing():
    """int64 products wrap: `i * 2**62 // 2**62` is not i for i >= 2, and `i * 2**63 + 2**63` is
    0 for odd i."""
    with pytest.raises(tc.ShapeError, match=r"index 0 \(i \* 4611686018427387904 // 4611686018427387904\) cannot be"):
        tc.lower(_naive(lambda i, j: B[i * 2**62 // 2**62, j]))
    with pytest.raises(tc.ShapeError, match=r"beyond int64, so it may wrap around to 0"):
        tc.lower(_naive(lambda i, j: B[i, j // (i * 2**63 + 2**63)]))


def test_divisor_guarded_by_a_select_builds():
    got = tc.build(_naive(lambda i, j: B[i, tc.select(i % 2 != 0, j // (i % 2), 0)]))(b)
    i, j = np.indices((8, 8))
    np.testing.assert_array_equal(got, b[i, np.where(i % 2 != 0, j // np.maximum(i % 2, 1), 0)])


def test_divisor_that_reads_data_is_left_to_the_backend():
    A = tc.placeholder((8,), "int64", name="A")
    D = tc.placeholder((8,), "int64", name="D")
    f = tc.build(tc.Schedule(tc.compute((8,), lambda i: A[i] // D[i], name="Q")))
    a, d = np.arange(8, dtype="int64") + 3, np.array([1, 2, 3, 4, -1, -2, 5, 6], "int64")
    np.testing.assert_array_equal(f(a, d), a // d)


def test_index_read_from_data_must_be_guarded():
    Ix = tc.placeholder((8,), "int64", name="Ix")
    with pytest.raises(tc.ShapeError, match=r"C reads B\[Ix\[i\], j\]: index 0 .* depends on loaded data"):
        tc.lower(_naive(lambda i, j: B[Ix[i], j]))
    C = tc.compute((8, 8), lambda i, j: tc.select((Ix[i] >= 0) & (Ix[i] < 8), B[Ix[i], j], -1.0), name="C")
    ix = np.array([3, -1, 7, 8, 0, 2, 100, 5], "int64")
    got = tc.build(tc.Schedule(C), args=[Ix, B, C])(ix, b)
    want = np.where(((ix >= 0) & (ix < 8))[:, None], b[np.clip(ix, 0, 7)], -1.0)
    np.testing.assert_array_equal(got, want)


# -- guarded reads build and match numpy ------------------------------------------------------------


def test_read_in_a_guarded_select_branch_builds():
    got = tc.build(_naive(lambda i, j: tc.select(i < 8, B[i % 8, j], 0.0) + tc.select(i < 8, B[i, j], 0.0), (10, 8)))
    np.testing.assert_array_equal(got(b), np.concatenate([2 * b, np.zeros((2, 8), "float32")]))
    # the read in the else branch: the negated condition guards it
    got = tc.build(_naive(lambda i, j: tc.select(i >= 8, 0.0, B[i, j]), (10, 8)))(b)
    np.testing.assert_array_equal(got, np.concatenate([b, np.zeros((2, 8), "float32")]))


def test_guard_one_short_is_refused():
    with pytest.raises(tc.ShapeError, match=r"C reads B\[i, j\]: index 0 ranges over \[0, 8\]"):
        tc.lower(_naive(lambda i, j: tc.select(i < 9, B[i, j], 0.0), (10, 8)))
    with pytest.raises(tc.ShapeError, match=r"index 0 ranges over \[8, 9\]"):  # the wrong branch
        tc.lower(_naive(lambda i, j: tc.select(i < 8, 0.0, B[i, j]), (10, 8)))


def test_padding_builds_naive_and_with_templates():
    X, W = tc.placeholder((1, 3, 7, 9), name="X"), tc.placeholder((4, 3, 3, 3), name="W")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 3, 7, 9)).astype("float32"), rng.standard_normal((4, 3, 3, 3)).astype("float32")
    for stride, padding, dilation in [(1, 1, 1), (2, 2, 1), (1, 2, 2)]:
        Y = tc.ops.conv2d(X, W, stride=stride, padding=padding, dilation=dilation)
        want = tc.ops.reference.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
        for s in (tc.Schedule(Y), template_schedule(Y, "llvm")):
            np.testing.assert_allclose(tc.build(s)(x, w), want, rtol=1e-4, atol=1e-4)
    P = tc.ops.max_pool2d(X, 3, stride=2, padding=1)
    np.testing.assert_allclose(tc.build(P)(x), tc.ops.reference.max_pool2d(x, 3, stride=2, padding=1))


@pytest.mark.parametrize("factors", [(4,), (3, 2), (7,)])
def test_split_tails_build(factors):
    """Splits that do not divide 10 (nested, with the inner loop first) guard their tails."""
    A = tc.placeholder((10, 6), name="A")
    C = tc.compute((10, 6), lambda i, j: A[i, j] * 2.0, name="C")
    s = tc.Schedule(C)
    loop, j = s.loops(C)
    outer = []
    for f in factors:
        o, loop = s.split(loop, factor=f)
        outer.append(o)
    s.reorder(j, *outer, loop)
    fused = s.fuse(j, outer[0])
    s.parallel(fused)
    a = np.random.default_rng(1).standard_normal((10, 6)).astype("float32")
    np.testing.assert_array_equal(tc.build(s)(a), a * 2)


def test_fused_index_under_two_guards_builds():
    """A fused loop split twice, each part with its tail guard: the index `3*o + i` is bounded by
    both guards together (o < 4 and i < 3), as the fuzzer found."""
    A, W = tc.placeholder((4, 3), name="A"), tc.placeholder((3, 3), name="W")
    s = tc.Schedule(tc.ops.matmul(A, W))
    i, j, k = s.loops(s.outputs[0])
    o, inner = s.split(s.fuse(i, j), factor=3)
    inner_o, _ = s.split(inner, factor=2)
    s.reorder(inner_o, o, k)
    s.split(o, nparts=3)
    a, w = (np.random.default_rng(2).standard_normal((n, 3)).astype("float32") for n in (4, 3))
    np.testing.assert_allclose(tc.build(s)(a, w), a @ w, rtol=1e-5)


def test_cache_read_cache_write_and_compute_at_tiles_build():
    A, Bm = tc.placeholder((10, 6), name="A"), tc.placeholder((6, 13), name="Bm")
    k = tc.reduce_axis(6, name="k")
    C = tc.compute((10, 13), lambda i, j: tc.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")
    BL = s.cache_read(Bm, "local", [CL])
    i, j = s.loops(C)
    io, ii = s.split(i, factor=4)
    jo, ji = s.split(j, factor=5)
    s.reorder(io, jo, ii, ji)
    s.compute_at(CL, jo)
    s.compute_at(BL, jo)
    a, bm = np.ones((10, 6), "float32"), np.arange(78, dtype="float32").reshape(6, 13)
    np.testing.assert_allclose(tc.build(s)(a, bm), a @ bm)


# -- GPU lowering --------------------------------------------------------------------------------------


def test_gpu_lowering_refuses_out_of_bounds_reads():
    """Block and thread indices range over their loops' extents like any loop variable."""
    C = tc.compute((8, 8), lambda i, j: B[i, j + 1], name="C")
    s = tc.Schedule(C)
    i, j = s.loops(C)
    s.bind(i, "blockIdx.x")
    s.bind(j, "threadIdx.x")
    with pytest.raises(tc.ShapeError, match=r"C reads B\[i, j \+ 1\]: index 1 ranges over \[1, 8\]"):
        tc.build(s, target="cuda-sim")
    with pytest.raises(tc.ShapeError, match=r"C reads B\[i, j \+ 1\]"):
        lower_gpu(s, "cuda")


def test_gpu_shared_memory_tiles_build():
    s, ref, shapes = matmul_shared(M=40, N=36, K=24)
    rng = np.random.default_rng(2)
    a, bm = (rng.standard_normal(sh).astype("float32") for sh in shapes)
    np.testing.assert_allclose(tc.build(s, target="cuda-sim")(a, bm), ref(a, bm), rtol=1e-4, atol=1e-4)
    X, W = tc.placeholder((1, 3, 7, 9), name="X"), tc.placeholder((4, 3, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)  # padding read into a shared tile
    x, w = rng.standard_normal((1, 3, 7, 9)).astype("float32"), rng.standard_normal((4, 3, 3, 3)).astype("float32")
    np.testing.assert_allclose(
        tc.build(Y, target="cuda-sim", db=False)(x, w), tc.ops.reference.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4
    )


# -- planted IR -----------------------------------------------------------------------------------------


def _kernel(body, out):
    return ir.Kernel("planted", [out], 0, body)


def test_planted_out_of_bounds_write_is_refused():
    out, i = ir.Buffer("Out", (8,), "float32"), Var("i")
    store = ir.Store(out, (i + 1,), const(1.0))
    with pytest.raises(tc.ShapeError, match=r"Out writes Out\[i \+ 1\]: index 0 ranges over \[1, 8\]"):
        check_indices(_kernel(ir.For(i, 8, "serial", store), out))
    # the same store under `if i < 7`, or in the else branch of `if i >= 7`, is in bounds
    check_indices(_kernel(ir.For(i, 8, "serial", ir.IfThenElse(compare("lt", i, 7), store)), out))
    check_indices(_kernel(ir.For(i, 8, "serial", ir.IfThenElse(compare("ge", i, 7), ir.Seq(()), store)), out))


def test_planted_write_into_a_local_tile_is_refused():
    out, tile = ir.Buffer("Out", (8,), "float32"), ir.Buffer("T", (4,), "float32", "local")
    io, ii = Var("io"), Var("ii")
    fill = ir.For(ii, 5, "serial", ir.Store(tile, (ii,), const(0.0)))  # one element too many
    body = ir.For(io, 2, "serial", ir.Allocate(tile, fill))
    with pytest.raises(tc.ShapeError, match=r"T writes T\[ii\]: index 0 ranges over \[0, 4\] but T has extent 4"):
        check_indices(_kernel(body, out))


def test_split_tail_guard_is_exact():
    """`io*4 + ii < 10` bounds `io*4 + ii` by 9 and `(io*4 + ii) // 3` by 3, which the box alone
    (io < 3, ii < 4) puts at 11 and 3."""
    io, ii = Var("io"), Var("ii")
    index = io * 4 + ii
    where = Ranges({io: (0, 2), ii: (0, 3)}).assuming(compare("lt", index, 10), True)
    assert Ranges({io: (0, 2), ii: (0, 3)}).of(index) == (0, 11)
    assert where.of(index) == (0, 9)
    assert where.of(index // 3) == (0, 3)
    assert where.of(index % 3) == (0, 2)
    # a fused index cancels: `x // 8 * 2 + h - x // 8 * 2` is `h`
    x, h = Var("x"), Var("h")
    assert Ranges({x: (0, 99), h: (0, 3)}).of(x // 8 * 2 + h - x // 8 * 2) == (0, 3)
