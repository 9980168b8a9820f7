"""CUDA C for expressions: the `ExprWriter` mixin of codegen.py's `_LaunchWriter`, one method per
expression node (`EXPR_EMITTERS`), each returning a `Code` (C text, precedence, C type). Also the
C side of the IR's types and values: `C_TYPES`, exact literals (`float_literal`, `int_literal`),
operator and math-function tables, and `HELPERS`, the device functions the emitted code calls
(render_program puts them before the kernels).

Expressions follow the IR semantics of minitc/interp.py: `//` and `%` round toward minus
infinity (C's `/` and `%` only where both operands are provably non-negative), min/max propagate
nan, `select` is `?:` (only the chosen branch runs), float32 math stays float32 (`expf`, `1.5f`).
Integers are int64 in the IR; an integer subexpression is computed in 32 bits when the bounds
of every node in it (minitc/arith.py) fit, which is exact and saves registers and multiplies.
Other int64 arithmetic outside addresses wraps like the interpreter's (unsigned helpers).
"""

from __future__ import annotations

import numpy as np

from minitc import arith, dtypes
from minitc.errors import BuildError
from minitc.expr import Binary, Call, Cast, Compare, Const, Expr, Not, Select, Var, binary, const, walk
from minitc.ir import Load

C_TYPES = {
    "float32": "float",
    "float64": "double",
    "bfloat16": "__nv_bfloat16",
    "float16": "__half",
    "int32": "int",
    "int64": "long long",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
}
HALF_FLOATS = ("bfloat16", "float16")  # computed through float (their headers' operators)
NARROW_INTS = ("int8", "uint8")  # C computes them in int; the cast back wraps
# what a translation unit that uses the 16-bit floats includes first
HALF_INCLUDES = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
INT32 = (-(2**31), 2**31 - 1)

HELPERS = r"""#ifndef MINITC_CUDA_HELPERS
#define MINITC_CUDA_HELPERS
// floor division and modulo (Python's rule); x // 0 == x % 0 == 0, as in the LLVM backend
template <typename T> __device__ __forceinline__ T mtc_floordiv(T a, T b) {
    if (b == 0) return 0;
    T q = a / b, r = a % b;
    return (r != 0 && (r ^ b) < 0) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T mtc_mod(T a, T b) {
    if (b == 0) return 0;
    T r = a % b;
    return (r != 0 && (r ^ b) < 0) ? r + b : r;
}
// min/max that propagate nan (a != a is false for integers)
template <typename T> __device__ __forceinline__ T mtc_min(T a, T b) { return (a <= b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T mtc_max(T a, T b) { return (a >= b || a != a) ? a : b; }
// integer arithmetic that wraps on overflow (signed overflow is undefined in C++)
__device__ __forceinline__ int mtc_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int mtc_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int mtc_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ long long mtc_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
__device__ __forceinline__ long long mtc_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
__device__ __forceinline__ long long mtc_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
#endif
"""

# C precedence, higher binds tighter
PREC_ATOM, PREC_UNARY, PREC_MUL, PREC_ADD, PREC_REL, PREC_EQ, PREC_AND, PREC_OR = 16, 15, 13, 12, 10, 9, 5, 4
INFIX = {
    "add": ("+", PREC_ADD),
    "sub": ("-", PREC_ADD),
    "mul": ("*", PREC_MUL),
    "div": ("/", PREC_MUL),
    "floordiv": ("/", PREC_MUL),
    "mod": ("%", PREC_MUL),
    "and": ("&&", PREC_AND),
    "or": ("||", PREC_OR),
    "lt": ("<", PREC_REL),
    "le": ("<=", PREC_REL),
    "gt": (">", PREC_REL),
    "ge": (">=", PREC_REL),
    "eq": ("==", PREC_EQ),
    "ne": ("!=", PREC_EQ),
}
WRAPPING = {"add": "mtc_add", "sub": "mtc_sub", "mul": "mtc_mul"}
MATH = {
    "float32": {
        "exp": "expf",
        "log": "logf",
        "sqrt": "sqrtf",
        "tanh": "tanhf",
        "erf": "erff",
        "abs": "fabsf",
        "floor": "floorf",
        "ceil": "ceilf",
    },
    "float64": {
        "exp": "exp",
        "log": "log",
        "sqrt": "sqrt",
        "tanh": "tanh",
        "erf": "erf",
        "abs": "fabs",
        "floor": "floor",
        "ceil": "ceil",
    },
    "int32": {"abs": "abs"},
    "int64": {"abs": "llabs"},
}
INF = {"float32": "__int_as_float(0x7f800000)", "float64": "__longlong_as_double(0x7ff0000000000000LL)"}
NAN = {"float32": "__int_as_float(0x7fc00000)", "float64": "__longlong_as_double(0x7ff8000000000000LL)"}
EXPR_EMITTERS = {
    Const: "ev_const",
    Var: "ev_var",
    Load: "ev_load",
    Binary: "ev_binary",
    Compare: "ev_compare",
    Not: "ev_not",
    Select: "ev_select",
    Cast: "ev_cast",
    Call: "ev_call",
}


