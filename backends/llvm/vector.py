"""Memory access and vectorized loops.

A `vectorized` loop of extent n is emitted once as `<n x T>` code: its variable is the constant
vector <0, 1, ..., n-1>. A load or store is classified by the coefficient of that variable in
the flattened index: 1 gives one contiguous vector access, 0 a scalar access, anything else a
per-lane gather/scatter. Lane-varying conditions (guards, padding selects) become lane masks:
accesses under a mask use llvm.masked.{load,store,gather,scatter}, which never touch a lane whose
mask bit is off.

A body whose lanes could interfere (a cross-lane reduction, a buffer written and read at
different indices) or that contains loops is instead emitted as scalar code once per lane, which
is always correct.
"""

from __future__ import annotations

from minitc import arith, dtypes
from minitc.backends.llvm.builder import Value, elem_bytes, lane_ids, mangle, scalar_type, vec_type
from minitc.errors import BuildError
from minitc.expr import Const, Expr, Var, cast, substitute
from minitc.expr import binary as mk_binary
from minitc.expr import const as mk_const
from minitc.ir import Allocate, For, Load, Store, stmt_exprs, walk_stmts
from minitc.target.cpu import enabled_features, simd_width

MAX_LANES = 64


def flat_index(buffer, indices):
    """The row-major element offset of `buffer[indices]`, as an int64 expression."""
    if len(indices) != len(buffer.shape):
        raise BuildError(
            f"buffer {buffer.name!r} has {len(buffer.shape)} dimensions but is indexed with {len(indices)}"
        )
    flat, stride = None, 1
    for idx, dim in reversed(list(zip(indices, buffer.shape))):
        if not isinstance(idx, Expr):
            raise BuildError(f"index {idx!r} of buffer {buffer.name!r} is not an expression; use minitc.expr.const")
        if not dtypes.is_int(idx.dtype):
            raise BuildError(f"index {idx!r} of buffer {buffer.name!r} has dtype {idx.dtype}; indices must be integers")
        if idx.dtype != dtypes.INDEX:
            idx = cast(idx, dtypes.INDEX)
        term = idx if stride == 1 else mk_binary("mul", idx, mk_const(stride))
        flat = term if flat is None else mk_binary("add", term, flat)
        stride *= dim
    return arith.simplify(flat) if flat is not None else mk_const(0)


