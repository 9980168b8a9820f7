"""Render a `GpuProgram` as CUDA C. Pure: nothing is compiled here, no GPU or CuPy is needed.

    render_program(program) -> str   one translation unit: helpers, then one kernel per launch
    render_launch(launch) -> str     one `extern "C" __global__` kernel (needs HELPERS before it)

Each launch becomes `extern "C" __global__ void __launch_bounds__(threads) <launch.name>(...)`
with one pointer per `launch.params`, in order: `const T* __restrict__` for buffers the launch
only reads, `T* __restrict__` for those it writes. Buffers are flat (row-major offsets).

Statements (one method each, `STMT_EMITTERS`):
  bound loop   not a loop: `const int v = threadIdx.x;`, plus `if (v < extent)` only when the
               loop is shorter than the launch dimension
  serial       `for (int v = 0; v < n; ++v)`; unrolled and vthread loops get `#pragma unroll`,
               vectorized loops are plain loops (nvcc vectorizes nothing; they are rare on GPUs)
  Allocate     shared: one `__shared__` array at the top of the kernel, however often the
               Allocate runs; local: a per-thread array declared where it is allocated
  Barrier      `__syncthreads();`

Expressions follow the IR semantics of minitc/interp.py: `//` and `%` round toward minus
infinity (C's `/` and `%` only where both operands are provably non-negative), min/max propagate
nan, `select` is `?:` (only the chosen branch runs), float32 math stays float32 (`expf`, `1.5f`).
Integers are int64 in the IR; an integer subexpression is computed in 32 bits when the bounds
of every node in it (minitc/arith.py) fit, which is exact and saves registers and multiplies.
Other int64 arithmetic outside addresses wraps like the interpreter's (unsigned helpers).
"""
from __future__ import annotations

import re

import numpy as np

from minitc import arith, dtypes
from minitc.errors import BuildError
from minitc.expr import Binary, Call, Cast, Compare, Const, Expr, Not, Select, Var, binary, const, walk
from minitc.ir import BLOCK_TAGS, THREAD_TAGS, Allocate, Barrier, For, IfThenElse, Load, Seq, Store, stmt_exprs, walk_stmts
from minitc.lower.gpu import GpuProgram, Launch

