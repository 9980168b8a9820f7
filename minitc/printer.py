"""A deterministic pseudo-Python printer for the loop-nest IR.

The printed text is the canonical structural form of a kernel: two kernels are structurally
equal iff `format_kernel` gives the same text, so every field is printed (buffer names, shapes,
dtypes and scopes, which parameters are inputs, loop kinds and extents, constant dtypes).
`Kernel.meta` is not printed: it is bookkeeping, not structure.

    def matmul_relu(A: float32[64, 32], B: float32[32, 16]) -> (C: float32[60, 16]):
        for i_o in parallel(2):
            for j in range(16):
                with alloc("local", float32[32]) as C_local:
                    for i_i in unrolled(32):
                        C_local[i_i] = 0.0
                    for k in range(32):
                        for i_i_1 in vectorized(32):
                            C_local[i_i_1] = C_local[i_i_1] + A[i_o * 32 + i_i_1, k] * B[k, j]
                    for i_i_2 in range(32):
                        if i_o * 32 + i_i_2 < 60:
                            C[i_o * 32 + i_i_2, j] = max(C_local[i_i_2], 0.0)

(the three `i_i` loops bind three distinct Var objects named `i_i`, hence `i_i_1`, `i_i_2`).

A loop's prefetch requests print after its head, a `Prefetch` statement as a call, with the
locality as the cache level the line is kept in (3: L1, 2: L2):

    for k_i in unrolled(4):  # prefetch(B_local, +2, L1)
        prefetch(B_local[k_o * 4 + (k_i + 2), j_pf * 8], L1)

Constants: float32 `1.5`, float64 `1.5:f64`, int64 `3`, int32 `3:i32`, bool `True`; `inf`,
`-inf`, `nan` as such. Casts print as `float32(x)`, intrinsics as `exp(x)`, `min/max/select` as
calls, floor division and modulo as `//` and `%`, logic as `and`/`or`/`not`. Parentheses are
minimal by Python precedence; a right operand of equal precedence is parenthesised, so
`a - (b - c)` and `a + (b + c)` keep their tree shape.

Names: a variable or buffer prints as its `.name`, unless a different object already took that
name earlier in printing order, in which case it prints as `name_1`, `name_2`, ... . Inside
`format_kernel`, a variable used where no enclosing loop binds it prints as `name?`, and a
buffer that is neither a parameter nor allocated by an enclosing `alloc` prints as `name?`.
"""

from __future__ import annotations

import math

from minitc import dtypes
from minitc.expr import Binary, Call, Cast, Compare, Const, Expr, Not, Select, Var
from minitc.ir import (
    GPU_TAGS,
    Allocate,
    Barrier,
    Buffer,
    For,
    IfThenElse,
    Kernel,
    Load,
    Prefetch,
    Seq,
    ShuffleXor,
    Stmt,
    Store,
)

INDENT = "    "

LOOP_FORMS = {"serial": "range", "parallel": "parallel", "vectorized": "vectorized", "unrolled": "unrolled"}
LOCALITIES = {3: "L1", 2: "L2", 1: "L3", 0: "nontemporal"}  # llvm.prefetch's locality: where the line stays


# (symbol, precedence) for infix operators; higher binds tighter (Python's order).
INFIX = {
    "or": ("or", 1),
    "and": ("and", 2),
    "lt": ("<", 4),
    "le": ("<=", 4),
    "gt": (">", 4),
    "ge": (">=", 4),
    "eq": ("==", 4),
    "ne": ("!=", 4),
    "add": ("+", 5),
    "sub": ("-", 5),
    "mul": ("*", 6),
    "div": ("/", 6),
    "floordiv": ("//", 6),
    "mod": ("%", 6),
}
PREC_NOT = 3
PREC_COMPARE = 4
PREC_ATOM = 10

CONST_SUFFIX = {"float32": "", "float64": ":f64", "int64": "", "int32": ":i32", "bool": ""}


def format_kernel(kernel: Kernel) -> str:
    """The whole kernel: a `def` line with the parameters (inputs, then `-> (outputs)`) and the
    indented body. Ends with a newline."""
    return _Printer(strict=True).kernel(kernel)


# `str(kernel)` prints the loop nest: the printer lends Kernel its __str__, so that ir.py need
# not import the printer it sits below (importing minitc imports the printer)
Kernel.__str__ = format_kernel


