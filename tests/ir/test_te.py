"""Tensor expressions: construction rules, dtypes and the errors users see."""

import numpy as np
import pytest

import minitc as tc
from minitc.expr import Compare, Const, EqualityTest


def test_compute_axes_take_lambda_names():
    A = tc.placeholder((3, 4), name="A")
    B = tc.compute((3, 4), lambda row, col: A[row, col] * 2.0, name="B")
    assert [a.name for a in B.op.axes] == ["row", "col"]
    assert B.dtype == "float32" and B.shape == (3, 4)


def test_python_scalars_adopt_the_tensor_dtype():
    A = tc.placeholder((3,), "float64", name="A")
    B = tc.compute((3,), lambda i: A[i] * 2 + 0.5, name="B")
    assert B.dtype == "float64"
    X = tc.placeholder((3,), "int32", name="X")
    Y = tc.compute((3,), lambda i: X[i] * 3 + 1, name="Y")
    assert Y.dtype == "int32"


def test_equality_builds_a_comparison_and_keeps_identity_semantics():
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: tc.select(i == 0, A[i], 0.0), name="B")
    cond = B.op.body.cond
    assert isinstance(cond, EqualityTest) and cond.op == "eq"
    i = B.op.axes[0]
    assert i in [A, i]  # `in` is identity, not a comparison node
    x = np.arange(4, dtype="float32") + 1
    np.testing.assert_array_equal(tc.build(B)(x), [1, 0, 0, 0])


def test_constant_folding():
    e = tc.cast(tc.placeholder((1,), name="p")[0], "float32") * 1.0
    assert not isinstance(e, Const)
    assert isinstance(tc.expr.binary("add", Const(2, "int64"), Const(3, "int64")), Const)
    assert isinstance(tc.expr.compare("lt", Const(2, "int64"), Const(3, "int64")), Const)
    assert not isinstance(tc.expr.compare("lt", Const(2, "int64"), tc.expr.Var("v")), Const)
    assert isinstance(tc.expr.compare("lt", tc.expr.Var("v"), 3), Compare)


def test_no_truth_value():
    A = tc.placeholder((4,), name="A")
    with pytest.raises(TypeError, match="use tc.select"):
        tc.compute((4,), lambda i: A[i] if i < 2 else 0.0)


@pytest.mark.parametrize(
    "fn, error, match",
    [
        (lambda A, X: tc.compute((4,), lambda i: A[i] + X[i]), tc.DTypeError, "float32 and int32; use tc.cast"),
        (lambda A, X: tc.compute((4,), lambda i: X[i] / 2), tc.DTypeError, "use `//`"),
        (lambda A, X: tc.compute((4,), lambda i: A[i] // 2.0), tc.DTypeError, "floordiv is defined on integers"),
        (lambda A, X: tc.compute((4,), lambda i: A[i * 1.5]), tc.DTypeError, "cannot combine the float 1.5"),
        (lambda A, X: tc.compute((4,), lambda i: tc.exp(X[i])), tc.DTypeError, "exp needs a float argument"),
        (lambda A, X: tc.compute((4,), lambda i: tc.select(A[i], 1.0, 0.0)), tc.DTypeError, "boolean condition"),
        (lambda A, X: tc.compute((4,), lambda i, j: A[i]), tc.ShapeError, "takes 2 arguments"),
        (lambda A, X: A[1, 2], tc.ShapeError, "indexed with 2"),
        (lambda A, X: tc.placeholder((0, 3)), tc.ShapeError, "positive ints"),
        (lambda A, X: tc.placeholder((3,), "complex64"), tc.DTypeError, "unsupported dtype"),
        (lambda A, X: tc.reduce_axis(0), tc.ShapeError, "positive int"),
        (lambda A, X: tc.sum(A[0], axis=None), tc.ShapeError, "axes made by tc.reduce_axis"),
    ],
)
def test_definition_errors(fn, error, match):
    A = tc.placeholder((4,), name="A")
    X = tc.placeholder((4,), "int32", name="X")
    with pytest.raises(error, match=match):
        fn(A, X)


def test_reduction_must_be_the_whole_body():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis(5, name="k")
    with pytest.raises(tc.ShapeError, match="a reduction must be the whole body"):
        tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k) * 2.0)


def test_unbound_reduce_axis():
    A = tc.placeholder((4, 5), name="A")
    k = tc.reduce_axis(5, name="k")
    with pytest.raises(tc.ShapeError, match="reduce axis k is used but not bound"):
        tc.compute((4,), lambda i: A[i, k] * 2.0)


def test_bool_compute_is_rejected_by_schedule():
    A = tc.placeholder((4,), name="A")
    B = tc.compute((4,), lambda i: A[i] > 0.0, name="B")
    with pytest.raises(tc.ScheduleError, match="produces booleans; cast"):
        tc.Schedule(B)
