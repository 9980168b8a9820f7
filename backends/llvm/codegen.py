"""Render a loop-nest `Kernel` as LLVM IR text. Pure: nothing is compiled here.

    render(kernel, "llvm") -> str

The entry function is `void @<name>(ptr noalias nocapture %arg0, ...)`, one pointer per
parameter buffer (inputs then outputs); buffers are dense row-major arrays with static shapes.
Statements are emitted by one method each (`STMT_EMITTERS`), expressions by exprs.py, loads,
stores and vectorized loops by vector.py, parallel loops by parallel.py, prefetches (a loop's
requests, expanded first) by prefetch.py.

Loop kinds:
  serial      a counted loop: i64 phi from 0, `add nuw nsw`, `icmp ult`, bottom-tested.
  unrolled    the body emitted `extent` times with the variable bound to each constant, so
              that SROA can promote constant-indexed local tiles to registers. Above 64 the
              code would grow too much: a serial loop with `llvm.loop.unroll.count` 8 instead.
  vectorized  the body emitted once on <extent x T> vectors (vector.py).
  parallel    outlined into a task function run by the runtime's thread pool (parallel.py).
"""

from __future__ import annotations

import numbers
import re

from minitc import dtypes
from minitc.backends.llvm.builder import Function, Value, const, scalar_type
from minitc.backends.llvm.exprs import ExprEmitter
from minitc.backends.llvm.parallel import ParallelEmitter
from minitc.backends.llvm.prefetch import PrefetchEmitter, expand_prefetches
from minitc.backends.llvm.vector import MemoryEmitter
from minitc.errors import BuildError
from minitc.expr import Compare, Var, walk
from minitc.ir import Allocate, For, IfThenElse, Kernel, Load, Prefetch, Seq, Store, walk_stmts
from minitc.lowering.partition import partition_tails
from minitc.target import parse_target

STMT_EMITTERS = {
    For: "emit_for",
    Store: "emit_store",
    Seq: "emit_seq",
    IfThenElse: "emit_if",
    Allocate: "emit_allocate",
    Prefetch: "emit_prefetch",
}
FOR_KINDS = {
    "serial": "emit_serial",
    "unrolled": "emit_unrolled",
    "vectorized": "emit_vectorized",
    "parallel": "emit_parallel",
}
MAX_UNROLL = 64
MAX_STACK_BYTES = 64 * 1024
ALIGN = 64


