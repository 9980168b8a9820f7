"""Vector math (backends/llvm/vecmath.py): accuracy of exp, sigmoid, tanh and erf against
float64 (float32 data) or long double (float64 data) references, in vector and scalar code,
on random values over the whole useful range and on the edge cases (inf, nan, +-0,
subnormals, the overflow and underflow thresholds)."""

import math

import numpy as np
import pytest

import minitc as tc
from minitc.backends.llvm import vecmath
from minitc.backends.llvm.codegen import render
from minitc.expr import call

FUNCS = ("exp", "sigmoid", "tanh", "erf")
# max error in ulps of the correctly rounded result (erf: absolute error, float32 only)
MAX_ULP = {
    "float32": {"exp": 1.01, "sigmoid": 3.0, "tanh": 1.5},
    "float64": {"exp": 1.01, "sigmoid": 3.5, "tanh": 1.5},
}
ERF_MAX_ABS = 5e-7
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-40, -1e-40, 1.0, -1.0, 0.5, 0.625, -0.625, 20.0, -20.0]
EDGES32 = [88.72283, 88.72284, 89.0, -87.33654, -87.4, -103.0, -103.97, -104.0, -110.0, 1e-45, 3.9, 4.0, 4.1, 1e6, -1e6]
EDGES64 = [709.78, 709.79, 710.0, -708.4, -745.1, -745.2, -746.0, 5e-324, 1e6, -1e6]


def _inputs(dtype):
    rng = np.random.default_rng(7)
    wide = 110.0 if dtype == "float32" else 750.0
    parts = [
        rng.uniform(-wide, wide, 20000),
        rng.uniform(-6, 6, 20000),
        rng.standard_normal(4000) * 1e-3,
        np.linspace(-1, 1, 4001),
        EDGES,
        EDGES32 if dtype == "float32" else EDGES64,
    ]
    x = np.concatenate([np.asarray(p, dtype=np.float64) for p in parts]).astype(dtype)
    pad = (-len(x)) % 16  # whole vectors: the test is about the math, not the tails
    return np.concatenate([x, np.zeros(pad, dtype)])


def _reference(name, x):
    """Correctly rounded enough: float64 math for float32 data, long double for float64."""
    wide = np.float64 if x.dtype == np.float32 else np.longdouble
    xw = x.astype(wide)
    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(xw)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-xw))
        if name == "tanh":
            return np.tanh(xw)
        return np.array([math.erf(v) for v in x.astype(np.float64)])


def _kernel(dtype, n, lanes, names):
    """One kernel computing every function in `names` of X, vectorized by `lanes` (0: scalar)."""
    X = tc.placeholder((n,), dtype, name="X")

    def apply(f):
        return tc.compute((n,), lambda i: call(f, X[i]), name=f"y_{f}")

    outs = [apply(f) for f in names]
    s = tc.Schedule(outs)
    if lanes:
        for y in outs:
            (i,) = s.loops(y)
            s.vectorize(s.split(i, factor=lanes)[1])
    return tc.build(s, args=[X] + outs)


def _ulps(y, ref, dtype):
    """|y - ref| in units of the spacing at the correctly rounded ref (nan/inf must match)."""
    rounded = ref.astype(dtype)
    spacing = np.spacing(np.abs(rounded)).astype(np.float64)
    spacing[~np.isfinite(spacing)] = np.inf
    spacing[spacing == 0] = np.finfo(dtype).smallest_subnormal
    with np.errstate(all="ignore"):
        return np.abs(y.astype(np.float64) - ref.astype(np.float64)) / spacing