class Code:
    """An emitted expression: C text, its precedence, its C type; `value` for constants."""

    __slots__ = ("text", "prec", "ctype", "value")

    def __init__(self, text: str, prec: int, ctype: str, value=None):
        self.text, self.prec, self.ctype, self.value = text, prec, ctype, value


def _wrap(c: Code, min_prec: int) -> str:
    return c.text if c.prec >= min_prec else f"({c.text})"


def float_literal(value: float, dtype: str) -> Code:
    """A literal that parses back to exactly the same float32/float64 (shortest round trip);
    a 16-bit float is its float32 value converted (exact: it holds no more bits)."""
    if dtype in HALF_FLOATS:
        wide = float_literal(value, "float32")
        return Code(f"{C_TYPES[dtype]}({wide.text})", PREC_ATOM, C_TYPES[dtype])
    v = np.dtype(dtype).type(value)
    if np.isnan(v):
        return Code(NAN[dtype], PREC_ATOM, C_TYPES[dtype])
    if np.isinf(v):
        return Code(INF[dtype] if v > 0 else "-" + INF[dtype], PREC_ATOM if v > 0 else PREC_UNARY, C_TYPES[dtype])
    text = str(v) if dtype == "float32" else repr(float(v))
    if not any(ch in text for ch in ".e"):
        text += ".0"
    text += "f" if dtype == "float32" else ""
    return Code(text, PREC_UNARY if text.startswith("-") else PREC_ATOM, C_TYPES[dtype])


def int_literal(value: int, ctype: str) -> Code:
    suffix = "LL" if ctype == "long long" else ""
    lowest = -(2**63) if suffix else -(2**31)
    if value == lowest:  # `-2147483648` is unary minus on a literal that does not fit
        return Code(f"({value + 1}{suffix} - 1{suffix})", PREC_ATOM, ctype, value)
    return Code(f"{value}{suffix}", PREC_UNARY if value < 0 else PREC_ATOM, ctype, value)


