"""Low-precision dtypes in tensor expressions, the reference interpreter and te_eval:
bfloat16, float16, int8 and uint8 (minitc/dtypes.py), explicit casts, promotion rules, and
reductions that accumulate in a wider dtype (`tc.sum(..., dtype=)`). The LLVM backend runs
the same programs in tests/backends/test_llvm_lowp.py."""

import ml_dtypes
import numpy as np
import pytest
from helpers import LOW_DTYPES as LOW
from helpers import lowp_sample as sample

import minitc as tc
from minitc import dtypes, te_eval
from minitc.errors import DTypeError
from minitc.expr import Cast
from minitc.interp import interpret


def run_interp(out, *arrays):
    kernel = tc.lower(tc.Schedule(out))
    result = np.zeros(kernel.outputs[0].shape, kernel.outputs[0].dtype)
    interpret(kernel, list(arrays) + [result])
    return result


def test_dtype_names_and_numpy_types():
    assert dtypes.check(ml_dtypes.bfloat16) == dtypes.check("bfloat16") == "bfloat16"
    assert dtypes.check(np.float16) == "float16" and dtypes.check(np.uint8) == "uint8"
    assert np.dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)  # importing minitc registers it
    with pytest.raises(DTypeError, match="bfloat16, float16"):
        dtypes.check("float8")


def test_promotion_needs_explicit_casts_between_kinds():
    assert dtypes.promote("bfloat16", "float32") == "float32"
    assert dtypes.promote("int8", "int32") == "int32" and dtypes.promote("uint8", "int32") == "int32"
    for a, b in [("bfloat16", "float16"), ("uint8", "int8"), ("int8", "bfloat16")]:
        with pytest.raises(DTypeError, match="tc.cast"):
            dtypes.promote(a, b)
    A = tc.placeholder((4,), "bfloat16", name="A")
    assert (A[0] * 2).dtype == "bfloat16"  # a Python scalar adopts the tensor's dtype
    assert (A[0] + tc.placeholder((4,), "float32", name="F")[0]).dtype == "float32"


def test_constants_hold_what_their_dtype_holds():
    A = tc.placeholder((4,), "int8", name="A")
    assert tc.cast(300, "int8").value == 44 and tc.cast(200, "uint8").value == 200
    assert tc.cast(1 + 2**-9, "bfloat16").value == 1.0  # rounded to bfloat16's 8 bits
    assert (A[0] + 0).dtype == "int8"


@pytest.mark.parametrize("dtype", LOW)
def test_elementwise_in_the_interpreter_and_te_eval(dtype):
    A = tc.placeholder((21,), dtype, name="A")
    B = tc.placeholder((21,), dtype, name="B")
    if dtypes.is_int(dtype):
        C = tc.compute((21,), lambda i: A[i] * B[i] + A[i] // B[i] - tc.max(A[i], B[i]), name="C")
    else:
        C = tc.compute((21,), lambda i: A[i] * B[i] + tc.exp(A[i]) - tc.max(A[i], B[i]), name="C")
    a, b = sample(21, dtype, 1), sample(21, dtype, 2)
    with np.errstate(all="ignore"):  # int8 products wrap, as numpy's
        if dtypes.is_int(dtype):
            quotient = np.where(b != 0, a // np.where(b == 0, 1, b), 0).astype(dtype)
            expected = a * b + quotient - np.maximum(a, b)
        else:
            expected = a * b + np.exp(a) - np.maximum(a, b)
        assert run_interp(C, a, b).dtype == np.dtype(dtype)
        np.testing.assert_array_equal(run_interp(C, a, b), expected)
        np.testing.assert_array_equal(te_eval.evaluate(C, {A: a, B: b})[0], expected)


@pytest.mark.parametrize("src", LOW + ["float32", "int32"])
def test_casts_in_the_interpreter(src):
    A = tc.placeholder((16,), src, name="A")
    a = np.abs(sample(16, src, 3)) if src != "uint8" else sample(16, src, 3)
    for dst in LOW + ["float32", "int32"]:
        C = tc.compute((16,), lambda i: tc.cast(A[i], dst), name="C")
        np.testing.assert_array_equal(run_interp(C, a), a.astype(dst), err_msg=f"{src} -> {dst}")


@pytest.mark.parametrize(
    "dtype, acc", [("bfloat16", "float32"), ("float16", "float32"), ("int8", "int32"), ("uint8", "int32")]
)
def test_matmul_accumulates_in_the_wider_dtype(dtype, acc):
    M, N, K = 3, 5, 64
    A = tc.placeholder((M, K), dtype, name="A")
    B = tc.placeholder((K, N), dtype, name="B")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k, dtype=acc), name="C")
    assert C.dtype == acc
    # the operands are widened before the product: no int8 wrap-around, no bf16 product rounding
    assert all(isinstance(x, Cast) for x in (C.op.body.source.a, C.op.body.source.b))
    a, b = sample((M, K), dtype, 4), sample((K, N), dtype, 5)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = run_interp(C, a, b)
    assert got.dtype == np.dtype(acc)
    if dtypes.is_int(dtype):
        np.testing.assert_array_equal(got, exact)
        np.testing.assert_array_equal(te_eval.evaluate(C, {A: a, B: b})[0], exact)
    else:  # products exact in float32; only the float32 sum rounds
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(te_eval.evaluate(C, {A: a, B: b})[0], exact, rtol=1e-5, atol=1e-5)


def test_accumulation_dtype_must_be_wider_and_of_the_same_kind():
    A = tc.placeholder((4,), "bfloat16", name="A")
    k = tc.reduce_axis(4, name="k")
    with pytest.raises(DTypeError, match="tc.cast"):
        tc.compute((1,), lambda i: tc.sum(A[k], axis=k, dtype="int32"))
    F = tc.placeholder((4,), "float32", name="F")
    with pytest.raises(DTypeError, match="narrower"):
        tc.compute((1,), lambda i: tc.sum(F[k], axis=k, dtype="bfloat16"))