@pytest.mark.avx2
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [0, 8])
def test_accuracy(dtype, lanes):
    names = [f for f in FUNCS if vecmath.function(f, dtype, 4) is not None]
    x = _inputs(dtype)
    f = _kernel(dtype, len(x), lanes, names)
    ys = f(x)
    ys = ys if isinstance(ys, tuple) else (ys,)
    for name, y in zip(names, ys):
        ref = _reference(name, x)
        with np.errstate(over="ignore"):
            rounded = ref.astype(dtype)
        special = ~np.isfinite(rounded)  # nan, and inf where the rounded result overflows
        np.testing.assert_array_equal(y[special], rounded[special], err_msg=f"{name} at {x[special]}")
        ok = ~special
        if name == "erf":
            err = np.abs(y[ok].astype(np.float64) - ref[ok])
            assert err.max() <= ERF_MAX_ABS, f"erf: max abs error {err.max():.3g} at x={x[ok][err.argmax()]}"
            continue
        u = _ulps(y[ok], ref[ok], dtype)
        worst = int(np.argmax(u))
        assert u[worst] <= MAX_ULP[dtype][name], f"{name} {dtype}: {u[worst]:.2f} ulp at x={x[ok][worst]!r}"


@pytest.mark.avx2
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_signs_and_specials(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -50.0, 50.0, 1e-30, -1e-30], dtype)
    names = [f for f in FUNCS if vecmath.function(f, dtype, 4) is not None]
    f = _kernel(dtype, len(x), len(x), names)  # 9 lanes: an odd vector width
    got = dict(zip(names, f(x)))
    nan = np.nan
    expect = {
        "exp": [1, 1, np.inf, 0, nan, np.exp(-50.0), np.exp(50.0), 1, 1],
        "sigmoid": [0.5, 0.5, 1, 0, nan, 1 / (1 + np.exp(50.0)), 1, 0.5, 0.5],
        "tanh": [0.0, -0.0, 1, -1, nan, -1, 1, 1e-30, -1e-30],
        "erf": [0.0, -0.0, 1, -1, nan, -1, 1, 1.1283791670955126e-30, -1.1283791670955126e-30],
    }
    for name in names:
        want = np.array(expect[name], dtype)
        np.testing.assert_allclose(got[name], want, rtol=4e-7 if dtype == "float32" else 1e-15, err_msg=name)
        assert list(np.signbit(got[name][:2])) == list(np.signbit(want[:2])), f"{name}: sign of zero"


def test_functions_are_inline_ir():
    """Rendering needs no LLVM: each function is an internal alwaysinline definition, and a
    vector exp is never scalarised into libm calls."""
    fn = vecmath.function("exp", "float32", 8)
    text = fn.text[fn.symbol]
    assert text.startswith(f"define internal <8 x float> @{fn.symbol}(<8 x float> %x) #1")
    assert "fptosi" not in text  # NaN would make it poison
    assert vecmath.function("erf", "float64", 4) is None  # falls back to libm
    assert vecmath.function("log", "float32", 8) is None
    X = tc.placeholder((64,), "float32", name="X")
    Y = tc.compute((64,), lambda i: tc.tanh(X[i]) + tc.erf(X[i]) + tc.sigmoid(X[i]) + tc.exp(X[i]), name="Y")
    s = tc.Schedule(Y)
    (i,) = s.loops(Y)
    s.vectorize(s.split(i, factor=16)[1])
    ir = render(tc.lower(s))
    for libm in ("@expf", "@tanhf", "@erff", "llvm.exp.v16f32"):
        assert libm not in ir
    for name in ("exp", "tanh", "erf", "sigmoid"):
        assert f"@minitc.vm.{name}.v16f32" in ir


@pytest.mark.avx2
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exp_fast_and_slow_paths_agree(dtype):
    """A vector whose lanes are all moderate takes the fast path (2^n added to the exponent
    bits); one extreme lane sends the whole vector down the clamped path. Both must give the
    same bits for the moderate lanes."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-80, 80, 4096).astype(dtype)
    mixed = x.copy()
    mixed[::8] = np.array([np.nan, 1e4, -1e4, -np.inf] * 128, dtype)
    f = _kernel(dtype, len(x), 8, ["exp", "sigmoid", "tanh"])
    for a, b in zip(f(x), f(mixed)):
        keep = np.arange(len(x)) % 8 != 0
        np.testing.assert_array_equal(a[keep], b[keep])