class ExprWriter:
    """Mixin of codegen.py's `_LaunchWriter`: needs self.launch, self.name(obj), self.ranges and
    self.var_types (Var -> bounds, C type), self.buffers (in scope), self.index_ctx (emitting an
    address) and self._narrow_memo (cleared whenever a range changes)."""

    def ev(self, e) -> Code:
        for cls in type(e).__mro__:  # IterVar is a Var, EqualityTest a Compare
            method = EXPR_EMITTERS.get(cls)
            if method is not None:
                return getattr(self, method)(e)
        raise BuildError(f"the CUDA backend cannot generate code for expression {e!r} ({type(e).__name__})")

    def int_ctype(self, e: Expr) -> str:
        """`int` for int32 values and for int64 values whose every node provably fits 32 bits."""
        if e.dtype == "int64":
            return "int" if self.narrow(e) else "long long"
        return C_TYPES[e.dtype]

    def narrow(self, e: Expr) -> bool:
        memo = self._narrow_memo.get(id(e))
        if memo is None:
            hit = _fits(arith.bounds(e, self.ranges), INT32) and all(
                self.narrow(c) for c in e.children() if c.dtype == "int64"
            )
            memo = self._narrow_memo[id(e)] = (e, hit)  # holding `e` keeps its id unique
        return memo[1]

    def no_overflow(self, e: Expr, ctype: str) -> bool:
        return self.index_ctx or _fits(arith.bounds(e, self.ranges), INT32 if ctype == "int" else (-(2**63), 2**63 - 1))

    def convert(self, c: Code, ctype: str) -> Code:
        if c.ctype == ctype:
            return c
        if ctype == "bool":
            return Code(f"{_wrap(c, PREC_EQ + 1)} != 0", PREC_EQ, "bool")
        if c.value is not None and ctype == "long long":  # widen a literal: 5 -> 5LL
            return int_literal(c.value, ctype)
        return Code(f"({ctype}){_wrap(c, PREC_UNARY)}", PREC_UNARY, ctype)

    def infix(self, op: str, a: Code, b: Code, ctype: str) -> Code:
        sym, prec = INFIX[op]
        right = prec + 1  # left-associative: a right operand of equal precedence keeps its parens
        left = prec + 1 if prec in (PREC_REL, PREC_EQ) else prec  # comparisons do not chain
        return Code(f"{_wrap(a, left)} {sym} {_wrap(b, right)}", prec, ctype)

    def ev_const(self, e: Const) -> Code:
        if dtypes.is_float(e.dtype):
            return float_literal(e.value, e.dtype)
        if e.dtype == dtypes.BOOL:
            return Code("true" if e.value else "false", PREC_ATOM, "bool")
        ctype = "int" if e.dtype == "int32" or _fits((e.value, e.value), INT32) else "long long"
        return int_literal(int(e.value), ctype)

    def ev_var(self, e: Var) -> Code:
        ctype = self.var_types.get(e)
        if ctype is None:
            raise BuildError(
                f"variable {e.name!r} is used in launch {self.launch.name!r} outside any loop that binds it"
            )
        return Code(self.name(e), PREC_ATOM, ctype)

    def ev_load(self, e: Load) -> Code:
        return Code(self.element(e.buffer, e.indices, "load from"), PREC_ATOM, C_TYPES[e.buffer.dtype])

    def element(self, buffer, indices, what: str) -> str:
        """`name[flat offset]`, the offset row-major and simplified (like terms merged)."""
        return f"{self.name(buffer)}[{self.offset_text(self.flat_offset(buffer, indices, what))}]"

    def flat_offset(self, buffer, indices, what: str):
        """The row-major element offset of `buffer[indices]`, unsimplified (None for a 0-d
        buffer), after checking that the buffer is in scope and the indices match its shape."""
        if buffer not in self.buffers:
            raise BuildError(
                f"{what} buffer {buffer.name!r} in launch {self.launch.name!r}: it is neither a parameter of "
                "the launch nor allocated around this access"
            )
        if len(indices) != len(buffer.shape):
            raise BuildError(f"{what} {buffer.name!r} with {len(indices)} indices; it has shape {buffer.shape}")
        flat, stride = None, 1
        for index, extent in reversed(list(zip(indices, buffer.shape))):
            term = binary("mul", index, const(stride, index.dtype))
            flat = term if flat is None else binary("add", term, flat)
            stride *= extent
        return flat

    def offset_text(self, flat) -> str:
        """C text of an offset, like terms merged, in index context (no overflow checks)."""
        if flat is None:
            flat = const(0)
        form = arith.affine(flat)
        if form is not None:
            flat = form.to_expr([n for n in walk(flat) if isinstance(n, Var)])
        saved, self.index_ctx = self.index_ctx, True
        try:
            return self.ev(flat).text
        finally:
            self.index_ctx = saved

    def ev_binary(self, e: Binary) -> Code:
        op = e.op
        if op in ("and", "or"):
            return self.infix(op, self.ev(e.a), self.ev(e.b), "bool")
        if dtypes.is_float(e.dtype):
            a, b = self.ev(e.a), self.ev(e.b)
            if op in ("add", "sub", "mul", "div"):
                return self.infix(op, a, b, a.ctype)
            if op in ("min", "max"):
                return Code(f"mtc_{op}({a.text}, {b.text})", PREC_ATOM, a.ctype)
            raise BuildError(f"{op} is not defined on {e.dtype} (expression {e!r})")
        if not dtypes.is_int(e.dtype):
            raise BuildError(f"{op} is not defined on {e.dtype} (expression {e!r})")
        ctype = self.int_ctype(e)
        a, b = self.convert(self.ev(e.a), ctype), self.convert(self.ev(e.b), ctype)
        if op in WRAPPING and e.dtype in NARROW_INTS:  # int arithmetic cannot overflow here
            return self.convert(Code(self.infix(op, a, b, "int").text, PREC_ADD, "int"), ctype)
        if op in WRAPPING:
            if self.no_overflow(e, ctype):
                return self.infix(op, a, b, ctype)
            return Code(f"{WRAPPING[op]}({a.text}, {b.text})", PREC_ATOM, ctype)
        if op in ("floordiv", "mod"):
            ra, rb = arith.bounds(e.a, self.ranges), arith.bounds(e.b, self.ranges)
            if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:
                return self.infix(op, a, b, ctype)  # C truncation == floor here
            return Code(f"mtc_{'floordiv' if op == 'floordiv' else 'mod'}({a.text}, {b.text})", PREC_ATOM, ctype)
        if op in ("min", "max"):
            return Code(f"mtc_{op}({a.text}, {b.text})", PREC_ATOM, ctype)
        raise BuildError(f"the CUDA backend has no lowering for {op} on {e.dtype} (expression {e!r})")

    def ev_compare(self, e: Compare) -> Code:
        a, b = self.ev(e.a), self.ev(e.b)
        if a.ctype != b.ctype:  # int vs long long: compare in 64 bits
            wide = "long long" if "long long" in (a.ctype, b.ctype) else a.ctype
            a, b = self.convert(a, wide), self.convert(b, wide)
        return self.infix(e.op, a, b, "bool")

    def ev_not(self, e: Not) -> Code:
        return Code("!" + _wrap(self.ev(e.a), PREC_UNARY), PREC_UNARY, "bool")

    def ev_select(self, e: Select) -> Code:
        ctype = self.int_ctype(e) if dtypes.is_int(e.dtype) else C_TYPES[e.dtype]
        c = self.ev(e.cond)
        t, f = self.convert(self.ev(e.t), ctype), self.convert(self.ev(e.f), ctype)
        return Code(f"({_wrap(c, PREC_OR)} ? {t.text} : {f.text})", PREC_ATOM, ctype)

    def ev_cast(self, e: Cast) -> Code:
        ctype = self.int_ctype(e) if dtypes.is_int(e.dtype) else C_TYPES[e.dtype]
        return self.convert(self.ev(e.value), ctype)

    def ev_call(self, e: Call) -> Code:
        if len(e.args) != 1:
            raise BuildError(f"intrinsic {e.name} takes one argument, got {len(e.args)}")
        x = self.ev(e.args[0])
        if e.name == "sigmoid" and dtypes.is_float(e.dtype):
            one = "1.0f" if e.dtype == "float32" else "1.0"
            exp = MATH[e.dtype]["exp"]
            return Code(f"{one} / ({one} + {exp}(-{_wrap(x, PREC_UNARY)}))", PREC_MUL, x.ctype)
        if e.dtype in HALF_FLOATS:  # in float, rounded once (as numpy and the LLVM backend)
            y = self.ev_call(Call(e.name, (Cast("float32", e.args[0]),), "float32"))
            return self.convert(y, C_TYPES[e.dtype])
        if dtypes.is_int(e.dtype):
            x = self.convert(x, C_TYPES[e.dtype])
        fn = MATH.get(e.dtype, {}).get(e.name)
        if fn is None:
            raise BuildError(f"the CUDA backend has no lowering for intrinsic {e.name!r} on {e.dtype}")
        return Code(f"{fn}({x.text})", PREC_ATOM, x.ctype)


def _fits(rng, limits) -> bool:
    return rng is not None and limits[0] <= rng[0] and rng[1] <= limits[1]