def format_stmt(stmt: Stmt, indent: int = 0) -> str:
    """One statement tree, indented by `indent` levels. Variables bound outside it print by
    their names (no `?` marker), deduplicated as in `format_kernel`."""
    return "\n".join(_Printer(strict=False).stmt(stmt, indent))


def format_expr(expr: Expr) -> str:
    """One expression, with free variables printed by their (deduplicated) names."""
    return _Printer(strict=False).expr(expr)


def format_const(value, dtype: str) -> str:
    """A constant with a dtype suffix where the dtype is not the default one."""
    if dtype == dtypes.BOOL:
        return "True" if value else "False"
    if dtypes.is_float(dtype):
        value = float(value)
        if math.isnan(value):
            text = "nan"
        elif math.isinf(value):
            text = "inf" if value > 0 else "-inf"
        else:
            text = repr(value)
    else:
        text = str(int(value))
    return text + CONST_SUFFIX.get(dtype, ":" + str(dtype))


def format_type(buffer: Buffer) -> str:
    """`float32[64, 32]`, or `float32[64, 32] @local` for a local buffer."""
    text = f"{buffer.dtype}[{', '.join(str(s) for s in buffer.shape)}]"
    return text if buffer.scope == "global" else f"{text} @{buffer.scope}"


def _locality(level: int) -> str:
    return LOCALITIES.get(level, f"locality {level}?")


