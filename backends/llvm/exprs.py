"""Expression emission: one method per expression node, dispatched by `EXPR_EMITTERS`.

Every method returns a `Value` that is a scalar, or a vector of `self.lanes` lanes when it
depends on the lane variable of an enclosing vectorized loop. Scalars are broadcast only where
they meet a vector (`self.match`), so loop-invariant work stays scalar.
"""

from __future__ import annotations

from minitc import arith, dtypes
from minitc.backends.llvm import vecmath
from minitc.backends.llvm.builder import Value, const, mangle, splat_const, vec_type
from minitc.errors import BuildError
from minitc.expr import Binary, Call, Cast, Compare, Const, Expr, IterVar, Not, Select, Var
from minitc.ir import Load
from minitc.target.cpu import enabled_features

EXPR_EMITTERS = {
    Const: "emit_const",
    Var: "emit_var",
    IterVar: "emit_var",
    Binary: "emit_binary",
    Compare: "emit_compare",
    Not: "emit_not",
    Select: "emit_select",
    Cast: "emit_cast",
    Call: "emit_call",
    Load: "emit_load",
}


def _int_cmp(dtype: str) -> dict:
    return UINT_CMP if dtypes.is_unsigned(dtype) else INT_CMP


FLOAT_CMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
INT_CMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
UINT_CMP = BOOL_CMP = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}
FLOAT_ARITH = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
INT_ARITH = {"add": "add", "sub": "sub", "mul": "mul"}
LLVM_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "abs": "fabs"}
LIBM = {"tanh": {"float32": "tanhf", "float64": "tanh"}, "erf": {"float32": "erff", "float64": "erf"}}
FAST = " contract"  # lets a*b+c fuse into an FMA; results stay close to numpy (no reassociation)
# 16-bit floats compute in float32 and round after every operation, as numpy and ml_dtypes do;
# a fused a*b+c would round once, so they get no `contract`
HALF_FLOATS = ("bfloat16", "float16")


