"""te_eval, the numpy oracle every generated kernel is checked against: lazy selects and
checked loads, integer semantics and dtypes, chunking, the einsum path for contractions
(convolutions' windows among them) against the point-by-point path, and input errors."""

import numpy as np
import pytest

import minitc as tc
import minitc.ops as ops
from minitc import te, te_eval
from minitc.errors import DTypeError, MinitcError, ShapeError

RTOL, ATOL = 1e-4, 1e-5


def test_te_eval_select_is_lazy_and_loads_are_checked():
    X = tc.placeholder((4,), name="X")
    x = np.arange(4, dtype="float32") + 1
    shifted = tc.compute((6,), lambda i: tc.select((i >= 1) & (i < 5), X[i - 1], 0.0), name="shifted")
    (got,) = te_eval.evaluate(shifted, {X: x})
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 0])
    unguarded = tc.compute((6,), lambda i: X[i - 1], name="unguarded")
    with pytest.raises(ShapeError, match=r"compute unguarded reads X\[-1\] outside its shape \(4,\)"):
        te_eval.evaluate(unguarded, {X: x})
    wrong_guard = tc.compute((6,), lambda i: tc.select(i < 5, X[i - 1], 0.0), name="wrong_guard")
    with pytest.raises(ShapeError, match="wrong_guard reads X"):
        te_eval.evaluate(wrong_guard, {X: x})
    F, k = tc.placeholder((4, 3), name="F"), tc.reduce_axis(3, name="k")  # indices over different axes
    past_the_rows = tc.compute((6,), lambda i: tc.sum(F[i, k] * F[i, k], axis=k), name="past_the_rows")
    with pytest.raises(ShapeError, match=r"compute past_the_rows reads F\[4, 0\] outside its shape \(4, 3\)"):
        te_eval.evaluate(past_the_rows, {F: np.ones((4, 3), "float32")})


