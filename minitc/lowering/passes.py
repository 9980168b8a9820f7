"""Passes around nest construction: inlining before it, checks and simplification after it."""

from __future__ import annotations

from dataclasses import replace

from minitc import ir
from minitc.arith import bounds, fold_divisions, simplify
from minitc.errors import ScheduleError
from minitc.expr import Binary, Compare, Const, Var, substitute, transform
from minitc.schedule.state import Read, State
from minitc.te import Reduce

# A parallel loop of one iteration still marks a parallel region, and a bound one of one
# iteration still guards its body to a single thread.
KEPT_UNIT_LOOPS = ("parallel",) + ir.BLOCK_TAGS + ir.THREAD_TAGS


def inline_stages(state: State) -> State:
    """Substitute every compute_inline'd stage into its readers and drop it."""
    bodies: dict = {}  # inlined stage -> (axes, body with earlier inlines already applied)

    def expand(node):
        if isinstance(node, Read) and node.stage in bodies:
            axes, body = bodies[node.stage]
            idx = [transform(i, expand) for i in node.indices]
            return substitute(body, dict(zip(axes, idx)))
        return None

    stages = []
    for st in state.stages:
        if st.body is not None and any(r.stage in bodies for r in st.reads()):
            body = st.body
            if isinstance(body, Reduce):
                body = Reduce(body.combiner, transform(body.source, expand), body.axes, body.init)
            else:
                body = transform(body, expand)
            st = replace(st, body=body)
        if st.inline:
            bodies[st.name] = (st.axes, st.body)
            continue
        stages.append(st)
    return replace(state, stages=tuple(stages))


def check_no_bindings(state: State) -> None:
    """GPU bindings mean nothing on a CPU; say which loop has one."""
    for st in state.stages:
        for lp in st.loops:
            if lp.kind in ir.GPU_TAGS:
                raise ScheduleError(
                    f"loop {lp.name} of {st.name} is bound to {lp.kind}, which only a GPU runs; "
                    "build with target='cuda' (or 'cuda-sim' to simulate the GPU with numpy)"
                )


def check_parallel_nesting(stmt: ir.Stmt, outer: str | None = None) -> None:
    """Parallel loops inside parallel loops would oversubscribe the cores; reject them."""
    if isinstance(stmt, ir.For) and stmt.kind == "parallel":
        if outer is not None:
            raise ScheduleError(
                f"parallel loop {stmt.var.name} is nested inside parallel loop {outer}; "
                "parallelize only the outer one (fuse loops to get more parallel work)"
            )
        outer = stmt.var.name
    for child in ir.stmt_children(stmt):
        check_parallel_nesting(child, outer)


def simplify_stmt(stmt: ir.Stmt, ranges: dict | None = None) -> ir.Stmt | None:
    """Canonicalise index expressions, drop loops of extent 1 and guards the loop ranges prove
    true (a guard proven false drops its statement). Returns None for an empty statement."""
    ranges = dict(ranges or {})
    if isinstance(stmt, ir.For):
        if stmt.extent == 1 and stmt.kind not in KEPT_UNIT_LOOPS:
            return simplify_stmt(_subst_stmt(stmt.body, {stmt.var: Const(0, stmt.var.dtype)}), ranges)
        ranges[stmt.var] = (0, stmt.extent - 1)
        body = simplify_stmt(stmt.body, ranges)
        return None if body is None else replace(stmt, body=body)
    if isinstance(stmt, ir.Seq):
        parts = [simplify_stmt(s, ranges) for s in stmt.stmts]
        parts = [p for p in parts if p is not None]
        return ir.seq(*parts) if parts else None
    if isinstance(stmt, ir.Allocate):
        body = simplify_stmt(stmt.body, ranges)
        return None if body is None else ir.Allocate(stmt.buffer, body)
    if isinstance(stmt, ir.IfThenElse):
        cond = _simplify_cond(_simplify_expr(stmt.cond, ranges), ranges)
        then = simplify_stmt(stmt.then, ranges)
        orelse = None if stmt.orelse is None else simplify_stmt(stmt.orelse, ranges)
        if isinstance(cond, Const):
            return then if cond.value else orelse
        if then is None and orelse is None:
            return None
        return ir.IfThenElse(cond, then if then is not None else ir.Seq(()), orelse)
    if isinstance(stmt, ir.Store):
        return ir.Store(stmt.buffer, _simplify_indices(stmt.indices, ranges), _simplify_expr(stmt.value, ranges))
    return stmt


def _simplify_expr(e, ranges: dict | None = None):
    def fn(node):
        if isinstance(node, ir.Load):
            return ir.Load(node.buffer, _simplify_indices(node.indices, ranges))
        if ranges and isinstance(node, Binary) and node.op in ("floordiv", "mod"):
            folded = fold_divisions(node, ranges)  # guards and selects stay in step with the indices
            return None if folded is node else simplify(folded)
        return None

    return transform(e, fn)


def _simplify_indices(indices, ranges) -> tuple:
    """Canonical indices, with the divisions the loop ranges prove trivial folded (x // 28 is 0
    and x % 28 is x for x in [0, 28); (jo*48 + lane) // 16 is jo*3 for a lane in [0, 16)): in
    unrolled code a register array's indices become constants, and a vector read of blocked
    data becomes contiguous."""
    return tuple(simplify(_simplify_expr(i, ranges)) for i in indices)


def _simplify_cond(cond, ranges: dict):
    """Drop the conjuncts of a guard that the loop ranges prove."""
    if isinstance(cond, Binary) and cond.op == "and":
        a, b = _simplify_cond(cond.a, ranges), _simplify_cond(cond.b, ranges)
        from minitc.expr import logical

        return logical("and", a, b)
    if isinstance(cond, Compare) and cond.op in ("lt", "le", "gt", "ge"):
        a, b = bounds(cond.a, ranges), bounds(cond.b, ranges)
        if a is not None and b is not None:
            lo, hi = a[0] - b[1], a[1] - b[0]  # range of a - b
            truth = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0),
            }[cond.op]
            if truth[0]:
                return Const(True, "bool")
            if truth[1]:
                return Const(False, "bool")
        return Compare(cond.op, simplify(cond.a), simplify(cond.b))
    return cond


def _subst_stmt(stmt: ir.Stmt, mapping: dict) -> ir.Stmt:
    def expr(e):
        def fn(node):
            if isinstance(node, ir.Load):
                return ir.Load(node.buffer, tuple(expr(i) for i in node.indices))
            if isinstance(node, Var):
                return mapping.get(node)
            return None

        return transform(e, fn)

    if isinstance(stmt, ir.Store):
        return ir.Store(stmt.buffer, tuple(expr(i) for i in stmt.indices), expr(stmt.value))
    if isinstance(stmt, ir.For):
        return replace(stmt, body=_subst_stmt(stmt.body, mapping))
    if isinstance(stmt, ir.Seq):
        return ir.Seq(tuple(_subst_stmt(s, mapping) for s in stmt.stmts))
    if isinstance(stmt, ir.Allocate):
        return ir.Allocate(stmt.buffer, _subst_stmt(stmt.body, mapping))
    if isinstance(stmt, ir.IfThenElse):
        orelse = None if stmt.orelse is None else _subst_stmt(stmt.orelse, mapping)
        return ir.IfThenElse(expr(stmt.cond), _subst_stmt(stmt.then, mapping), orelse)
    return stmt
