"""Vector math: exp, sigmoid, tanh and erf as inline LLVM IR for any lane count.

LLVM has no vector library on this target, so `llvm.exp.v8f32` becomes eight scalar `expf`
calls. Each function here is instead a small `define internal ... alwaysinline` body of plain
vector arithmetic (range reduction + polynomial), which O3 inlines into the kernel and which the
loop vectorizer can also vectorize when it appears in a scalar loop. Pure: this module only
produces IR text.

    fn = function("exp", "float32", 8)     # None where vecmath has no version (erf float64)
    fn.symbol -> "minitc.vm.exp.v8f32"; fn.text -> {name: IR text} (the definition and the
    intrinsic declarations it uses), to be added to the module once.

Algorithms, with the worst errors over 70M float32 inputs (every 61st bit pattern, both signs)
and 9M float64 ones against float64 / long double references (`python
examples/vecmath_accuracy.py`; tests/backends/test_vecmath.py holds the bounds):
float32 exp 1.003 ulp, sigmoid 2.7 ulp, tanh 1.3 ulp, erf 3.8e-7 absolute; float64 exp 1.0 ulp,
sigmoid 3.0 ulp, tanh 1.0 ulp; inf, -inf, nan, -0 and subnormal results as numpy gives them.
  exp      n = rint(x / ln 2) (magic-number rounding), r = x - n ln 2 (Cody-Waite), e^r by a minimax
           polynomial (Cephes expf, degree 7) or a degree-13 Taylor polynomial (float64), then
           scaled by 2^n: when every lane has |x| <= 86 (700 for float64) by adding n to the
           exponent bits; otherwise (one branch per vector) with clamped input and two exact
           power-of-two multiplications, so that results in the subnormal range round once
           and overflow gives inf. NaN propagates.
  sigmoid  1 / (1 + exp(-|x|)), times exp(-|x|) for x < 0.
  tanh     |x| < 0.625: odd polynomial (Cephes tanhf) or rational (Cephes tanh, float64);
           otherwise 1 - 2 / (exp(2|x|) + 1); then the sign of x.
  erf      float32 only: x P(x^2) / Q(x^2) on [-4, 4] (the rational approximation of Eigen and
           XLA), clamped outside: |erf(x) - 1| < 2e-8 there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from minitc.backends.llvm.builder import format_const, mangle, scalar_type, vec_type

INT_OF = {"float32": ("int32", 23, 127), "float64": ("int64", 52, 1023)}  # int dtype, mantissa bits, bias

# exp: clamp range (beyond it the result is 0 or inf), Cody-Waite split of ln 2 (the high
# part has few significant bits, so n * hi is exact), polynomial for e^r - 1 - r on |r| <= ln2/2
EXP_CONST = {
    "float32": dict(lo=-104.0, hi=89.0, fast=86.0, ln2_hi=0.693359375, ln2_lo=-2.12194440e-4),
    "float64": dict(lo=-746.0, hi=710.0, fast=700.0, ln2_hi=6.93145751953125e-1, ln2_lo=1.42860682030941723212e-6),
}
EXP_POLY = {  # coefficients of r^k, highest first, for the part after 1 + r (times r^2)
    "float32": (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1),
    "float64": tuple(
        1.0 / _f
        for _f in (
            6227020800.0,
            479001600.0,
            39916800.0,
            3628800.0,
            362880.0,
            40320.0,
            5040.0,
            720.0,
            120.0,
            24.0,
            6.0,
            2.0,
        )
    ),
}
LOG2E = 1.4426950408889634
MAGIC = {"float32": 12582912.0, "float64": 6755399441055744.0}  # 1.5 * 2^mantissa bits
MAGIC_BITS = {"float32": 0x4B400000, "float64": 0x4338000000000000}
TANH_SMALL = 0.625
TANH_POLY32 = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
TANH_P64 = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
TANH_Q64 = (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
ERF_CLAMP = 4.0
ERF_P32 = (  # odd numerator, coefficients of x^13 ... x^1
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
ERF_Q32 = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)


@dataclass(frozen=True)
class MathFunction:
    symbol: str
    text: dict  # global name -> IR text (definitions and declarations)


class _Body:
    """Builds one function body on `T` = float or <lanes x float>, with its integer twin."""

    def __init__(self, dtype: str, lanes: int):
        self.dtype, self.lanes = dtype, lanes
        self.ft = vec_type(dtype, lanes)
        self.idtype, self.mbits, self.bias = INT_OF[dtype]
        self.it = vec_type(self.idtype, lanes)
        self.bt = f"<{lanes} x i1>" if lanes else "i1"
        self.lines: list = []
        self.decls: dict = {}
        self.count = 0
        self.block = "entry"  # the current basic block

    def _splat(self, scalar_ty: str, lit: str) -> str:
        return f"splat ({scalar_ty} {lit})" if self.lanes else lit

    def f(self, value: float) -> str:
        return self._splat(scalar_type(self.dtype), format_const(value, self.dtype))

    def i(self, value: int) -> str:
        return self._splat(scalar_type(self.idtype), str(int(value)))

    def emit(self, rhs: str) -> str:
        self.count += 1
        name = f"%v{self.count}"
        self.lines.append(f"  {name} = {rhs}")
        return name

    def op(self, opcode: str, a: str, b: str, ty: str | None = None) -> str:
        return self.emit(f"{opcode} {ty or self.ft} {a}, {b}")

    def intrinsic(self, base: str, *args: str) -> str:
        name = f"llvm.{base}.{mangle(self.dtype, self.lanes)}"
        params = ", ".join([self.ft] * len(args))
        self.decls[name] = f"declare {self.ft} @{name}({params})"
        return self.emit(f"call {self.ft} @{name}({', '.join(f'{self.ft} {a}' for a in args)})")

    def fma(self, a: str, b: str, c: str) -> str:
        """a * b + c, fused where the target has FMA."""
        return self.intrinsic("fmuladd", a, b, c)

    def horner(self, x: str, coeffs) -> str:
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, self.f(c))
        return acc

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.emit(f"fcmp {pred} {self.ft} {a}, {b}")

    def select(self, c: str, a: str, b: str, ty: str | None = None) -> str:
        t = ty or self.ft
        return self.emit(f"select {self.bt} {c}, {t} {a}, {t} {b}")

    def cast(self, opcode: str, a: str, src: str, dst: str) -> str:
        return self.emit(f"{opcode} {src} {a} to {dst}")

    def any_lane(self, c: str) -> str:
        """An i1 that is true if `c` holds in any lane."""
        if not self.lanes:
            return c
        name = f"llvm.vector.reduce.or.v{self.lanes}i1"
        self.decls[name] = f"declare i1 @{name}({self.bt})"
        return self.emit(f"call i1 @{name}({self.bt} {c})")

    def branch(self, cond: str, fast, slow) -> str:
        """`cond ? slow() : fast()` as two blocks (each builder returns its value) joined by a
        phi: for a rare slow path that all lanes must take together."""
        self.count += 1
        tag = self.count
        labels = [f"fast{tag}", f"slow{tag}", f"join{tag}"]
        self.lines.append(f"  br i1 {cond}, label %{labels[1]}, label %{labels[0]}")
        values = []
        for label, build in zip(labels, (fast, slow)):
            self.lines.append(f"{label}:")
            self.block = label
            values.append((build(), self.block))
            self.lines.append(f"  br label %{labels[2]}")
        self.lines.append(f"{labels[2]}:")
        self.block = labels[2]
        return self.emit(f"phi {self.ft} " + ", ".join(f"[ {v}, %{blk} ]" for v, blk in values))

    def function(self, symbol: str, result: str) -> MathFunction:
        text = "\n".join(
            [
                f"define internal {self.ft} @{symbol}({self.ft} %x) #1 {{",
                "entry:",
                *self.lines,
                f"  ret {self.ft} {result}",
                "}",
            ]
        )
        return MathFunction(symbol, {symbol: text, **self.decls})


# -- the functions, each building on a _Body whose argument is %x --------------------------------


def _exp(b: _Body, x: str) -> str:
    """All lanes in [-FAST, FAST] or below LO (the usual case): 2^n goes straight into the
    exponent bits of e^r, and the lanes below LO are 0 (-inf: the padding of a masked softmax,
    minitc/frontend/dynamic.py, which would otherwise take the slow path for every vector of
    it); otherwise (large, subnormal-range or NaN input) the clamped, two-step scaling."""
    k = EXP_CONST[b.dtype]
    high = b.cmp("ugt", x, b.f(k["fast"]))  # NaN: true
    subnormal = b.op("and", b.cmp("olt", x, b.f(-k["fast"])), b.cmp("oge", x, b.f(k["lo"])), b.bt)
    rare = b.any_lane(b.op("or", high, subnormal, b.bt))
    return b.branch(rare, lambda: _exp_fast(b, x), lambda: _exp_core(b, x, fast=False))


def _exp_fast(b: _Body, x: str) -> str:
    k = EXP_CONST[b.dtype]
    below = b.cmp("olt", x, b.f(k["lo"]))
    y = _exp_core(b, b.select(below, b.f(-k["fast"]), x), fast=True)
    return b.select(below, b.f(0.0), y)


def _exp_core(b: _Body, x: str, fast: bool) -> str:
    k = EXP_CONST[b.dtype]
    xc = x
    if not fast:  # clamps that let NaN through ("unordered or less"): one vminps/vmaxps each
        xc = b.select(b.cmp("ult", x, b.f(k["hi"])), x, b.f(k["hi"]))
        xc = b.select(b.cmp("ugt", xc, b.f(k["lo"])), xc, b.f(k["lo"]))
    # n = rint(x / ln 2) by the magic-number trick: the low bits of t hold n as an integer,
    # so no float->int conversion (whose NaN result would be poison) is needed
    magic = MAGIC[b.dtype]
    t = b.fma(xc, b.f(LOG2E), b.f(magic))
    n = b.op("fsub", t, b.f(magic))
    r = b.fma(n, b.f(-k["ln2_hi"]), xc)
    r = b.fma(n, b.f(-k["ln2_lo"]), r)
    r2 = b.op("fmul", r, r)
    p = b.fma(b.horner(r, EXP_POLY[b.dtype]), r2, r)
    p = b.op("fadd", p, b.f(1.0))
    ni = b.op("sub", b.cast("bitcast", t, b.ft, b.it), b.i(MAGIC_BITS[b.dtype]), b.it)
    if fast:  # e^r in [0.7, 1.42] times 2^n, |n| < 125: add n to the exponent field
        bits = b.op("add", b.cast("bitcast", p, b.ft, b.it), b.op("shl", ni, b.i(b.mbits), b.it), b.it)
        return b.cast("bitcast", bits, b.it, b.ft)
    # 2^n = 2^n1 * 2^n2 with n1 = n >> 1: both halves are normal numbers, so a result in the
    # subnormal range is rounded once and 2^128 overflows to inf as it should
    n1 = b.op("ashr", ni, b.i(1), b.it)
    n2 = b.op("sub", ni, n1, b.it)
    y = p
    for part in (n1, n2):
        biased = b.op("add", part, b.i(b.bias), b.it)
        scale = b.cast("bitcast", b.op("shl", biased, b.i(b.mbits), b.it), b.it, b.ft)
        y = b.op("fmul", y, scale)
    return y  # NaN in, NaN out: p is NaN whatever the scale bits are


def _sigmoid(b: _Body, x: str) -> str:
    # e = exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0 (subnormal
    # results for very negative x come out right instead of 1 / inf = 0)
    e = _exp(b, b.emit(f"fneg {b.ft} {b.intrinsic('fabs', x)}"))
    y = b.op("fdiv", b.f(1.0), b.op("fadd", b.f(1.0), e))
    return b.select(b.cmp("olt", x, b.f(0.0)), b.op("fmul", e, y), y)


def _tanh(b: _Body, x: str) -> str:
    ax = b.intrinsic("fabs", x)
    # large |x|: 1 - 2 / (e^{2|x|} + 1), with the sign of x (e^{2|x|} = inf gives exactly 1)
    e = _exp(b, b.op("fadd", ax, ax))
    big = b.op("fsub", b.f(1.0), b.op("fdiv", b.f(2.0), b.op("fadd", e, b.f(1.0))))
    # small |x|: x + x z R(z), z = x^2
    z = b.op("fmul", x, x)
    if b.dtype == "float32":
        rz = b.horner(z, TANH_POLY32)
    else:
        rz = b.op("fdiv", b.horner(z, TANH_P64), b.horner(z, TANH_Q64))
    small = b.fma(b.op("fmul", x, z), rz, x)
    y = b.select(b.cmp("olt", ax, b.f(TANH_SMALL)), small, big)  # NaN: big, which is NaN
    return b.intrinsic("copysign", y, x)  # odd; also keeps tanh(-0) = -0


def _erf(b: _Body, x: str) -> str:
    xc = b.select(b.cmp("ogt", x, b.f(ERF_CLAMP)), b.f(ERF_CLAMP), x)  # NaN stays NaN
    xc = b.select(b.cmp("olt", xc, b.f(-ERF_CLAMP)), b.f(-ERF_CLAMP), xc)
    z = b.op("fmul", xc, xc)
    ratio = b.op("fdiv", b.horner(z, ERF_P32), b.horner(z, ERF_Q32))
    return b.op("fmul", xc, ratio)  # x last: subnormal x keeps its precision


BUILDERS = {
    "exp": (_exp, ("float32", "float64")),
    "sigmoid": (_sigmoid, ("float32", "float64")),
    "tanh": (_tanh, ("float32", "float64")),
    "erf": (_erf, ("float32",)),
}


@lru_cache(maxsize=None)
def function(name: str, dtype: str, lanes: int) -> MathFunction | None:
    """The inline implementation of `name` on `dtype` with `lanes` lanes (0: scalar), or None
    when there is none (then use llvm intrinsics or libm)."""
    entry = BUILDERS.get(name)
    if entry is None or dtype not in entry[1]:
        return None
    b = _Body(dtype, lanes)
    result = entry[0](b, "%x")
    return b.function(f"minitc.vm.{name}.{mangle(dtype, lanes)}", result)
