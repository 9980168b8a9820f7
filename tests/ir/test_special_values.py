"""NaN, infinities, signed zeros and denormals: every operator gives numpy's answer on the CPU
(template and naive loop nest), in the reference interpreter and in the GPU simulator."""

import numpy as np
import pytest
from fuzz_schedules import with_special_values

import minitc as tc
from minitc.expr import INTRINSICS
from minitc.interp import interpret
from minitc.intrinsics import NUMPY_INTRINSICS

pytestmark = pytest.mark.avx2

TOL = dict(rtol=1e-3, atol=1e-3)


def _instance_with_specials(name, seed, size="tiny"):
    rng = np.random.default_rng(seed)
    inst = tc.ops.OPS[name].instantiate(size, rng)
    arrays = with_special_values(inst.arrays, rng)
    with np.errstate(all="ignore"):
        expected = inst.reference(*arrays, **inst.params)
    return inst, arrays, expected


@pytest.mark.parametrize("name", sorted(tc.ops.OPS))
def test_every_op_with_special_values(name):
    for seed in range(3):
        inst, arrays, expected = _instance_with_specials(name, seed, size=("tiny", "small")[seed % 2])
        args = list(inst.placeholders) + [inst.output]
        assert any(np.isnan(a).any() for a in arrays if a.dtype.kind == "f")
        for schedule in (inst.output, tc.Schedule(inst.output)):  # the template, the naive nest
            f = tc.build(schedule, args=args)
            np.testing.assert_allclose(f(*arrays), expected, err_msg=f"{name} seed {seed}", **TOL)


@pytest.mark.parametrize("name", sorted(tc.ops.OPS))
def test_interpreter_and_simulator_agree_on_special_values(name):
    inst, arrays, expected = _instance_with_specials(name, 7)
    args = list(inst.placeholders) + [inst.output]
    out = np.zeros(expected.shape, expected.dtype)
    with np.errstate(all="ignore"):
        interpret(tc.lower(inst.output, args=args, target="llvm"), list(arrays) + [out])
        simulated = tc.build(inst.output, target="cuda-sim", args=args)(*arrays)
    np.testing.assert_allclose(out, expected, **TOL)
    np.testing.assert_allclose(simulated, expected, **TOL)


# -- the reproducers of issue 20 -------------------------------------------------------------


def test_max_reduction_keeps_nan():
    A = tc.placeholder((1, 16), "float32", name="A")
    a = np.zeros((1, 16), "float32")
    a[0, 3] = np.nan
    assert np.isnan(tc.build(tc.ops.max(A, axis=1))(a)).all()
    assert np.isnan(tc.build(tc.ops.min(A, axis=1))(a)).all()


def test_maximum_and_minimum_keep_nan_in_either_operand():
    X, Y = tc.placeholder((16,), "float32", name="X"), tc.placeholder((16,), "float32", name="Y")
    x, y = np.ones(16, "float32"), np.full(16, 2.0, "float32")
    x[0], y[1] = np.nan, np.nan
    for op, ref in ((tc.ops.maximum, np.maximum), (tc.ops.minimum, np.minimum)):
        f = tc.build(op(X, Y))
        np.testing.assert_array_equal(f(x, y), ref(x, y))
        np.testing.assert_array_equal(f(y, x), ref(y, x))


def test_relu_keeps_nan_and_infinities():
    X = tc.placeholder((8,), "float32", name="X")
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.0, 1e-40, 2.0], "float32")
    np.testing.assert_array_equal(
        tc.build(tc.ops.relu(X))(x), np.array([np.nan, np.inf, 0, 0, 0, 0, 1e-40, 2], "float32")
    )


def test_max_pool_keeps_a_nan_in_its_window():
    X = tc.placeholder((1, 1, 4, 4), "float32", name="X")
    x = np.zeros((1, 1, 4, 4), "float32")
    x[0, 0, 1, 1] = np.nan
    got = tc.build(tc.ops.max_pool2d(X, 2))(x)
    np.testing.assert_array_equal(got, [[[[np.nan, 0], [0, 0]]]])


def test_dense_relu_keeps_a_nan_row():
    X, W = tc.placeholder((4, 8), "float32", name="X"), tc.placeholder((16, 8), "float32", name="W")
    x, w = np.ones((4, 8), "float32"), np.ones((16, 8), "float32")
    x[2, 5] = np.nan
    got = tc.build(tc.ops.dense(X, W, activation="relu"))(x, w)
    assert np.isnan(got[2]).all() and np.isfinite(np.delete(got, 2, axis=0)).all()


EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-310, -1e-310, 1.0, -1.0, 0.5, -0.5, 88.0, -104.0, 710.0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", sorted(INTRINSICS))
def test_every_intrinsic_on_special_values(fn, dtype):
    """Scalar and vector code of every intrinsic against its numpy meaning (values as numpy
    gives them: NaN where numpy gives NaN, infinities and zeros of the right sign)."""
    x = np.array(EDGES * 2, dtype)
    X = tc.placeholder(x.shape, dtype, name="X")
    Y = tc.compute(x.shape, lambda i: getattr(tc, fn)(X[i]), name="Y")
    vector = tc.Schedule(Y)
    vector.vectorize(vector.split(vector.loops(Y)[0], factor=8)[1])
    with np.errstate(all="ignore"):
        expected = NUMPY_INTRINSICS[fn](x)
    for s in (tc.Schedule(Y), vector):
        got = tc.build(s)(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=fn)
        np.testing.assert_array_equal(np.signbit(got[np.isinf(expected)]), np.signbit(expected[np.isinf(expected)]))
        np.testing.assert_allclose(got, expected, rtol=4e-6 if dtype == "float32" else 1e-14, atol=0)
