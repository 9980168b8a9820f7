"""Software prefetch: the loops' prefetch requests (`For.prefetch`, from the schedule's
`prefetch` step) expanded into `Prefetch` statements, and those emitted as `llvm.prefetch`.

A request on loop `k` for buffer `B` `ahead` iterations puts, at the top of each iteration of
`k`, one prefetch per cache line that the iteration reads of `B`, at the indices of those reads
with `k` replaced by `k + ahead`. The loops inside `k` that the read's indices use are copied
around the prefetch (unrolled), a loop along a row (a vectorized one) stepping by a cache line;
loops the indices do not use (the micro-kernel's rows, for B) are left out, so a line is asked
for once per iteration:

    for k_i in unrolled(4):  [prefetch B_local, 2 ahead]     for k_i in unrolled(4):
        for i in unrolled(6):                                     for j_v' in unrolled(2):
            for j_v in unrolled(2):                 ->                prefetch(B_local[k_o*4 + (k_i + 2), j_v'*8])
                for j_l in vectorized(8):                         for i in unrolled(6): ...
                    acc[i, j] += A[i, k] * B_local[k, j]

An address past the buffer's end (the last iterations) is harmless: a prefetch never faults,
and its address is computed without `inbounds`.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.arith import coefficient
from minitc.backends.llvm.builder import scalar_type
from minitc.backends.llvm.vector import expr_key, flat_index
from minitc.expr import Var, binary, const, free_vars, substitute, walk
from minitc.ir import For, Load, Prefetch, map_stmt, seq, stmt_children, stmt_exprs

LINE_BYTES = 64
PREFETCH_DECLARATION = "declare void @llvm.prefetch.p0(ptr nocapture readonly, i32 immarg, i32 immarg, i32 immarg)"
MAX_PREFETCHES = 32  # per iteration and request; beyond it the request is dropped (not a micro-kernel)


def expand_prefetches(body):
    """`body` with every loop's prefetch requests expanded into Prefetch statements at the
    top of its body (and taken off the loop)."""

    def expand(s):
        if not (isinstance(s, For) and s.prefetch):
            return None
        ahead = [p for r in s.prefetch for p in _prefetches(s, r)]
        return For(s.var, s.extent, s.kind, seq(*ahead, s.body))

    return map_stmt(body, expand)


def _reads(stmt, name: str, inside: tuple, out: dict) -> None:
    """Loads of the buffer `name` under `stmt`, by structure, each with the loops around it
    (below the requesting loop)."""
    for e in stmt_exprs(stmt):
        for n in walk(e):
            if isinstance(n, Load) and n.buffer.name == name:
                out.setdefault(_key(n), (n, inside))
    deeper = inside + (stmt,) if isinstance(stmt, For) else inside
    for child in stmt_children(stmt):
        _reads(child, name, deeper, out)


def _key(load: Load):
    return expr_key(load)


def _prefetches(loop: For, request) -> list:
    reads: dict = {}
    _reads(loop.body, request.buffer, (), reads)
    out, seen = [], set()
    for load, inside in reads.values():
        used = set()
        for idx in load.indices:
            used |= set(free_vars(idx))
        nest = [lp for lp in inside if lp.var in used]
        count = 1
        for lp in nest:
            count *= _steps(lp, load)[0]
        if count > MAX_PREFETCHES:
            return []
        shift = {loop.var: binary("add", loop.var, const(request.ahead))}
        stmt = _nest(load, nest, shift, request.locality)
        key = (
            _key(Load(load.buffer, tuple(substitute(i, shift) for i in load.indices))),
            tuple((lp.var, lp.extent) for lp in nest),
        )
        if key not in seen:  # the same line read by two statements (a row tile's copies)
            seen.add(key)
            out.append(stmt)
    return out


def _steps(lp: For, load: Load) -> tuple:
    """(iterations, stride) of the copy of loop `lp` around a prefetch of `load`: where
    consecutive iterations read neighbouring elements (a vectorized loop, a contiguous row),
    a cache line at a time, else every iteration."""
    esize = max(1, dtypes.bits(load.buffer.dtype) // 8)
    coef = coefficient(flat_index(load.buffer, load.indices), lp.var)
    if not isinstance(coef, int) or coef == 0 or abs(coef) * esize >= LINE_BYTES:
        return lp.extent, 1
    stride = LINE_BYTES // (abs(coef) * esize)
    return -(-lp.extent // stride), stride


def _nest(load: Load, nest: list, shift: dict, locality: int):
    """The prefetch of `load`'s line(s) shifted by `shift`, inside unrolled copies of `nest`."""
    fresh = {}
    for lp in nest:
        _, stride = _steps(lp, load)
        v = Var(lp.var.name + "_pf", lp.var.dtype)
        fresh[lp] = v
        shift = {**shift, lp.var: v if stride == 1 else binary("mul", v, const(stride))}
    stmt = Prefetch(load.buffer, tuple(substitute(i, shift) for i in load.indices), locality)
    for lp in reversed(nest):
        stmt = For(fresh[lp], _steps(lp, load)[0], "unrolled", stmt)
    return stmt


class PrefetchEmitter:
    """Mixin of `Codegen`: `Prefetch` as `llvm.prefetch` (read, data cache)."""

    def emit_prefetch(self, s: Prefetch):
        idx = self.ev_index(self.flat(s.buffer, s.indices))
        t = scalar_type(s.buffer.dtype)
        p = self.fn.assign(f"getelementptr {t}, ptr {self.pointer(s.buffer)}, i64 {idx.ref}", "pf")
        self.module.declare("llvm.prefetch.p0", PREFETCH_DECLARATION)
        # the buffer's alias scopes, as its loads have: without them LLVM cannot tell that the
        # prefetch leaves other buffers alone, and stores an in-place C tile every k step
        md = self.alias_md.get(s.buffer, "")
        self.fn.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 {int(s.locality)}, i32 1){md}")