def may_trap(e) -> bool:
    """True if evaluating `e` where it is not selected could fault: it reads memory."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            return True
        if isinstance(n, Expr):
            stack.extend(n.children())
    return False


class ExprEmitter:
    """Mixin of `Codegen`: needs self.fn, self.module, self.env, self.ranges, self.lanes."""

    def ev(self, e) -> Value:
        method = EXPR_EMITTERS.get(type(e))
        if method is None:
            raise BuildError(f"the LLVM backend cannot generate code for expression {e!r} ({type(e).__name__})")
        return getattr(self, method)(e)

    def ev_index(self, e) -> Value:
        """Evaluate an address computation: integer arithmetic gets `nsw`, which is safe because
        an index that overflows would address memory outside the buffer anyway."""
        saved, self.nsw = self.nsw, True
        try:
            return self.ev(e)
        finally:
            self.nsw = saved

    # -- helpers ---------------------------------------------------------------------------------

    def widen(self, v: Value, lanes: int) -> Value:
        """Broadcast a scalar to `lanes` lanes (insertelement + shufflevector splat)."""
        if v.lanes == lanes or not lanes:
            return v
        if v.lanes:
            raise BuildError(f"internal codegen error: cannot widen {v.lanes} lanes to {lanes}")
        if v.is_const:
            return splat_const(v, lanes)
        vt = vec_type(v.dtype, lanes)
        ins = self.fn.assign(f"insertelement {vt} poison, {v.typed}, i64 0", "ins")
        ref = self.fn.assign(f"shufflevector {vt} {ins}, {vt} poison, <{lanes} x i32> zeroinitializer", "splat")
        return Value(ref, v.dtype, lanes)

    def match(self, *values):
        lanes = max(v.lanes for v in values)
        return [self.widen(v, lanes) for v in values]

    def inst(self, opcode: str, a: Value, b: Value, dtype: str, hint: str = "t") -> Value:
        a, b = self.match(a, b)
        return Value(self.fn.assign(f"{opcode} {a.ty} {a.ref}, {b.ref}", hint), dtype, a.lanes)

    def select_values(self, c: Value, t: Value, f: Value) -> Value:
        c, t, f = self.match(c, t, f)
        return Value(self.fn.assign(f"select {c.typed}, {t.typed}, {f.typed}", "sel"), t.dtype, t.lanes)

    # -- leaves ----------------------------------------------------------------------------------

    def emit_const(self, e: Const) -> Value:
        return const(e.value, e.dtype)

    def emit_var(self, e: Var) -> Value:
        v = self.env.get(e)
        if v is None:
            raise BuildError(
                f"variable {e.name!r} is used but not bound by an enclosing loop of kernel {self.kernel_name!r}"
            )
        return v

    # -- arithmetic ------------------------------------------------------------------------------

    def emit_binary(self, e: Binary) -> Value:
        op = e.op
        a, b = self.ev(e.a), self.ev(e.b)
        if op in ("and", "or"):
            return self.inst(op, a, b, dtypes.BOOL)
        if dtypes.is_float(e.dtype):
            if op in FLOAT_ARITH and e.dtype == "bfloat16":  # in float32, rounded (see narrow)
                wide_a, wide_b = self.inst_cast("fpext", a, "float32"), self.inst_cast("fpext", b, "float32")
                return self.narrow(self.inst(FLOAT_ARITH[op], *self.match(wide_a, wide_b), "float32"), e.dtype)
            if op in FLOAT_ARITH:
                flags = "" if e.dtype in HALF_FLOATS else FAST
                return self.inst(FLOAT_ARITH[op] + flags, a, b, e.dtype)
            if op in ("min", "max"):
                return self._float_min_max(op, a, b)
        elif dtypes.is_int(e.dtype):
            if op in INT_ARITH:
                flags = " nsw" if self.nsw else ""
                return self.inst(INT_ARITH[op] + flags, a, b, e.dtype)
            if op in ("min", "max"):
                c = self.inst("icmp " + _int_cmp(e.dtype)["lt" if op == "min" else "gt"], a, b, dtypes.BOOL, "cmp")
                return self.select_values(c, a, b)
            if op in ("floordiv", "mod"):
                return self._int_divmod(e, a, b)
        raise BuildError(f"the LLVM backend has no lowering for {op} on {e.dtype} (expression {e!r})")

    def _float_min_max(self, op: str, a: Value, b: Value) -> Value:
        """numpy's minimum/maximum: a NaN in either operand is the result. `a > b ? a : b` alone
        (x86's vmaxps) returns b when a is NaN, so a NaN `a` is chosen explicitly."""
        c = self.inst("fcmp " + ("olt" if op == "min" else "ogt"), a, b, dtypes.BOOL, "cmp")
        ordered = self.select_values(c, a, b)
        a_is_nan = self.inst("fcmp uno", a, a, dtypes.BOOL, "nan")
        return self.select_values(a_is_nan, a, ordered)

    def _int_divmod(self, e: Binary, a: Value, b: Value) -> Value:
        """Python floor semantics. With both operands provably non-negative this is a plain
        udiv/urem; otherwise sdiv/srem plus a correction when the remainder's sign differs
        from the divisor's. Division by zero gives 0 (as numpy does) instead of a trap;
        INT_MIN // -1 overflows as in C."""
        ra, rb = arith.bounds(e.a, self.ranges), arith.bounds(e.b, self.ranges)
        if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:
            return self.inst("udiv" if e.op == "floordiv" else "urem", a, b, e.dtype)
        if dtypes.is_unsigned(e.dtype):  # floor is truncation; only a zero divisor needs care
            zero = self.inst("icmp eq", b, const(0, e.dtype), dtypes.BOOL, "isz")
            q = self.inst(
                "udiv" if e.op == "floordiv" else "urem", a, self.select_values(zero, const(1, e.dtype), b), e.dtype
            )
            return self.select_values(zero, const(0, e.dtype), q)
        zero = None
        if rb is None or rb[0] <= 0 <= rb[1]:
            zero = self.inst("icmp eq", b, const(0, e.dtype), dtypes.BOOL, "isz")
            b = self.select_values(zero, const(1, e.dtype), b)
        q = self.inst("sdiv", a, b, e.dtype, "q")
        r = self.inst("srem", a, b, e.dtype, "r")
        if rb is not None and rb[0] > 0:
            fix = self.inst("icmp slt", r, const(0, e.dtype), dtypes.BOOL, "fix")
        else:
            nonzero = self.inst("icmp ne", r, const(0, e.dtype), dtypes.BOOL, "nz")
            signs = self.inst("xor", r, b, e.dtype, "sx")
            differ = self.inst("icmp slt", signs, const(0, e.dtype), dtypes.BOOL, "sd")
            fix = self.inst("and", nonzero, differ, dtypes.BOOL, "fix")
        if e.op == "floordiv":
            adjusted = self.inst("sub", q, const(1, e.dtype), e.dtype, "q")
            out = self.select_values(fix, adjusted, q)
        else:
            adjusted = self.inst("add", r, b, e.dtype, "r")
            out = self.select_values(fix, adjusted, r)
        if zero is not None:
            out = self.select_values(zero, const(0, e.dtype), out)
        return out

    def emit_compare(self, e: Compare) -> Value:
        a, b = self.ev(e.a), self.ev(e.b)
        if dtypes.is_float(a.dtype):
            return self.inst("fcmp " + FLOAT_CMP[e.op], a, b, dtypes.BOOL, "cmp")
        table = BOOL_CMP if a.dtype == dtypes.BOOL else _int_cmp(a.dtype)
        return self.inst("icmp " + table[e.op], a, b, dtypes.BOOL, "cmp")

    def emit_not(self, e: Not) -> Value:
        return self.inst("xor", self.ev(e.a), const(True, dtypes.BOOL), dtypes.BOOL, "not")

    def emit_select(self, e: Select) -> Value:
        """Lazy: a branch that reads memory is only evaluated where it is selected."""
        c = self.ev(e.cond)
        if c.is_const and not c.lanes:
            return self.ev(e.t if c.ref == "true" else e.f)
        if not may_trap(e.t) and not may_trap(e.f):
            return self.select_values(c, self.ev(e.t), self.ev(e.f))
        if c.lanes:
            return self.masked_select(c, e)  # vector.py: each branch under its lane mask
        fn = self.fn
        then_b, else_b, merge = fn.new_block("sel.t"), fn.new_block("sel.f"), fn.new_block("sel.end")
        fn.cond_br(c.ref, then_b, else_b)
        fn.goto(then_b)
        t, t_end = self.ev(e.t), fn.cur
        fn.goto(else_b)
        f, f_end = self.ev(e.f), fn.cur
        lanes = max(t.lanes, f.lanes)
        fn.goto(t_end)
        t = self.widen(t, lanes)
        fn.br(merge)
        fn.goto(f_end)
        f = self.widen(f, lanes)
        fn.br(merge)
        fn.goto(merge)
        ref = fn.assign(f"phi {t.ty} [ {t.ref}, %{t_end.label} ], [ {f.ref}, %{f_end.label} ]", "phi")
        return Value(ref, t.dtype, lanes)

    def emit_cast(self, e: Cast) -> Value:
        v = self.ev(e.value)
        src, dst = v.dtype, e.dtype
        if src == dst:
            return v
        to = vec_type(dst, v.lanes)
        if dst == dtypes.BOOL:
            if dtypes.is_float(src):
                return self.inst("fcmp une", v, const(0.0, src), dtypes.BOOL, "cmp")
            return self.inst("icmp ne", v, const(0, src), dtypes.BOOL, "cmp")
        if dst in HALF_FLOATS and src not in ("float32", "float64"):  # ints, bool, the other half
            wide = "float32" if src in HALF_FLOATS else "float64"  # exact up to 2^53
            opcode = (
                "fpext"
                if src in HALF_FLOATS
                else "uitofp"
                if src == dtypes.BOOL or dtypes.is_unsigned(src)
                else "sitofp"
            )
            v, src = self.inst_cast(opcode, v, wide), wide
        if src == dtypes.BOOL:
            opcode = "uitofp" if dtypes.is_float(dst) else "zext"
        elif dtypes.is_float(src) and dtypes.is_float(dst):
            if src == "float64" and dst in HALF_FLOATS:
                return self.narrow(self._round_to_odd_f32(v), dst)
            if src == "float32" and dst in HALF_FLOATS:
                return self.narrow(v, dst)
            opcode = "fpext" if dtypes.bits(dst) > dtypes.bits(src) else "fptrunc"
        elif dtypes.is_int(src) and dtypes.is_int(dst):
            if dtypes.bits(dst) == dtypes.bits(src):  # int8 <-> uint8: the same bits
                return Value(v.ref, dst, v.lanes)
            extend = "zext" if dtypes.is_unsigned(src) else "sext"
            opcode = extend if dtypes.bits(dst) > dtypes.bits(src) else "trunc"
        elif dtypes.is_float(src):
            opcode = "fptoui" if dtypes.is_unsigned(dst) else "fptosi"
        else:
            opcode = "uitofp" if dtypes.is_unsigned(src) else "sitofp"
        return Value(self.fn.assign(f"{opcode} {v.typed} to {to}", "cast"), dst, v.lanes)

    # -- intrinsics ------------------------------------------------------------------------------

    def emit_call(self, e: Call) -> Value:
        if len(e.args) != 1:
            raise BuildError(f"intrinsic {e.name} takes one argument, got {len(e.args)}")
        if e.dtype in HALF_FLOATS and e.name != "abs":  # in float32, rounded once (as numpy)
            y = self.emit_call(Call(e.name, (Cast("float32", e.args[0]),), "float32"))
            return self.narrow(y, e.dtype)
        x = self.ev(e.args[0])
        fn = vecmath.function(e.name, x.dtype, x.lanes) if dtypes.is_float(x.dtype) else None
        if fn is not None:  # inline vector math instead of per-lane libm calls
            for name, text in fn.text.items():
                self.module.declare(name, text)
            return Value(self.fn.assign(f"call {x.ty} @{fn.symbol}({x.typed})", e.name), x.dtype, x.lanes)
        if e.name == "abs" and dtypes.is_int(x.dtype):
            name = f"llvm.abs.{mangle(x.dtype, x.lanes)}"
            self.module.declare(name, f"declare {x.ty} @{name}({x.ty}, i1)")
            return Value(self.fn.assign(f"call {x.ty} @{name}({x.typed}, i1 false)", "abs"), x.dtype, x.lanes)
        if e.name in LLVM_MATH:
            return self.intrinsic(LLVM_MATH[e.name], x)
        if e.name in LIBM:
            return self.libm_call(LIBM[e.name][x.dtype], x)
        raise BuildError(f"the LLVM backend has no lowering for intrinsic {e.name!r}")

    def narrow(self, x: Value, dst: str) -> Value:
        """float32 -> a 16-bit float, rounded to nearest even. LLVM's fptrunc to bfloat is a
        libcall (__truncsfbf2) the JIT lacks where the target has no AVX-512 BF16
        (vcvtneps2bf16), so there it is done on the bits: add 0x7FFF plus the lowest kept bit,
        keep the top 16; a NaN keeps its top bits, made quiet."""
        if dst == "float16" or "avx512bf16" in enabled_features(self.target):
            return self.inst_cast("fptrunc", x, dst)
        n = x.lanes
        i32, i16 = vec_type("int32", n), (f"<{n} x i16>" if n else "i16")
        bits = self.inst_cast("bitcast", x, "int32")
        kept = self.inst("and", self.inst("lshr", bits, const(16, "int32"), "int32"), const(1, "int32"), "int32")
        bias = self.inst("add", kept, const(0x7FFF, "int32"), "int32")
        rounded = self.inst("lshr", self.inst("add", bits, bias, "int32"), const(16, "int32"), "int32")
        quiet = self.inst("or", self.inst("lshr", bits, const(16, "int32"), "int32"), const(0x40, "int32"), "int32")
        nan = self.inst("fcmp uno", x, x, dtypes.BOOL)
        top = self.select_values(nan, quiet, rounded)
        half = self.fn.assign(f"trunc {i32} {top.ref} to {i16}", "bf")
        return Value(self.fn.assign(f"bitcast {i16} {half} to {vec_type(dst, n)}", "bf"), dst, n)

    def _round_to_odd_f32(self, x: Value) -> Value:
        """float64 -> float32 rounded to odd: rounding that to a 16-bit float then rounds x
        once, as numpy does (a plain float32 step would round twice). LLVM's direct
        fptrunc double to half/bfloat is a libcall the JIT does not have."""
        t = self.inst_cast("fptrunc", x, "float32")
        back = self.inst_cast("fpext", t, "float64")
        inexact = self.inst("fcmp une", back, x, "bool")
        bits = self.inst_cast("bitcast", t, "int32")
        even = self.inst("icmp eq", self.inst("and", bits, const(1, "int32"), "int32"), const(0, "int32"), "bool")
        abs_t = self.intrinsic("fabs", back)
        above = self.inst("fcmp ogt", abs_t, self.intrinsic("fabs", x), "bool")  # t rounded away from zero
        step = self.select_values(above, const(-1, "int32"), const(1, "int32"))
        odd = self.inst("add", bits, step, "int32")
        fix = self.inst("and", inexact, even, "bool")
        return self.inst_cast("bitcast", self.select_values(fix, odd, bits), "float32")

    def inst_cast(self, opcode: str, v: Value, dst: str) -> Value:
        return Value(self.fn.assign(f"{opcode} {v.typed} to {vec_type(dst, v.lanes)}", "cast"), dst, v.lanes)

    def intrinsic(self, base: str, x: Value) -> Value:
        name = f"llvm.{base}.{mangle(x.dtype, x.lanes)}"
        self.module.declare(name, f"declare {x.ty} @{name}({x.ty})")
        return Value(self.fn.assign(f"call{FAST} {x.ty} @{name}({x.typed})", base), x.dtype, x.lanes)

    def libm_call(self, name: str, x: Value) -> Value:
        """A scalar libm function; vectors are scalarised lane by lane."""
        t = vec_type(x.dtype, 0)
        self.module.declare(name, f"declare {t} @{name}({t}) nounwind")
        if not x.lanes:
            return Value(self.fn.assign(f"call {t} @{name}({x.typed})", name), x.dtype)
        acc = "poison"
        for lane in range(x.lanes):
            xl = self.fn.assign(f"extractelement {x.typed}, i64 {lane}", "lane")
            yl = self.fn.assign(f"call {t} @{name}({t} {xl})", name)
            acc = self.fn.assign(f"insertelement {x.ty} {acc}, {t} {yl}, i64 {lane}", "vec")
        return Value(acc, x.dtype, x.lanes)