def nodes(e):
    """Every node of an expression (like expr.walk), skipping stray non-Expr leaves so that
    malformed IR reaches a BuildError instead of an AttributeError."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Expr):
            yield n
            stack.extend(n.children())


def expr_key(e):
    """A hashable structural key: equal keys mean the same computation."""
    if isinstance(e, Var):
        return ("var", id(e))
    if isinstance(e, Const):
        return ("const", e.dtype, repr(e.value))
    if isinstance(e, Load):
        return ("load", id(e.buffer), tuple(expr_key(i) for i in e.indices))
    tag = getattr(e, "op", None) or getattr(e, "name", None)
    return (type(e).__name__, tag, e.dtype, tuple(expr_key(c) for c in e.children()))


def vector_hazard(body, var, flat_index=flat_index):
    """Why `body` cannot run all lanes of `var` at once (a message), or None if it can."""
    accesses = {}
    for st in walk_stmts(body):
        if isinstance(st, (For, Allocate)):
            return f"its body contains a {type(st).__name__}"
        if isinstance(st, Store):
            accesses.setdefault(st.buffer, []).append((flat_index(st.buffer, st.indices), True))
        for e in stmt_exprs(st):
            for n in nodes(e):
                if isinstance(n, Load):
                    accesses.setdefault(n.buffer, []).append((flat_index(n.buffer, n.indices), False))
    for buf, acc in accesses.items():
        if len(acc) == 1 or not any(is_store for _, is_store in acc):
            continue
        if len({expr_key(f) for f, _ in acc}) > 1:
            return f"buffer {buf.name!r} is written and accessed at different indices"
        coef = arith.coefficient(acc[0][0], var)
        if not coef:
            return f"all lanes of {var.name!r} access the same elements of {buf.name!r}"
    return None


def updated_buffers(body) -> set:
    """Buffers some store updates in place (`acc[i] = acc[i] + ..`): the accumulators."""
    found = set()
    for st in walk_stmts(body):
        if not isinstance(st, Store) or st.buffer in found:
            continue
        reads = [n.indices for n in nodes(st.value) if isinstance(n, Load) and n.buffer is st.buffer]
        if reads and list(map(expr_key, st.indices)) in [list(map(expr_key, r)) for r in reads]:
            found.add(st.buffer)
    return found


class MemoryEmitter:
    """Mixin of `Codegen`: loads, stores and vectorized loops."""

    def pointer(self, buffer) -> str:
        ptr = self.ptrs.get(buffer)
        if ptr is None:
            raise BuildError(
                f"buffer {buffer.name!r} is used in kernel {self.kernel_name!r} but is neither a parameter "
                "nor allocated by an enclosing Allocate"
            )
        return ptr

    def gep(self, buffer, idx: Value) -> Value:
        """Address of element(s) `idx` (an i64 scalar or vector) of `buffer`."""
        ref = self.fn.assign(
            f"getelementptr inbounds {scalar_type(buffer.dtype)}, ptr {self.pointer(buffer)}, {idx.typed}", "p"
        )
        return Value(ref, "ptr", idx.lanes)

    def _check_buffer(self, buffer):
        if buffer.dtype == dtypes.BOOL:
            raise BuildError(f"buffer {buffer.name!r} has dtype bool; buffers must be numeric (store an int32)")

    def flat(self, buffer, indices):
        """flat_index, memoised per access for the duration of one render (unrolled loops
        emit the same Load many times)."""
        key = (id(buffer), tuple(map(id, indices)))
        hit = self._flat_memo.get(key)
        if hit is None:
            hit = self._flat_memo[key] = (flat_index(buffer, indices), buffer, indices)
        return hit[0]

    def _classify(self, flat):
        """(coefficient, base index expression) for a vector access, or (None, None) for the
        general per-lane path."""
        var = self.lane_var
        key = (id(flat), id(var), self.mask is not None)
        hit = self._classify_memo.get(key)
        if hit is None:
            coef = arith.coefficient(flat, var)
            if coef in (0, 1) and not (self.mask is not None and any(isinstance(n, Load) for n in nodes(flat))):
                hit = (coef, substitute(flat, {var: mk_const(0)}), flat, var)
            else:
                hit = (None, None, flat, var)
            self._classify_memo[key] = hit
        return hit[0], hit[1]

    def _strided_lanes(self, buffer, flat):
        """Per-lane element pointers for an index affine in the lane variable (base + lane *
        stride), as scalar GEPs off one base pointer; None for other indices. Unlike lanes
        extracted from a vector of pointers, alias analysis sees which buffer each lane reads,
        so strided loads can be reused and local tiles stay promotable to registers."""
        stride = arith.coefficient(flat, self.lane_var)
        if not isinstance(stride, int):
            return None
        base = self.gep(buffer, self.ev_index(substitute(flat, {self.lane_var: mk_const(0)})))
        t = scalar_type(buffer.dtype)
        return [
            self.fn.assign(f"getelementptr inbounds {t}, ptr {base.ref}, i64 {lane * stride}", "pl")
            for lane in range(self.lanes)
        ]

    # -- masked contiguous accesses --------------------------------------------------------------
    # LLVM 22 miscompiled a 9-lane masked load of a conv2d pad fill (right at O0, a wrong last
    # lane from O1 on), so a masked access of a lane count that is not a power of two is made
    # with the next power of two, the extra lanes masked off, and shuffled back to n lanes.

    def _pow2_mask(self, mask: Value) -> tuple[int, str]:
        """(m, the mask widened to m lanes, the extra lanes false) for m the next power of two."""
        n = mask.lanes
        m = 1 << (n - 1).bit_length()
        if m == n:
            return n, mask.typed
        lanes = ", ".join(f"i32 {min(i, n)}" for i in range(m))  # lane n of the second operand: false
        wide = self.fn.assign(f"shufflevector {mask.typed}, <{n} x i1> zeroinitializer, <{m} x i32> <{lanes}>", "mw")
        return m, f"<{m} x i1> {wide}"

    def _masked_load(self, dtype: str, p: Value, mask: Value, align: int, md: str) -> Value:
        n = mask.lanes
        m, wide_mask = self._pow2_mask(mask)
        vt = vec_type(dtype, m)
        name = f"llvm.masked.load.{mangle(dtype, m)}.p0"
        self.module.declare(name, f"declare {vt} @{name}(ptr, i32, <{m} x i1>, {vt})")
        ref = self.fn.assign(
            f"call {vt} @{name}(ptr {p.ref}, i32 {align}, {wide_mask}, {vt} zeroinitializer){md}", "mld"
        )
        if m != n:
            first = ", ".join(f"i32 {i}" for i in range(n))
            ref = self.fn.assign(f"shufflevector {vt} {ref}, {vt} poison, <{n} x i32> <{first}>", "mld")
        return Value(ref, dtype, n)

    def _masked_store(self, v: Value, p: Value, mask: Value, align: int, md: str) -> None:
        n = mask.lanes
        m, wide_mask = self._pow2_mask(mask)
        if m != n:
            lanes = ", ".join(f"i32 {i}" if i < n else "i32 poison" for i in range(m))
            ref = self.fn.assign(f"shufflevector {v.typed}, {v.ty} poison, <{m} x i32> <{lanes}>", "vw")
            v = Value(ref, v.dtype, m)
        name = f"llvm.masked.store.{mangle(v.dtype, m)}.p0"
        self.module.declare(name, f"declare void @{name}({v.ty}, ptr, i32, <{m} x i1>)")
        self.fn.emit(f"call void @{name}({v.typed}, ptr {p.ref}, i32 {align}, {wide_mask}){md}")

    def _one_masked_load(self, e: Load) -> bool:
        """Whether a contiguous load of n lanes is better made as one masked load of the next
        power of two: n is not a power of two and fits one AVX-512 register, where a masked load
        is one instruction. LLVM otherwise loads the power-of-two pieces and joins them with
        shuffles (14 lanes: 8 + 4 + 2, two inserts) on the FMA pipes (port 5 on Intel) that a
        convolution row of 56, 28 or 14 columns needs at every step. Never from an accumulator:
        LLVM keeps a tile in registers only when every access to it is a plain load or store."""
        n = self.lanes
        if n & (n - 1) == 0 or "avx512f" not in enabled_features(self.target):
            return False
        if self._accumulators is None:
            self._accumulators = updated_buffers(self.kernel.body)
        return e.buffer not in self._accumulators and 1 << (n - 1).bit_length() <= simd_width(self.target, e.dtype)

    def _first_lanes(self, n: int) -> Value:
        return Value(f"<{', '.join(['i1 true'] * n)}>", "bool", n)

    # -- loads -----------------------------------------------------------------------------------

    def emit_load(self, e: Load) -> Value:
        self._check_buffer(e.buffer)
        flat = self.flat(e.buffer, e.indices)
        t, align = scalar_type(e.dtype), elem_bytes(e.dtype)
        md = self.alias_md.get(e.buffer, "")
        if not self.lanes:
            p = self.gep(e.buffer, self.ev_index(flat))
            return Value(self.fn.assign(f"load {t}, ptr {p.ref}, align {align}{md}", "ld"), e.dtype)
        n, mask = self.lanes, self.mask
        vt = vec_type(e.dtype, n)
        coef, base = self._classify(flat)
        if coef is not None:
            p = self.gep(e.buffer, self.ev_index(base))
            if coef == 1 and mask is None and self._one_masked_load(e):
                return self._masked_load(e.dtype, p, self._first_lanes(n), align, md)
            if coef == 1 and mask is None:
                return Value(self.fn.assign(f"load {vt}, ptr {p.ref}, align {align}{md}", "vld"), e.dtype, n)
            if coef == 1:
                return self._masked_load(e.dtype, p, mask, align, md)
            if mask is None:
                return Value(self.fn.assign(f"load {t}, ptr {p.ref}, align {align}{md}", "ld"), e.dtype)
            ptrs = self.widen(p, n)
        elif mask is None and (lane_ptrs := self._strided_lanes(e.buffer, flat)) is not None:
            acc = "poison"
            for lane, pl in enumerate(lane_ptrs):
                xl = self.fn.assign(f"load {t}, ptr {pl}, align {align}{md}", "ld")
                acc = self.fn.assign(f"insertelement {vt} {acc}, {t} {xl}, i64 {lane}", "gather")
            return Value(acc, e.dtype, n)
        else:
            ptrs = self.gep(e.buffer, self.widen(self.ev_index(flat), n))
        if mask is not None:
            name = f"llvm.masked.gather.{mangle(e.dtype, n)}.v{n}p0"
            self.module.declare(name, f"declare {vt} @{name}(<{n} x ptr>, i32, <{n} x i1>, {vt})")
            ref = self.fn.assign(
                f"call {vt} @{name}({ptrs.typed}, i32 {align}, {mask.typed}, {vt} zeroinitializer){md}", "gather"
            )
            return Value(ref, e.dtype, n)
        acc = "poison"
        for lane in range(n):
            pl = self.fn.assign(f"extractelement {ptrs.typed}, i64 {lane}", "pl")
            xl = self.fn.assign(f"load {t}, ptr {pl}, align {align}{md}", "ld")
            acc = self.fn.assign(f"insertelement {vt} {acc}, {t} {xl}, i64 {lane}", "gather")
        return Value(acc, e.dtype, n)

    # -- stores ----------------------------------------------------------------------------------

    def emit_store(self, s: Store):
        self._check_buffer(s.buffer)
        if s.value.dtype != s.buffer.dtype:
            raise BuildError(
                f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer {s.buffer.name!r}; "
                "cast the value explicitly"
            )
        flat = self.flat(s.buffer, s.indices)
        value = self.ev(s.value)
        t, align = scalar_type(s.buffer.dtype), elem_bytes(s.buffer.dtype)
        md = self.alias_md.get(s.buffer, "")
        if not self.lanes:
            p = self.gep(s.buffer, self.ev_index(flat))
            self.fn.emit(f"store {value.typed}, ptr {p.ref}, align {align}{md}")
            return
        n, mask = self.lanes, self.mask
        coef, base = self._classify(flat)
        if coef is not None:
            p = self.gep(s.buffer, self.ev_index(base))
            if coef == 1 and mask is None:
                self.fn.emit(f"store {self.widen(value, n).typed}, ptr {p.ref}, align {align}{md}")
                return
            if coef == 1:
                self._masked_store(self.widen(value, n), p, mask, align, md)
                return
            if mask is None:  # every lane writes the same element: the last lane wins
                if value.lanes:
                    last = self.fn.assign(f"extractelement {value.typed}, i64 {n - 1}", "last")
                    value = Value(last, value.dtype)
                self.fn.emit(f"store {value.typed}, ptr {p.ref}, align {align}{md}")
                return
            ptrs = self.widen(p, n)
        else:
            ptrs = self.gep(s.buffer, self.widen(self.ev_index(flat), n))
        if mask is not None:  # scatter writes overlapping lanes in lane order
            v = self.widen(value, n)
            name = f"llvm.masked.scatter.{mangle(v.dtype, n)}.v{n}p0"
            self.module.declare(name, f"declare void @{name}({v.ty}, <{n} x ptr>, i32, <{n} x i1>)")
            self.fn.emit(f"call void @{name}({v.typed}, {ptrs.typed}, i32 {align}, {mask.typed}){md}")
            return
        for lane in range(n):
            pl = self.fn.assign(f"extractelement {ptrs.typed}, i64 {lane}", "pl")
            if value.lanes:
                xl = self.fn.assign(f"extractelement {value.typed}, i64 {lane}", "xl")
            else:
                xl = value.ref
            self.fn.emit(f"store {t} {xl}, ptr {pl}, align {align}{md}")

    # -- vectorized loops and lane masks ---------------------------------------------------------

    def emit_vectorized(self, s: For):
        if s.extent <= 1 or self.lanes:
            return self.emit_unrolled(s)  # nothing to vectorize, or already inside a vector loop
        if s.extent > MAX_LANES:
            return self.emit_serial(s)  # documented: too wide for one vector; LLVM may vectorize it
        if id(s) not in self._hazard_memo:
            self._hazard_memo[id(s)] = (vector_hazard(s.body, s.var, self.flat), s)
        reason = self._hazard_memo[id(s)][0]
        if reason is not None:
            self.notes.append(f"vectorized loop {s.var.name!r} emitted as scalar lanes: {reason}")
            return self.emit_unrolled(s)
        self.lanes, self.lane_var, self.mask = s.extent, s.var, None
        self.bind(s.var, lane_ids(s.extent), (0, s.extent - 1))
        try:
            self.emit_stmt(s.body)
        finally:
            self.unbind(s.var)
            self.lanes, self.lane_var, self.mask = 0, None, None

    def and_mask(self, old, c: Value) -> Value:
        return c if old is None else self.inst("and", old, c, dtypes.BOOL, "mask")

    def under_masks(self, c: Value, then_fn, else_fn):
        """Run then_fn with the lanes where c holds, else_fn with the others; return both results."""
        old = self.mask
        c = self.widen(c, self.lanes)
        try:
            self.mask = self.and_mask(old, c)
            t = then_fn()
            if else_fn is None:
                return t, None
            not_c = self.inst("xor", c, Value("true", dtypes.BOOL), dtypes.BOOL, "notc")
            self.mask = self.and_mask(old, not_c)
            return t, else_fn()
        finally:
            self.mask = old

    def masked_select(self, c: Value, e) -> Value:
        t, f = self.under_masks(c, lambda: self.ev(e.t), lambda: self.ev(e.f))
        return self.select_values(c, t, f)

    def masked_if(self, c: Value, s):
        orelse = None if s.orelse is None else (lambda: self.emit_stmt(s.orelse))
        self.under_masks(c, lambda: self.emit_stmt(s.then), orelse)
