"""Loop partitioning of tails: run the iterations where every guard holds without the guards.

A split that does not divide its extent leaves guards such as `i_o * 6 + i < 512` inside the
hot loops. For a serial or parallel loop `v` whose body holds such guards, find the largest `p`
for which the loop ranges prove the guards true for every `v < p`, and give the iterations
`[0, p)` a copy of the body with those guards removed:

    Before (E = 86, p = 85):                 After (serial loop):
        for i_o in range(86):                    for i_o in range(85):
            for k in range(512):                     for k in range(512):
                for i in unrolled(6):                    for i in unrolled(6):
                    if i_o * 6 + i < 512:                    body
                        body                         for i in unrolled(6):   # i_o = 85
                                                         if i < 2:
                                                             body
A parallel loop keeps its iterations together (so the work stays spread over the threads) and
branches inside: `if v < p: <body without guards> else: <body>`.

Iterations where the guards are all false are dropped first (the loop just gets shorter, no
copy), however many: in the last panel of a split that does not divide, whole inner tiles lie
past the edge (matmul 512 in panels of nc=96 columns: the last has 32, 2 of its 6 tiles of 16),
and running them guarded costs as much as running them for real.
The result means the same as the input; backends apply it just before emitting code (the
printed IR keeps the guards, which say what the kernel computes). Copies are made outermost
loop first, head before tail, while the emitted code (unrolled loops counted as many times as
they are emitted) stays within GROWTH times the original, plus MIN_BUDGET statements.
"""

from __future__ import annotations

from dataclasses import replace

from minitc import ir
from minitc.arith import bounds
from minitc.expr import Binary, Compare, Var, binary, compare, const, walk
from minitc.lowering.passes import _subst_stmt, simplify_stmt

GROWTH = 4
MIN_BUDGET = 3000
MAX_UNROLL = 64  # as in the LLVM backend: longer unrolled loops are emitted as loops


def partition_tails(stmt: ir.Stmt) -> ir.Stmt:
    """Partition every serial or parallel loop whose body has guards that hold for a prefix
    of its iterations (see the module docstring)."""
    budget = [max(MIN_BUDGET, GROWTH * code_size(stmt))]
    return _visit(stmt, {}, budget)


def code_size(stmt: ir.Stmt) -> int:
    """Statements the backend emits for `stmt` (an unrolled loop's body once per iteration)."""
    if isinstance(stmt, ir.For):
        body = code_size(stmt.body)
        return 1 + (body * stmt.extent if stmt.kind == "unrolled" and stmt.extent <= MAX_UNROLL else body)
    return 1 + sum(code_size(c) for c in ir.stmt_children(stmt))


def _visit(stmt: ir.Stmt, ranges: dict, budget: list) -> ir.Stmt:
    if isinstance(stmt, ir.For):
        inner = dict(ranges)
        inner[stmt.var] = (0, stmt.extent - 1)
        if stmt.kind in ("serial", "parallel") and stmt.extent > 1:
            done = _partition(stmt, ranges, budget)
            if done is not None:
                return done
        return replace(stmt, body=_visit(stmt.body, inner, budget))
    if isinstance(stmt, ir.Seq):
        return ir.seq(*(_visit(s, ranges, budget) for s in stmt.stmts))
    if isinstance(stmt, ir.Allocate):
        return ir.Allocate(stmt.buffer, _visit(stmt.body, ranges, budget))
    if isinstance(stmt, ir.IfThenElse):
        orelse = None if stmt.orelse is None else _visit(stmt.orelse, ranges, budget)
        return ir.IfThenElse(stmt.cond, _visit(stmt.then, ranges, budget), orelse)
    return stmt


