"""The reference interpreter: results against numpy, exact dtype rules, bounds checks, speed."""

import math
import time

import numpy as np
import pytest

from minitc.errors import DTypeError, IRError, LayoutError, ShapeError
from minitc.expr import Cast, Const, Var, call, cast, compare, const, logical, maximum, minimum, select
from minitc.interp import interpret
from minitc.ir import Allocate, Buffer, For, IfThenElse, Kernel, Load, Store, seq
from minitc.verify import verify

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def matmul_kernel(M, N, K, kinds=("serial", "serial", "serial")):
    """C[i, j] = 0; C[i, j] += A[i, k] * B[k, j], written as init + update stores."""
    A, B, C = Buffer("A", (M, K), "float32"), Buffer("B", (K, N), "float32"), Buffer("C", (M, N), "float32")
    i, j, k = Var("i"), Var("j"), Var("k")
    update = Store(C, (i, j), Load(C, (i, j)) + Load(A, (i, k)) * Load(B, (k, j)))
    body = For(i, M, kinds[0], For(j, N, kinds[1], seq(Store(C, (i, j), const(0.0)), For(k, K, kinds[2], update))))
    return Kernel("matmul", [A, B, C], 2, body)


def unary_kernel(n, fn, in_dtype="float32", out_dtype=None):
    """Y[i] = fn(X[i], i) over a 1-D buffer."""
    X, Y = Buffer("X", (n,), in_dtype), Buffer("Y", (n,), out_dtype or in_dtype)
    i = Var("i")
    return Kernel("unary", [X, Y], 1, For(i, n, "serial", Store(Y, (i,), fn(Load(X, (i,)), i))))


def run_unary(kernel, x, out_dtype=None):
    y = np.zeros(x.shape, out_dtype or x.dtype)
    interpret(kernel, [x, y])
    return y