C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long", "bool": "bool"}
INT32 = (-(2**31), 2**31 - 1)
MAX_UNROLL = 64  # beyond this, `#pragma unroll 8` (as the LLVM backend does)
INDENT = "    "

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
    "add": ("+", PREC_ADD), "sub": ("-", PREC_ADD), "mul": ("*", PREC_MUL), "div": ("/", PREC_MUL),
    "floordiv": ("/", PREC_MUL), "mod": ("%", PREC_MUL), "and": ("&&", PREC_AND), "or": ("||", PREC_OR),
    "lt": ("<", PREC_REL), "le": ("<=", PREC_REL), "gt": (">", PREC_REL), "ge": (">=", PREC_REL),
    "eq": ("==", PREC_EQ), "ne": ("!=", PREC_EQ),
}  # fmt: skip
WRAPPING = {"add": "mtc_add", "sub": "mtc_sub", "mul": "mtc_mul"}
MATH = {
    "float32": {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff", "abs": "fabsf", "floor": "floorf", "ceil": "ceilf"},
    "float64": {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "fabs", "floor": "floor", "ceil": "ceil"},
    "int32": {"abs": "abs"},
    "int64": {"abs": "llabs"},
}  # fmt: skip
INF = {"float32": "__int_as_float(0x7f800000)", "float64": "__longlong_as_double(0x7ff0000000000000LL)"}
NAN = {"float32": "__int_as_float(0x7fc00000)", "float64": "__longlong_as_double(0x7ff8000000000000LL)"}
RESERVED = set(
    "auto bool break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "class delete new namespace operator private protected public template this throw try catch true false typename "
    "using virtual asm friend mutable explicit export nullptr constexpr decltype noexcept alignas alignof "
    "threadIdx blockIdx blockDim gridDim warpSize min max abs llabs fabs fabsf exp expf log logf sqrt sqrtf tanh "
    "tanhf erf erff floor floorf ceil ceilf".split()
)
STMT_EMITTERS = {For: "emit_for", Store: "emit_store", Seq: "emit_seq", IfThenElse: "emit_if", Allocate: "emit_allocate", Barrier: "emit_barrier"}
EXPR_EMITTERS = {Const: "ev_const", Var: "ev_var", Load: "ev_load", Binary: "ev_binary", Compare: "ev_compare", Not: "ev_not", Select: "ev_select", Cast: "ev_cast", Call: "ev_call"}  # fmt: skip


def render_program(program: GpuProgram) -> str:
    """The CUDA C translation unit for every launch of `program`, in launch order."""
    if not isinstance(program, GpuProgram):
        raise BuildError(f"render_program expects a minitc.lower.gpu.GpuProgram, got {type(program).__name__}")
    k = program.kernel
    head = [f"// minitc CUDA C for kernel {k.name!r}: {len(program.launches)} launch(es)"]
    if program.temporaries:
        temps = ", ".join(f"{b.name} {b.dtype}[{', '.join(map(str, b.shape))}]" for b in program.temporaries)
        head.append(f"// temporaries (global buffers allocated by the runtime): {temps}")
    names = set()
    kernels = []
    for launch in program.launches:
        name = sanitize(launch.name)
        if name in names:
            raise BuildError(f"two launches of {k.name!r} are both named {name!r} in CUDA C")
        names.add(name)
        kernels.append(render_launch(launch))
    return "\n".join(head) + "\n\n" + HELPERS + "\n" + "\n".join(kernels)


def render_launch(launch: Launch) -> str:
    """One kernel function (it calls the helpers of `HELPERS`, which render_program puts first)."""
    return _LaunchWriter(launch).run()


def sanitize(name: str) -> str:
    """A valid C identifier, readable, that no keyword, builtin or helper takes."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(name)) or "v"
    if s[0].isdigit() or s.startswith("_"):
        s = "v" + s
    if s in RESERVED or s.startswith("mtc_"):
        s += "_"
    return s


class Code:
    """An emitted expression: C text, its precedence, its C type; `value` for constants."""

    __slots__ = ("text", "prec", "ctype", "value")

    def __init__(self, text: str, prec: int, ctype: str, value=None):
        self.text, self.prec, self.ctype, self.value = text, prec, ctype, value


def _wrap(c: Code, min_prec: int) -> str:
    return c.text if c.prec >= min_prec else f"({c.text})"


def float_literal(value: float, dtype: str) -> Code:
    """A literal that parses back to exactly the same float32/float64 (shortest round trip)."""
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


class _LaunchWriter:
    """Emission state for one launch: C names, loop-variable ranges and types, output lines."""

    def __init__(self, launch: Launch):
        self.launch = launch
        self.dims = {t: n for t, n in zip(BLOCK_TAGS, launch.grid)} | {t: n for t, n in zip(THREAD_TAGS, launch.block)}
        self.names, self.taken = {}, set()  # Var/Buffer -> C name; C names in use
        self.ranges, self.var_types = {}, {}  # Var -> (lo, hi); Var -> C type of its declaration
        self.buffers = set()  # buffers in scope
        self.scopes = [set()]  # C names declared in each open block
        self.lines, self.depth = [], 1
        self.index_ctx = False  # emitting an address: overflow would be out of bounds anyway
        self._narrow_memo = {}

    # -- names and scopes ------------------------------------------------------------------------

    def name(self, obj) -> str:
        """The C name of a variable or buffer, fixed at its first appearance; a different object
        with the same (sanitized) name gets a suffix, as in the printer."""
        if obj not in self.names:
            base = sanitize(obj.name)
            text, n = base, 0
            while text in self.taken:
                n += 1
                text = f"{base}_{n}"
            self.taken.add(text)
            self.names[obj] = text
        return self.names[obj]

    def line(self, text: str):
        self.lines.append(INDENT * self.depth + text)

    def open(self, head: str = ""):
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        self.scopes.append(set())

    def close(self, tail: str = "}"):
        self.depth -= 1
        self.scopes.pop()
        self.line(tail)

    def bind(self, var: Var, rng: tuple, ctype: str):
        saved = (self.ranges.get(var), self.var_types.get(var))
        self.ranges[var], self.var_types[var] = rng, ctype
        self._narrow_memo.clear()
        return saved

    def unbind(self, var: Var, saved: tuple):
        for table, old in zip((self.ranges, self.var_types), saved):
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old
        self._narrow_memo.clear()

    # -- the kernel ------------------------------------------------------------------------------

    def run(self) -> str:
        launch, body = self.launch, self.launch.body
        if len(set(map(id, launch.params))) != len(launch.params):
            raise BuildError(f"launch {launch.name!r} lists the same buffer twice in its parameters")
        for b in launch.params:
            self._check_buffer(b)
        fname = sanitize(launch.name)
        self.taken.add(fname)
        written = {s.buffer for s in walk_stmts(body) if isinstance(s, Store)}
        params = []
        for b in launch.params:
            const_ = "" if b in written else "const "
            params.append(f"{const_}{C_TYPES[b.dtype]}* __restrict__ {self.name(b)}")
            self.buffers.add(b)
        shared = []
        for s in walk_stmts(body):
            if isinstance(s, Allocate):
                self._check_buffer(s.buffer)
                if s.buffer.scope == "global":
                    raise BuildError(
                        f"launch {launch.name!r} allocates the global buffer {s.buffer.name!r} inside a kernel; "
                        "global temporaries must be allocated at the root (the runtime passes them in)"
                    )
                if s.buffer.scope == "shared" and s.buffer not in shared:
                    shared.append(s.buffer)
        for b in shared:  # one declaration, however often (and wherever) the Allocate runs
            self.line(f"__shared__ {C_TYPES[b.dtype]} {self.name(b)}[{max(1, b.size)}];")
            self.buffers.add(b)
        self.emit_stmt(body)
        threads = launch.threads_per_block
        head = [
            f"// {fname}: grid {tuple(launch.grid)} x block {tuple(launch.block)} ({threads} threads), "
            f"{launch.shared_bytes} bytes of shared memory",
            f'extern "C" __global__ void __launch_bounds__({threads}) {fname}({", ".join(params)}) {{',
        ]
        return "\n".join(head + self.lines + ["}"]) + "\n"

    def _check_buffer(self, b):
        if b.dtype not in C_TYPES:
            raise BuildError(f"buffer {b.name!r} has dtype {b.dtype!r}, which the CUDA backend does not support")

    # -- statements ------------------------------------------------------------------------------

    def emit_stmt(self, s):
        method = STMT_EMITTERS.get(type(s))
        if method is None:
            raise BuildError(f"the CUDA backend cannot generate code for statement {type(s).__name__}: {s!r}")
        getattr(self, method)(s)

    def emit_seq(self, s: Seq):
        for c in s.stmts:
            self.emit_stmt(c)

    def emit_barrier(self, s: Barrier):
        self.line("__syncthreads();")

    def emit_for(self, s: For):
        if not isinstance(s.extent, (int, np.integer)) or isinstance(s.extent, bool) or s.extent < 0:
            raise BuildError(f"loop {s.var.name!r} has extent {s.extent!r}; the CUDA backend needs a constant >= 0")
        if s.kind == "parallel":
            raise BuildError(
                f"loop {s.var.name!r} is parallel, which means nothing inside a GPU kernel; "
                "bind it to blockIdx/threadIdx instead"
            )
        if s.kind not in self.dims and s.kind not in ("serial", "unrolled", "vectorized", "vthread"):
            raise BuildError(f"loop {s.var.name!r} has unknown kind {s.kind!r}")
        if s.extent == 0:
            return
        if s.kind in self.dims:
            return self.emit_bound(s)
        self.emit_loop(s)

    def emit_bound(self, s: For):
        """Not a loop: the variable is this thread's index, guarded if the loop is shorter."""
        index = f"(int){s.kind}"
        saved = self.bind(s.var, (0, s.extent - 1), "int")
        if s.extent < self.dims[s.kind]:
            self.open(f"if ({index} < {s.extent})")
            self._declare(s.var, index, s.body)
            self.emit_stmt(s.body)
            self.close()
        else:
            block = self.name(s.var) in self.scopes[-1]  # the same variable bound twice here
            if block:
                self.open()
            self._declare(s.var, index, s.body)
            self.emit_stmt(s.body)
            if block:
                self.close()
        self.unbind(s.var, saved)

    def _declare(self, var: Var, init: str, body):
        if _uses(body, var):
            name = self.name(var)
            self.line(f"const {self.var_types[var]} {name} = {init};")
            self.scopes[-1].add(name)

    def emit_loop(self, s: For):
        ctype = "int" if s.extent - 1 <= INT32[1] else "long long"
        saved = self.bind(s.var, (0, s.extent - 1), ctype)
        if s.extent == 1:
            used = _uses(s.body, s.var)
            if used:
                self.open()
                self._declare(s.var, "0", s.body)
            self.emit_stmt(s.body)
            if used:
                self.close()
        else:
            if s.kind in ("unrolled", "vthread"):
                self.line("#pragma unroll" if s.extent <= MAX_UNROLL else "#pragma unroll 8")
            v = self.name(s.var)
            n = int_literal(s.extent, ctype).text
            self.open(f"for ({ctype} {v} = 0; {v} < {n}; ++{v})")
            self.emit_stmt(s.body)
            self.close()
        self.unbind(s.var, saved)

    def emit_store(self, s: Store):
        ref = self.element(s.buffer, s.indices, "store to")
        value = self.convert(self.ev(s.value), C_TYPES[s.buffer.dtype])
        self.line(f"{ref} = {value.text};")

    def emit_if(self, s: IfThenElse):
        if isinstance(s.cond, Const):
            branch = s.then if s.cond.value else s.orelse
            if branch is not None:
                self.emit_stmt(branch)
            return
        if s.cond.dtype != dtypes.BOOL:
            raise BuildError(f"an if condition has dtype {s.cond.dtype}, expected bool")
        self.open(f"if ({self.ev(s.cond).text})")
        self.emit_stmt(s.then)
        if s.orelse is not None:
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.scopes[-1] = set()
            self.emit_stmt(s.orelse)
        self.close()

    def emit_allocate(self, s: Allocate):
        b = s.buffer
        if b.scope == "shared":  # declared once at the top of the kernel
            return self.emit_stmt(s.body)
        self.open()
        self.line(f"{C_TYPES[b.dtype]} {self.name(b)}[{max(1, b.size)}];  // local {b.dtype}{list(b.shape)}")
        self.buffers.add(b)
        self.emit_stmt(s.body)
        self.buffers.discard(b)
        self.close()

    # -- expressions -----------------------------------------------------------------------------

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
            raise BuildError(f"variable {e.name!r} is used in launch {self.launch.name!r} outside any loop that binds it")
        return Code(self.name(e), PREC_ATOM, ctype)

    def ev_load(self, e: Load) -> Code:
        return Code(self.element(e.buffer, e.indices, "load from"), PREC_ATOM, C_TYPES[e.buffer.dtype])

    def element(self, buffer, indices, what: str) -> str:
        """`name[flat offset]`, the offset row-major and simplified (like terms merged)."""
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
        form = arith.affine(flat) if flat is not None else None
        if form is not None:
            flat = form.to_expr([n for n in walk(flat) if isinstance(n, Var)])
        saved, self.index_ctx = self.index_ctx, True
        try:
            offset = self.ev(flat if flat is not None else const(0)).text
        finally:
            self.index_ctx = saved
        return f"{self.name(buffer)}[{offset}]"

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
        if dtypes.is_int(e.dtype):
            x = self.convert(x, C_TYPES[e.dtype])
        fn = MATH.get(e.dtype, {}).get(e.name)
        if fn is None:
            raise BuildError(f"the CUDA backend has no lowering for intrinsic {e.name!r} on {e.dtype}")
        return Code(f"{fn}({x.text})", PREC_ATOM, x.ctype)


def _fits(rng, limits) -> bool:
    return rng is not None and limits[0] <= rng[0] and rng[1] <= limits[1]


def _uses(stmt, var: Var) -> bool:
    """Whether `var` occurs anywhere in `stmt`."""
    return any(n is var for st in walk_stmts(stmt) for e in stmt_exprs(st) for n in walk(e))