def _partition(loop: ir.For, ranges: dict, budget: list):
    """The partitioned loop, or None when no guard inside it is worth it."""
    guards, inner = _guards(loop.body)
    v, ext = loop.var, loop.extent
    guards = [g for g in guards if v in _vars(g)]
    if not guards:
        return None
    live = _live_prefix(loop, ranges)
    if live < ext:  # the guards are false from `live` on: the loop just gets shorter
        shorter = _clean(replace(loop, extent=live), ranges, budget) if live else None
        return ir.Seq(()) if shorter is None else shorter
    env = {**ranges, **inner}
    cuts = [p for p in (_true_prefix(g, v, ext, env) for g in guards) if 2 * p >= ext and p < ext]
    if not cuts:  # (a short head is not worth a copy)
        return None
    p = min(cuts)
    head_ranges = dict(ranges)
    head_ranges[v] = (0, p - 1)
    tail_ranges = dict(ranges)
    tail_ranges[v] = (p, ext - 1)
    size = code_size(loop.body)
    if size > budget[0]:
        return None
    budget[0] -= size
    head = _clean(loop.body, head_ranges, budget)
    if loop.kind == "parallel":
        tail_body = loop.body if ext - p > 1 else _subst_stmt(loop.body, {v: const(p)})
        tail = _clean(tail_body, tail_ranges, budget)
        body = ir.IfThenElse(compare("lt", v, const(p)), head or ir.Seq(()), tail)
        return ir.For(v, ext, "parallel", body)
    out = [replace(loop, extent=p, body=head)] if head is not None else []
    if ext - p == 1:
        tail = _clean(_subst_stmt(loop.body, {v: const(p)}), ranges, budget)
        out.append(tail)
    else:
        w = Var(f"{v.name}_t")
        moved = _subst_stmt(loop.body, {v: binary("add", w, const(p))})
        tail_ranges = dict(ranges)
        tail_ranges[w] = (0, ext - p - 1)
        tail = _clean(moved, tail_ranges, budget)
        if tail is not None:
            out.append(replace(loop, var=w, extent=ext - p, body=tail))
    return ir.seq(*out) if out else ir.Seq(())


def _live_prefix(loop: ir.For, ranges: dict) -> int:
    """The smallest q such that the body does nothing for loop.var in [q, extent): the tail
    panel of a split that does not divide, where whole inner tiles lie past the edge."""
    v, ext = loop.var, loop.extent

    def dead_from(q):
        return q >= ext or _simplify_in(loop.body, {**ranges, v: (q, ext - 1)}) is None

    if not dead_from(ext - 1):
        return ext
    lo, hi = 0, ext - 1  # dead from hi on (monotone: dead from q means dead from q + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if dead_from(mid) else (mid + 1, hi)
    return lo


def _clean(body: ir.Stmt, ranges: dict, budget: list):
    """Drop the guards the ranges prove, then partition what is left inside."""
    s = _simplify_in(body, ranges)
    return None if s is None else _visit(s, ranges, budget)


def _simplify_in(stmt: ir.Stmt, ranges: dict):
    # simplify_stmt resets a loop variable's range to (0, extent - 1) only at its For, so
    # ranges narrowed here for enclosing variables are kept inside
    return simplify_stmt(stmt, ranges)


def _guards(body: ir.Stmt):
    """The conjuncts of guards nested inside at least one loop of `body`, and the ranges of
    the loops in `body`."""
    guards, inner = [], {}

    def walk_stmt(s, in_loop):
        if isinstance(s, ir.For):
            lo, hi = inner.get(s.var, (0, 0))
            inner[s.var] = (0, max(hi, s.extent - 1))
            walk_stmt(s.body, True)
            return
        if isinstance(s, ir.IfThenElse):
            if in_loop:
                guards.extend(_conjuncts(s.cond))
            walk_stmt(s.then, in_loop)
            if s.orelse is not None:
                walk_stmt(s.orelse, in_loop)
            return
        for c in ir.stmt_children(s):
            walk_stmt(c, in_loop)

    walk_stmt(body, False)
    return guards, inner


def _conjuncts(cond):
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond] if isinstance(cond, Compare) and cond.op in ("lt", "le", "gt", "ge") else []


def _vars(e) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}


def _proven(g: Compare, ranges: dict) -> bool:
    a, b = bounds(g.a, ranges), bounds(g.b, ranges)
    if a is None or b is None:
        return False
    lo, hi = a[0] - b[1], a[1] - b[0]  # range of a - b
    return {"lt": hi < 0, "le": hi <= 0, "gt": lo > 0, "ge": lo >= 0}[g.op]


def _true_prefix(g: Compare, v: Var, extent: int, ranges: dict) -> int:
    """The largest p such that `g` is proven for every v in [0, p) (bounds are monotone in the
    range of v, so a binary search finds it)."""
    lo, hi = 0, extent  # proven for lo (vacuously for 0); not known for hi + 1
    env = dict(ranges)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        env[v] = (0, mid - 1)
        if _proven(g, env):
            lo = mid
        else:
            hi = mid - 1
    return lo