def test_matmul_matches_numpy():
    kernel = matmul_kernel(5, 7, 3)
    verify(kernel)
    a, b, c = rand(5, 3), rand(3, 7), np.full((5, 7), 123.0, "float32")
    interpret(kernel, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_matmul_16_cubed_is_fast():
    kernel = matmul_kernel(16, 16, 16)
    a, b, c = rand(16, 16), rand(16, 16), np.zeros((16, 16), "float32")
    start = time.perf_counter()
    interpret(kernel, [a, b, c])
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert elapsed < 0.5, f"16^3 matmul took {elapsed:.3f} s"


def test_loop_kinds_run_as_serial_loops():
    kernel = matmul_kernel(4, 8, 6, kinds=("parallel", "unrolled", "vectorized"))
    a, b, c = rand(4, 6), rand(6, 8), np.zeros((4, 8), "float32")
    interpret(kernel, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_nested_parallel_unrolled_vectorized_tiles():
    """Y[io*8 + ii*4 + iv] = 2 * X[...] with three nested loop kinds."""
    X, Y = Buffer("X", (32,), "float32"), Buffer("Y", (32,), "float32")
    io, ii, iv = Var("io"), Var("ii"), Var("iv")
    idx = io * 8 + ii * 4 + iv
    store = Store(Y, (idx,), Load(X, (idx,)) * 2.0)
    body = For(io, 4, "parallel", For(ii, 2, "unrolled", For(iv, 4, "vectorized", store)))
    kernel = Kernel("scale", [X, Y], 1, body)
    verify(kernel)
    x = rand(32)
    np.testing.assert_allclose(run_unary(kernel, x), 2 * x, rtol=1e-5)


def test_guarded_elementwise():
    X, Y = Buffer("X", (12,), "float32"), Buffer("Y", (12,), "float32")
    i = Var("i")
    guarded = IfThenElse(i < 10, Store(Y, (i,), maximum(Load(X, (i,)), 0.0)))
    kernel = Kernel("relu", [X, Y], 1, For(i, 12, "serial", guarded))
    x, y = rand(12), np.full(12, 7.0, "float32")
    interpret(kernel, [x, y])
    np.testing.assert_allclose(y[:10], np.maximum(x[:10], 0), rtol=1e-5)
    assert (y[10:] == 7.0).all()  # the guard kept the tail untouched


def test_if_else():
    X, Y = Buffer("X", (6,), "float32"), Buffer("Y", (6,), "float32")
    i = Var("i")
    store = lambda v: Store(Y, (i,), v)  # noqa: E731
    body = For(i, 6, "serial", IfThenElse(i % 2 < 1, store(Load(X, (i,))), store(const(-1.0))))
    x = rand(6)
    y = run_unary(Kernel("k", [X, Y], 1, body), x)
    np.testing.assert_allclose(y, np.where(np.arange(6) % 2 == 0, x, -1), rtol=1e-5)


def local_tile_kernel(init_local: bool):
    """Y[r, :] = X[r, :] + 1 through a local row buffer; without init, Y reads garbage."""
    X, Y = Buffer("X", (3, 4), "float32"), Buffer("Y", (3, 4), "float32")
    T = Buffer("T", (4,), "float32", "local")
    r, c1, c2 = Var("r"), Var("c"), Var("c")
    fill = For(c1, 4, "serial", Store(T, (c1,), Load(X, (r, c1)) + 1.0)) if init_local else None
    body = For(r, 3, "serial", Allocate(T, seq(fill, For(c2, 4, "serial", Store(Y, (r, c2), Load(T, (c2,)))))))
    return Kernel("tile", [X, Y], 1, body)


def test_local_allocate():
    x = rand(3, 4)
    np.testing.assert_allclose(run_unary(local_tile_kernel(True), x), x + 1, rtol=1e-5)


def test_uninitialised_local_read_is_nan():
    y = run_unary(local_tile_kernel(False), rand(3, 4))
    assert np.isnan(y).all()


def test_allocate_is_fresh_each_execution():
    """T is written only when i == 0; later executions of the Allocate must not see it."""
    Y = Buffer("Y", (3,), "int64")
    T = Buffer("T", (1,), "int64", "local")
    i = Var("i")
    zero = const(0)
    first_only = IfThenElse(compare("eq", i, 0), Store(T, (zero,), const(5)))
    body = For(i, 3, "serial", Allocate(T, seq(first_only, Store(Y, (i,), Load(T, (zero,))))))
    y = np.zeros(3, "int64")
    interpret(Kernel("k", [Y], 0, body), [y])
    assert y.tolist() == [5, -999999, -999999]


def padded_shift_kernel(guarded: bool):
    """Y[i] = X[i - 1], zero at i == 0: the load is out of bounds unless the select guards it."""
    X, Y = Buffer("X", (8,), "float32"), Buffer("Y", (8,), "float32")
    i = Var("i")
    load = Load(X, (i - 1,))
    value = select(i - 1 >= 0, load, 0.0) if guarded else load
    return Kernel("pad", [X, Y], 1, For(i, 8, "serial", Store(Y, (i,), value)))


def test_select_is_lazy_for_padding():
    x = rand(8)
    y = run_unary(padded_shift_kernel(True), x)
    np.testing.assert_allclose(y, np.concatenate([[0], x[:-1]]), rtol=1e-5)


def test_negative_index_raises_instead_of_wrapping():
    with pytest.raises(IRError, match=r"out-of-bounds load from X\[-1\]: shape is \(8,\) \(at i=0\)"):
        run_unary(padded_shift_kernel(False), rand(8))


def test_out_of_bounds_store_raises():
    X, Y = Buffer("X", (4,), "float32"), Buffer("Y", (4, 4), "float32")
    i, j = Var("i"), Var("j")
    kernel = Kernel("k", [X, Y], 1, For(i, 4, "serial", For(j, 5, "serial", Store(Y, (i, j), Load(X, (i,))))))
    with pytest.raises(IRError, match=r"out-of-bounds store to Y\[0, 4\]: shape is \(4, 4\)"):
        interpret(kernel, [rand(4), np.zeros((4, 4), "float32")])


def test_float32_arithmetic_stays_float32():
    # 1e8 + 1 == 1e8 in float32 but not in float64.
    y = run_unary(unary_kernel(1, lambda x, i: x + 1.0 - x), np.array([1e8], "float32"))
    assert y[0] == np.float32(1e8) + np.float32(1) - np.float32(1e8) == 0.0
    y64 = run_unary(unary_kernel(1, lambda x, i: x + 1.0 - x, "float64"), np.array([1e8]))
    assert y64[0] == 1.0


def test_integer_floordiv_mod_follow_python():
    n = 11
    expect_div = [(v - 5) // 3 for v in range(n)]
    expect_mod = [(v - 5) % -3 for v in range(n)]
    y = run_unary(unary_kernel(n, lambda x, i: (i - 5) // 3, "int64"), np.zeros(n, "int64"))
    assert y.tolist() == expect_div
    y = run_unary(unary_kernel(n, lambda x, i: (i - 5) % -3, "int64"), np.zeros(n, "int64"))
    assert y.tolist() == expect_mod


def test_integer_division_by_zero_gives_zero_as_numpy():
    x = np.array([7, -7], "int64")
    with np.errstate(divide="ignore"):
        expected_div, expected_mod = x // np.zeros(2, "int64"), x % np.zeros(2, "int64")
    zero = Const(0, "int64")
    assert run_unary(unary_kernel(2, lambda x, i: x // zero, "int64"), x).tolist() == expected_div.tolist() == [0, 0]
    assert run_unary(unary_kernel(2, lambda x, i: x % zero, "int64"), x).tolist() == expected_mod.tolist() == [0, 0]


def test_int32_wraps_and_casts_truncate():
    big = np.array([2**31 - 1], "int32")
    y = run_unary(unary_kernel(1, lambda x, i: x + Const(1, "int32"), "int32"), big)
    assert y[0] == -(2**31)
    x = np.array([-2.7, 2.7, -0.5, 3.0], "float32")
    y = run_unary(unary_kernel(4, lambda v, i: cast(v, "int32"), "float32", "int32"), x, "int32")
    assert y.tolist() == x.astype("int32").tolist() == [-2, 2, 0, 3]
    y = run_unary(unary_kernel(4, lambda v, i: Cast("float64", v), "float32", "float64"), x, "float64")
    assert y.tolist() == x.astype("float64").tolist()


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "erf", "abs", "floor", "ceil", "sigmoid"])
def test_intrinsics(name):
    x = np.array([0.25, 1.5, 3.0, 0.7], "float32")
    reference = {
        "erf": np.vectorize(math.erf)(x.astype("float64")),
        "sigmoid": 1 / (1 + np.exp(-x.astype("float64"))),
    }.get(name)
    if reference is None:
        reference = getattr(np, name)(x)
    y = run_unary(unary_kernel(4, lambda v, i: call(name, v)), x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, reference, rtol=1e-5)


def test_max_reduction_from_minus_inf_and_nan_propagation():
    X, Y = Buffer("X", (3, 5), "float32"), Buffer("Y", (3,), "float32")
    i, k = Var("i"), Var("k")
    body = For(
        i,
        3,
        "serial",
        seq(
            Store(Y, (i,), const(-math.inf)),
            For(k, 5, "serial", Store(Y, (i,), maximum(Load(Y, (i,)), Load(X, (i, k))))),
        ),
    )
    x = rand(3, 5)
    x[2, 3] = np.nan
    y = np.zeros(3, "float32")
    interpret(Kernel("rowmax", [X, Y], 1, body), [x, y])
    np.testing.assert_allclose(y[:2], x[:2].max(axis=1), rtol=1e-5)
    assert np.isnan(y[2])
    y = run_unary(unary_kernel(2, lambda v, i: minimum(v, 0.0)), np.array([np.nan, 1.0], "float32"))
    assert np.isnan(y[0]) and y[1] == 0.0


def test_comparisons_and_logic_store_bools():
    n = 6
    cond = lambda x, i: logical("or", logical("and", i >= 2, i < 4), ~(x > 0.0))  # noqa: E731
    x = np.array([1, -1, 1, 1, 1, -1], "float32")
    y = run_unary(unary_kernel(n, cond, "float32", "bool"), x, "bool")
    i = np.arange(n)
    assert y.tolist() == (((i >= 2) & (i < 4)) | ~(x > 0)).tolist()


def test_argument_checks():
    kernel = matmul_kernel(2, 2, 2)
    a = np.zeros((2, 2), "float32")
    with pytest.raises(ShapeError, match="takes 3 arrays"):
        interpret(kernel, [a, a])
    with pytest.raises(ShapeError, match=r"argument 1 \(B\).*shape \(3, 2\)"):
        interpret(kernel, [a, np.zeros((3, 2), "float32"), a])
    with pytest.raises(DTypeError, match=r"argument 2 \(C\).*float64"):
        interpret(kernel, [a, a, np.zeros((2, 2))])
    with pytest.raises(LayoutError, match="numpy array"):
        interpret(kernel, [a, [[0, 0], [0, 0]], a])


def test_unbound_variable_raises():
    X, Y = Buffer("X", (4,), "float32"), Buffer("Y", (4,), "float32")
    i, stray = Var("i"), Var("stray")
    kernel = Kernel("k", [X, Y], 1, For(i, 4, "serial", Store(Y, (i,), Load(X, (stray,)))))
    with pytest.raises(IRError, match="variable stray is used outside any loop"):
        interpret(kernel, [rand(4), np.zeros(4, "float32")])