def test_te_eval_integer_semantics_and_dtypes():
    A = tc.placeholder((5,), "int32", name="A")
    a = np.array([-7, -1, 0, 3, 8], dtype="int32")
    q = tc.compute((5,), lambda i: A[i] // 3, name="q")
    r = tc.compute((5,), lambda i: A[i] % 3, name="r")
    gq, gr = te_eval.evaluate([q, r], {A: a})
    np.testing.assert_array_equal(gq, [-3, -1, 0, 1, 2])  # floor, not truncation
    np.testing.assert_array_equal(gr, [2, 2, 0, 0, 2])
    assert gq.dtype == np.int32
    F = tc.placeholder((3,), "float32", name="F")
    y = tc.compute((3,), lambda i: F[i] * 0.1 + tc.cast(i, "float32"), name="y")
    (gy,) = te_eval.evaluate(y, {"F": np.ones(3, "float32")})
    assert gy.dtype == np.float32
    np.testing.assert_array_equal(gy, np.float32(1) * np.float32(0.1) + np.arange(3, dtype="float32"))


def test_te_eval_chunking_matches_unchunked():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((9, 13)).astype("float32"), rng.standard_normal((13, 7)).astype("float32")
    A, B = tc.placeholder(a.shape, name="A"), tc.placeholder(b.shape, name="B")
    k = tc.reduce_axis(13, name="k")  # (a plain matmul would take the einsum path below)
    C = tc.compute((9, 7), lambda i, j: tc.sum(A[i, k] * B[k, j] * 1.0, axis=k), name="C")
    assert te_eval._contraction(C.op) is None
    S = ops.sum(ops.mul(A, 2.0), axis=None)
    full = te_eval.evaluate([C, S], {A: a, B: b})
    for limit in (1, 5, 40, 100):  # forces chunked spatial axes and chunked reductions
        for got, want in zip(te_eval.evaluate([C, S], {A: a, B: b}, chunk_elements=limit), full):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(full[0], a @ b, rtol=RTOL, atol=ATOL)


def _point_by_point(out, inputs):
    original = te_eval._contraction
    te_eval._contraction = lambda op: None
    try:
        return te_eval.evaluate(out, inputs)
    finally:
        te_eval._contraction = original


def _offset_product(x, w):
    c = tc.reduce_axis(2, name="c")
    return tc.compute((3, 4), lambda o, h: tc.sum(x[c, h + 2] * w[o, c], axis=c), name="offset")


CONTRACTIONS = {  # input shapes, the op
    "matmul": ([(9, 13), (13, 7)], ops.matmul),
    "matmul_tt": ([(13, 9), (7, 13)], lambda a, b: ops.matmul(a, b, transpose_a=True, transpose_b=True)),
    "batch_matmul": ([(3, 5, 4), (3, 4, 6)], ops.batch_matmul),
    "dense_gelu": ([(6, 8), (5, 8), (5,)], lambda *a: ops.dense(*a, activation="gelu")),
    # sliding windows: an index h*2 + r is two dimensions of a strided view
    "conv2d": ([(1, 3, 9, 8), (4, 3, 3, 3)], lambda x, w: ops.conv2d(x, w, padding=1)),
    "conv2d_stride2": ([(2, 3, 9, 8), (4, 3, 3, 2)], lambda x, w: ops.conv2d(x, w, stride=2, padding=1)),
    "conv2d_dilated": ([(1, 2, 11, 10), (3, 2, 3, 3)], lambda x, w: ops.conv2d(x, w, dilation=2)),
    "depthwise": ([(1, 4, 7, 7), (4, 1, 3, 3)], lambda x, w: ops.depthwise_conv2d(x, w, stride=2, padding=1)),
    "conv2d_nchwc": ([(1, 2, 6, 6, 4), (2, 2, 3, 3, 4, 4)], lambda x, w: ops.conv2d_nchwc(x, w, padding=1)),
    "offset": ([(2, 6), (3, 2)], _offset_product),
}


@pytest.mark.parametrize("case", list(CONTRACTIONS))
def test_te_eval_contractions_use_einsum_and_agree_point_by_point(case):
    rng = np.random.default_rng(1)
    shapes, op = CONTRACTIONS[case]
    phs = [tc.placeholder(sh, name=f"in{n}") for n, sh in enumerate(shapes)]
    out = op(*phs)
    product = [t for t in te.graph([out]) if isinstance(t.op, te.ComputeOp) and t.op.reduce_axes]
    assert len(product) == 1 and te_eval._contraction(product[0].op) is not None
    inputs = {p: rng.standard_normal(p.shape).astype("float32") for p in phs}
    (fast,), (slow,) = te_eval.evaluate(out, inputs), _point_by_point(out, inputs)
    assert fast.dtype == slow.dtype == np.float32
    np.testing.assert_allclose(fast, slow, rtol=RTOL, atol=ATOL)


def test_te_eval_other_reductions_are_not_contractions():
    A, B = tc.placeholder((4, 3), "int32", name="A"), tc.placeholder((3, 2), "int32", name="B")
    F = tc.placeholder((4, 3), name="F")
    k = tc.reduce_axis(3, name="k")
    Xs, Ws = tc.placeholder((1, 2, 5), name="Xs"), tc.placeholder((3, 2), name="Ws")
    c = tc.reduce_axis(2, name="c")
    not_contractions = [
        tc.compute((1, 3, 4), lambda n, o, h: tc.sum(Xs[n, c, h * 2] * Ws[o, c], axis=c), name="past_the_end"),
        tc.compute((1, 3, 4), lambda n, o, h: tc.sum(Xs[n, c, 4 - h] * Ws[o, c], axis=c), name="reversed"),
        ops.matmul(A, B),  # integers keep te_eval's exact int64 path
        tc.compute((4, 4), lambda i, j: tc.sum(F[i, k] * F[i, k], axis=k), name="j_unread"),  # a broadcast axis
        tc.compute((4,), lambda i: tc.max(F[i, k] * F[i, k], axis=k), name="max_of_products"),
        tc.compute((6,), lambda i: tc.sum(F[i, k] * F[i, k], axis=k), name="past_the_rows"),  # i spans 6 of F's 4 rows
    ]
    for out in not_contractions:
        assert te_eval._contraction(out.op) is None, out.name


def test_te_eval_input_errors():
    A = tc.placeholder((2, 3), name="A")
    B = ops.relu(A)
    with pytest.raises(MinitcError, match="no input array given for placeholder A"):
        te_eval.evaluate(B, {})
    with pytest.raises(ShapeError, match=r"input A should have shape \(2, 3\)"):
        te_eval.evaluate(B, {A: np.zeros((3, 2), "float32")})
    with pytest.raises(DTypeError, match="input A should be float32, got float64"):
        te_eval.evaluate(B, {A: np.zeros((2, 3))})