def sanitize(name: str) -> str:
    """A valid, readable LLVM global name."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(name))
    return s if s and not s[0].isdigit() else "k_" + s


def _known_before(e, body) -> bool:
    """Whether `e` reads no variable bound inside `body` and no buffer `body` writes."""
    inside = {st.var for st in walk_stmts(body) if isinstance(st, For)}
    written = {st.buffer for st in walk_stmts(body) if isinstance(st, Store)}
    for n in walk(e):
        if isinstance(n, Var) and n in inside or isinstance(n, Load) and n.buffer in written:
            return False
    return True


def render(kernel: Kernel, target="llvm", name: str | None = None) -> str:
    """LLVM IR text (unoptimised) for `kernel`; the entry function is `@name` (default: the
    kernel's name, sanitised). Raises BuildError for constructs the backend cannot express."""
    if not isinstance(kernel, Kernel):
        raise BuildError(f"render expects a minitc.ir.Kernel, got {type(kernel).__name__}")
    target = parse_target(target)
    return Codegen(kernel, target, sanitize(name or kernel.name)).run()


class ModuleText:
    """Module-level pieces collected while emitting functions."""

    def __init__(self):
        self.decls: dict = {}
        self.functions: list = []
        self.metadata: list = []
        self.par_count = 0

    def declare(self, name: str, line: str):
        self.decls.setdefault(name, line)

    def metadata_node(self, body: str, distinct_self: bool = False) -> str:
        ref = f"!{len(self.metadata)}"
        if distinct_self:
            body = f"distinct !{{{ref}, {body}}}"
        self.metadata.append(f"{ref} = {body}")
        return ref


class Codegen(ExprEmitter, MemoryEmitter, ParallelEmitter, PrefetchEmitter):
    """Emission state for one kernel. Per function: `fn` (the builder), `env` (Var -> Value),
    `ptrs` (Buffer -> pointer). Per vectorized loop: `lanes`, `lane_var`, `mask`."""

    def __init__(self, kernel: Kernel, target, func_name: str):
        self.kernel, self.target, self.func_name = kernel, target, func_name
        self.kernel_name = kernel.name
        self.module = ModuleText()
        self.fn: Function | None = None  # the function being emitted
        self.env, self.ranges, self.ptrs = {}, {}, {}
        self.lanes, self.lane_var, self.mask = 0, None, None
        self.nsw = False
        self.in_parallel = False
        self.notes: list = []
        self._shadow: list = []
        self._flat_memo: dict = {}  # values keep the keyed objects alive, so ids stay unique
        self._classify_memo: dict = {}
        self._accumulators = None  # vector.updated_buffers, found on the first masked-load choice
        self._hazard_memo: dict = {}
        self.alias_md: dict = {}  # Buffer -> ", !alias.scope !a, !noalias !b" for its accesses

    def run(self) -> str:
        params = self.kernel.params
        if len(set(map(id, params))) != len(params):
            raise BuildError(f"kernel {self.kernel_name!r} lists the same buffer twice in its parameters")
        for i, buf in enumerate(params):
            self._check_buffer(buf)
            self.ptrs[buf] = f"%arg{i}"
        args = ", ".join(f"ptr noalias nocapture %arg{i}" for i in range(len(params)))
        self.fn = Function(f"define void @{self.func_name}({args}) #0")
        body = expand_prefetches(partition_tails(self.kernel.body))  # guard-free copies of the hot loops
        self.alias_scopes(params + [st.buffer for st in walk_stmts(body) if isinstance(st, Allocate)])
        self.emit_stmt(body)
        self.module.functions.insert(0, self.fn.text())
        return self.module_text()

    def module_text(self) -> str:
        t = self.target
        # always name the features, even none: a function without "target-features" takes the
        # JIT's (the host's) feature list, and AVX-512 code would run for an AVX2 target
        attrs = f'nounwind "target-cpu"="{t.cpu}" "target-features"="{t.features}"'
        out = [f"; minitc kernel {self.kernel_name!r} for target {t.string!r}"]
        out += [f"; note: {n}" for n in dict.fromkeys(self.notes)]
        out.append(f'target triple = "{t.triple}"')
        out.append("")
        out += sorted(self.module.decls.values())
        out.append("")
        out += [f + "\n" for f in self.module.functions]
        out.append(f"attributes #0 = {{ {attrs} }}")
        out.append(f"attributes #1 = {{ alwaysinline {attrs} }}")
        out += self.module.metadata
        return "\n".join(out) + "\n"

    def alias_scopes(self, buffers):
        """One alias scope per buffer: every load and store says which buffer it touches and
        that it touches no other (parameters never overlap an output, allocations are
        distinct), so LLVM keeps accumulators in registers and reorders loads past stores
        even where outlining or inlining lost the pointers' `noalias`."""
        buffers = list(dict.fromkeys(buffers))
        if len(buffers) < 2:
            return
        md = self.module.metadata_node
        domain = md(f'!"{self.func_name}"', distinct_self=True)
        scopes = {b: md(f'{domain}, !"{sanitize(b.name)}"', distinct_self=True) for b in buffers}
        for b in buffers:
            own = md("!{" + scopes[b] + "}")
            others = md("!{" + ", ".join(scopes[o] for o in buffers if o is not b) + "}")
            self.alias_md[b] = f", !alias.scope {own}, !noalias {others}"

    # -- variables -------------------------------------------------------------------------------

    def bind(self, var, value: Value, rng):
        self._shadow.append((var, self.env.get(var), self.ranges.get(var)))
        self.env[var], self.ranges[var] = value, rng

    def unbind(self, var):
        v, old_value, old_range = self._shadow.pop()
        assert v is var, "internal codegen error: unbalanced variable bindings"
        for table, old in ((self.env, old_value), (self.ranges, old_range)):
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old

    # -- statements ------------------------------------------------------------------------------

    def emit_stmt(self, s):
        method = STMT_EMITTERS.get(type(s))
        if method is None:
            raise BuildError(f"the LLVM backend cannot generate code for statement {type(s).__name__}: {s!r}")
        getattr(self, method)(s)

    def emit_seq(self, s: Seq):
        for stmt in s.stmts:
            self.emit_stmt(stmt)

    def emit_if(self, s: IfThenElse):
        c = self.ev(s.cond)
        if c.dtype != dtypes.BOOL:
            raise BuildError(f"IfThenElse condition {s.cond!r} has dtype {c.dtype}, expected bool")
        if c.is_const and not c.lanes:
            branch = s.then if c.ref == "true" else s.orelse
            if branch is not None:
                self.emit_stmt(branch)
            return
        if c.lanes:
            return self.masked_if(c, s)
        fn = self.fn
        then_b = fn.new_block("if.then")
        else_b = fn.new_block("if.else") if s.orelse is not None else None
        end = fn.new_block("if.end")
        fn.cond_br(c.ref, then_b, else_b or end)
        fn.goto(then_b)
        self.emit_stmt(s.then)
        fn.br(end)
        if else_b is not None:
            fn.goto(else_b)
            self.emit_stmt(s.orelse)
            fn.br(end)
        fn.goto(end)

    def emit_for(self, s: For):
        if not isinstance(s.extent, numbers.Integral) or s.extent < 0:
            raise BuildError(f"loop {s.var.name!r} has extent {s.extent!r}; the LLVM backend needs a constant >= 0")
        method = FOR_KINDS.get(s.kind)
        if method is None:
            raise BuildError(f"loop {s.var.name!r} has unknown kind {s.kind!r}; expected one of {', '.join(FOR_KINDS)}")
        if s.extent == 0:
            return
        getattr(self, method)(s)

    def emit_serial(self, s: For, loop_md: str | None = None):
        if s.extent == 1:
            return self.emit_unrolled(s)
        trip, body = self.runtime_trip(s)
        if trip is not None:  # `for v in range(E): if v < X: body` runs min(E, X) times
            self.counted_loop(s.var, const(0, "int64"), trip, (0, s.extent - 1), body, loop_md)
            return
        self.counted_loop(s.var, const(0, "int64"), const(s.extent, "int64"), (0, s.extent - 1), s.body, loop_md)

    def runtime_trip(self, s: For) -> tuple:
        """(min(extent, X), the body without its guard) when the loop's whole body is `if var < X:
        ...` (below its allocations) with X known before the loop: the guard dynamic shapes put
        on the tiles past a run-time extent (minitc/lowering/limits.py). (None, None) otherwise."""
        allocations, body = [], s.body
        while isinstance(body, Allocate):
            allocations.append(body.buffer)
            body = body.body
        if not (isinstance(body, IfThenElse) and body.orelse is None and isinstance(body.cond, Compare)):
            return None, None
        cond = body.cond
        if cond.op != "lt" or cond.a is not s.var or not _known_before(cond.b, s.body):
            return None, None
        inner = body.then
        for buf in reversed(allocations):
            inner = Allocate(buf, inner)
        bound = self.ev_index(cond.b)
        fewer = self.fn.assign(f"icmp slt i64 {bound.ref}, {s.extent}", "fewer")
        trip = self.fn.assign(f"select i1 {fewer}, i64 {bound.ref}, i64 {s.extent}", "trip")
        positive = self.fn.assign(f"icmp sgt i64 {trip}, 0", "positive")
        return Value(self.fn.assign(f"select i1 {positive}, i64 {trip}, i64 0", "trip"), "int64"), inner

    def emit_unrolled(self, s: For):
        if s.extent > MAX_UNROLL:
            unroll = self.module.metadata_node('!{!"llvm.loop.unroll.count", i32 8}')
            return self.emit_serial(s, self.module.metadata_node(unroll, distinct_self=True))
        for i in range(s.extent):
            self.bind(s.var, const(i, "int64"), (i, i))
            try:
                self.emit_stmt(s.body)
            finally:
                self.unbind(s.var)

    def counted_loop(self, var, start: Value, end: Value, rng, body, loop_md=None):
        """`for var in [start, end): body` as a bottom-tested loop, guarded when the trip count
        is not known to be positive."""
        fn = self.fn
        pre = fn.cur
        loop = fn.new_block("loop." + sanitize(var.name))
        exit_ = fn.new_block("exit." + sanitize(var.name))
        if start.is_const and end.is_const:
            fn.br(loop)
        else:
            nonempty = fn.assign(f"icmp ult i64 {start.ref}, {end.ref}", "nonempty")
            fn.cond_br(nonempty, loop, exit_)
        fn.goto(loop)
        phi = "%" + fn.fresh(sanitize(var.name))
        slot = len(loop.lines)
        loop.lines.append(None)  # the phi, written once the latch block is known
        self.bind(var, Value(phi, "int64"), rng)
        try:
            self.emit_stmt(body)
        finally:
            self.unbind(var)
        latch = fn.cur
        nxt = fn.assign(f"add nuw nsw i64 {phi}, 1", "next")
        more = fn.assign(f"icmp ult i64 {nxt}, {end.ref}", "more")
        md = f", !llvm.loop {loop_md}" if loop_md else ""
        fn.terminate(f"br i1 {more}, label %{loop.label}, label %{exit_.label}{md}")
        loop.lines[slot] = f"{phi} = phi i64 [ {start.ref}, %{pre.label} ], [ {nxt}, %{latch.label} ]"
        fn.goto(exit_)

    def emit_allocate(self, s: Allocate):
        buf = s.buffer
        self._check_buffer(buf)
        if buf in self.ptrs:
            raise BuildError(f"buffer {buf.name!r} is allocated twice (or is also a kernel parameter)")
        t = scalar_type(buf.dtype)
        heap = buf.scope != "local" or buf.nbytes > MAX_STACK_BYTES
        if heap:
            size = max(ALIGN, -(-buf.nbytes // ALIGN) * ALIGN)
            # the runtime's cache (workspace_ir.py): pages stay mapped from call to call
            self.module.declare("minitc_workspace_alloc", "declare noalias ptr @minitc_workspace_alloc(i64) nounwind")
            self.module.declare("minitc_workspace_free", "declare void @minitc_workspace_free(ptr) nounwind")
            ptr = self.fn.assign(f"call ptr @minitc_workspace_alloc(i64 {size})", sanitize(buf.name))
        else:
            ptr = self.fn.alloca(f"[{max(1, buf.size)} x {t}]", ALIGN, sanitize(buf.name))
        self.ptrs[buf] = ptr
        try:
            self.emit_stmt(s.body)
        finally:
            del self.ptrs[buf]
        if heap:
            self.fn.emit(f"call void @minitc_workspace_free(ptr {ptr})")
