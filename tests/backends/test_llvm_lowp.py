"""Low-precision dtypes through the LLVM backend, against numpy/ml_dtypes and torch:
bfloat16 as LLVM's `bfloat`, float16 as `half`, int8/uint8 as `i8` (signedness in the
instructions). Elementwise code scalar and vectorized, on the host and on an AVX2 target
without AVX-512 BF16, every cast between the dtypes, a matmul
accumulating in float32/int32, and torch tensors in and out (torch's bfloat16 included).
The same programs in the interpreter: tests/ir/test_lowp_dtypes.py."""

import numpy as np
import pytest
import torch
from helpers import LOW_DTYPES as LOW
from helpers import lowp_sample as sample

import minitc as tc
from minitc import dtypes
from minitc.backends.llvm.builder import format_const

ALL = LOW + ["float32", "float64", "int32", "int64"]


# the host, and AVX2 without AVX-512 BF16, where LLVM legalises bfloat through conversions
# it calls as functions (__truncsfbf2: backends/llvm/softfloat.py) or minitc rounds on the bits
TARGETS = ["llvm", "llvm -mcpu=haswell -num-cores=2"]


def both(out):
    """The naive loop nest and one with its innermost loop split by 16 and vectorized, for
    each target of TARGETS."""
    s = tc.Schedule(out)
    _, inner = s.split(s.loops(out)[-1], factor=16)
    s.vectorize(inner)
    return [tc.build(sched, t) for t in TARGETS for sched in (tc.Schedule(out), s)]


def test_literals_are_the_dtypes_own_bits():
    assert format_const(1.5, "bfloat16") == "0xR3FC0" and format_const(-2.0, "float16") == "0xHC000"
    assert format_const(200, "uint8") == "-56"  # i8's bits


@pytest.mark.parametrize("dtype", LOW)
def test_elementwise(dtype):
    A = tc.placeholder((37,), dtype, name="A")
    B = tc.placeholder((37,), dtype, name="B")
    if dtypes.is_int(dtype):
        C = tc.compute(
            (37,), lambda i: A[i] * B[i] + A[i] // B[i] - tc.min(A[i], B[i]) + tc.cast(A[i] < B[i], dtype), name="C"
        )
    else:
        C = tc.compute((37,), lambda i: A[i] * B[i] + tc.tanh(A[i]) - tc.min(A[i], B[i]) / B[i], name="C")
    a, b = sample(37, dtype, 1), sample(37, dtype, 2)
    with np.errstate(all="ignore"):
        if dtypes.is_int(dtype):
            quotient = np.where(b != 0, a // np.where(b == 0, 1, b), 0).astype(dtype)
            expected = a * b + quotient - np.minimum(a, b) + (a < b).astype(dtype)
        else:
            expected = a * b + np.tanh(a) - np.minimum(a, b) / b
    for f in both(C):
        out = f(a, b)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("src", ALL)
def test_casts(src):
    a = sample(33, src, 3)
    if dtypes.is_float(src):  # in range of every integer dtype, fractions included
        a = (np.abs(a.astype(np.float64)) * 30).astype(src)
    elif src != "uint8":
        a = np.abs(a)
    A = tc.placeholder((33,), src, name="A")
    for dst in ALL:
        C = tc.compute((33,), lambda i: tc.cast(A[i], dst), name="C")
        for f in both(C):
            np.testing.assert_array_equal(f(a), a.astype(dst), err_msg=f"{src} -> {dst}")


def test_float64_to_16_bit_floats_rounds_once():
    """float64 -> float32 -> bfloat16 would round twice: 1 + 2^-8 + 2^-30 is just above the
    midpoint of 1 and 1 + 2^-7, but float32 drops 2^-30 and the tie goes to 1."""
    x = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-11 + 2**-40, 3.0, 1e300, np.nan] * 3)
    X = tc.placeholder(x.shape, "float64", name="X")
    for dst in ("bfloat16", "float16"):
        Y = tc.compute(x.shape, lambda i: tc.cast(X[i], dst), name="Y")
        with np.errstate(over="ignore"):  # 1e300 is inf in both
            expected = x.astype(dst)
        for f in both(Y):
            np.testing.assert_array_equal(f(x), expected)


@pytest.mark.parametrize(
    "dtype, acc", [("bfloat16", "float32"), ("float16", "float32"), ("int8", "int32"), ("uint8", "int32")]
)
def test_matmul_accumulating_wider(dtype, acc):
    M, N, K = 8, 24, 40
    A = tc.placeholder((M, K), dtype, name="A")
    B = tc.placeholder((K, N), dtype, name="B")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k, dtype=acc), name="C")
    a, b = sample((M, K), dtype, 4), sample((K, N), dtype, 5)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    s = tc.Schedule(C)
    i, j, kk = s.loops(C)
    jo, ji = s.split(j, factor=8)
    s.reorder(i, jo, kk, ji)
    s.vectorize(ji)
    for f in [tc.build(tc.Schedule(C), "llvm"), tc.build(s, "llvm"), tc.build(C, "llvm")]:  # the last: the default
        got = f(a, b)
        assert got.dtype == np.dtype(acc)
        if dtypes.is_int(dtype):
            np.testing.assert_array_equal(got, exact)
        else:
            np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


def test_torch_tensors_in_and_out():
    """torch's bfloat16 has no numpy view: the kernel shares its bits as ml_dtypes.bfloat16,
    and gives back a torch.bfloat16 tensor."""
    A = tc.placeholder((4, 16), "bfloat16", name="A")
    B = tc.compute((4, 16), lambda i, j: A[i, j] * 2 + 1, name="B")
    F = tc.compute((4, 16), lambda i, j: tc.cast(A[i, j], "float32"), name="F")
    x = torch.randn(4, 16).to(torch.bfloat16)
    f = tc.build(tc.Schedule(B), "llvm")
    y = f(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, x * 2 + 1)
    out = torch.empty(4, 16, dtype=torch.bfloat16)
    f(x, out=out)
    assert torch.equal(out, x * 2 + 1)
    assert torch.equal(tc.build(tc.Schedule(F), "llvm")(x), x.float())
    with pytest.raises(tc.errors.DTypeError, match="torch.bfloat16"):
        f(x.to(torch.float16))
    q = torch.randint(-100, 100, (4, 16), dtype=torch.int8)
    Q = tc.placeholder((4, 16), "int8", name="Q")
    W = tc.compute((4, 16), lambda i, j: tc.cast(Q[i, j], "int32") * 3, name="W")
    assert torch.equal(tc.build(tc.Schedule(W), "llvm")(q), q.int() * 3)