class _Printer:
    """Holds the naming state of one printing pass."""

    def __init__(self, strict: bool):
        self.strict = strict  # mark unbound variables / undeclared buffers with `?`
        self.names = {}  # object -> printed name
        self.taken = set()  # printed names already used
        self.in_scope = set()  # variables and buffers currently bound (by identity)
        self.expr_handlers = {
            Const: self._const,
            Var: self._var,
            Load: self._load,
            Binary: self._binary,
            Compare: self._binary,
            Not: self._not,
            Select: self._select,
            Cast: self._cast,
            Call: self._call,
        }
        self.stmt_handlers = {
            For: self._for,
            Store: self._store,
            Seq: self._seq,
            IfThenElse: self._if,
            Allocate: self._allocate,
            Barrier: self._barrier,
            ShuffleXor: self._shuffle,
            Prefetch: self._prefetch,
        }

    # -- names ---------------------------------------------------------------------------------

    def name(self, obj) -> str:
        """The printed name of a variable or buffer, assigned at its first appearance."""
        if obj not in self.names:
            base = obj.name
            text, n = base, 0
            while text in self.taken:
                n += 1
                text = f"{base}_{n}"
            self.taken.add(text)
            self.names[obj] = text
        text = self.names[obj]
        if self.strict and obj not in self.in_scope:
            return text + "?"
        return text

    def _bind(self, obj) -> str:
        self.in_scope.add(obj)
        return self.name(obj)

    # -- kernels and statements ----------------------------------------------------------------

    def kernel(self, kernel: Kernel) -> str:
        params = [f"{self._bind(b)}: {format_type(b)}" for b in kernel.params]
        inputs = ", ".join(params[: kernel.num_inputs])
        outputs = ", ".join(params[kernel.num_inputs :])
        lines = [f"def {kernel.name}({inputs}) -> ({outputs}):"]
        lines += self.stmt(kernel.body, 1)
        return "\n".join(lines) + "\n"

    def stmt(self, s, indent: int) -> list:
        """The lines of a statement, indented by `indent` levels."""
        if s is None:
            return [INDENT * indent + "pass"]
        handler = self.stmt_handlers.get(type(s))
        if handler is None:
            return [INDENT * indent + f"<unknown statement {type(s).__name__}>"]
        return handler(s, indent)

    def _for(self, s: For, indent: int) -> list:
        form = LOOP_FORMS.get(s.kind, f"{s.kind}?")
        extent = self.expr(s.extent) if isinstance(s.extent, Expr) else str(s.extent)
        was_bound = s.var in self.in_scope
        if s.kind in GPU_TAGS:  # for tx in bind("threadIdx.x", 32):
            head = f'for {self._bind(s.var)} in bind("{s.kind}", {extent}):'
        else:
            head = f"for {self._bind(s.var)} in {form}({extent}):"
        notes = [s.var.dtype] if s.var.dtype != dtypes.INDEX else []
        notes += [f"prefetch({r.buffer}, +{r.ahead}, {_locality(r.locality)})" for r in s.prefetch]
        if notes:
            head += "  # " + "; ".join(notes)
        lines = [INDENT * indent + head] + self.stmt(s.body, indent + 1)
        if not was_bound:
            self.in_scope.discard(s.var)
        return lines

    def _store(self, s: Store, indent: int) -> list:
        target = f"{self.name(s.buffer)}[{self._indices(s.indices)}]"
        return [INDENT * indent + f"{target} = {self.expr(s.value)}"]

    def _seq(self, s: Seq, indent: int) -> list:
        if not s.stmts:
            return [INDENT * indent + "pass"]
        lines = []
        for child in s.stmts:
            lines += self.stmt(child, indent)
        return lines

    def _if(self, s: IfThenElse, indent: int) -> list:
        lines = [INDENT * indent + f"if {self.expr(s.cond)}:"] + self.stmt(s.then, indent + 1)
        if s.orelse is not None:
            lines += [INDENT * indent + "else:"] + self.stmt(s.orelse, indent + 1)
        return lines

    def _barrier(self, s: Barrier, indent: int) -> list:
        return [INDENT * indent + "barrier()"]

    def _shuffle(self, s: ShuffleXor, indent: int) -> list:
        acc = f"{self.name(s.buffer)}[0]"
        return [INDENT * indent + f"{acc} = {s.combiner}({acc}, shfl_xor({acc}, {s.offset}, width={s.width}))"]

    def _prefetch(self, s: Prefetch, indent: int) -> list:
        target = f"{self.name(s.buffer)}[{self._indices(s.indices)}]"
        return [INDENT * indent + f"prefetch({target}, {_locality(s.locality)})"]

    def _allocate(self, s: Allocate, indent: int) -> list:
        b = s.buffer
        was_bound = b in self.in_scope
        shape = ", ".join(str(x) for x in b.shape)
        head = f'with alloc("{b.scope}", {b.dtype}[{shape}]) as {self._bind(b)}:'
        lines = [INDENT * indent + head] + self.stmt(s.body, indent + 1)
        if not was_bound:
            self.in_scope.discard(b)
        return lines

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e: Expr) -> str:
        return self._prec(e)[0]

    def _prec(self, e) -> tuple:
        """(text, precedence) of an expression."""
        if not isinstance(e, Expr):
            return repr(e), PREC_ATOM
        for cls in type(e).__mro__:  # IterVar is printed as a Var
            handler = self.expr_handlers.get(cls)
            if handler is not None:
                return handler(e)
        return f"<unknown {type(e).__name__}>", PREC_ATOM

    def _wrap(self, e, min_prec: int) -> str:
        text, prec = self._prec(e)
        return text if prec >= min_prec else f"({text})"

    def _indices(self, indices) -> str:
        return ", ".join(self.expr(i) for i in indices)

    def _const(self, e: Const):
        return format_const(e.value, e.dtype), PREC_ATOM

    def _var(self, e: Var):
        return self.name(e), PREC_ATOM

    def _load(self, e: Load):
        return f"{self.name(e.buffer)}[{self._indices(e.indices)}]", PREC_ATOM

    def _binary(self, e):
        if e.op in ("min", "max"):
            return f"{e.op}({self.expr(e.a)}, {self.expr(e.b)})", PREC_ATOM
        symbol, prec = INFIX.get(e.op, (f"<{e.op}>", PREC_ATOM - 1))
        # Comparisons do not chain in the IR: both sides bind tighter. Right operands of equal
        # precedence are parenthesised to keep the tree shape.
        left_min = prec + 1 if prec == PREC_COMPARE else prec
        return f"{self._wrap(e.a, left_min)} {symbol} {self._wrap(e.b, prec + 1)}", prec

    def _not(self, e: Not):
        return f"not {self._wrap(e.a, PREC_NOT)}", PREC_NOT

    def _select(self, e: Select):
        return f"select({self.expr(e.cond)}, {self.expr(e.t)}, {self.expr(e.f)})", PREC_ATOM

    def _cast(self, e: Cast):
        return f"{e.dtype}({self.expr(e.value)})", PREC_ATOM

    def _call(self, e: Call):
        return f"{e.name}({', '.join(self.expr(a) for a in e.args)})", PREC_ATOM
