"""Loop-nest construction: turn the schedule state plus inferred bounds into IR.

Each stage becomes a nest of its leaf loops around one store (two nests for a reduction: the
initialisation, then the update). Attached stages are placed inside their attach loop, before
the rest of the body (compute_at) or after it (reverse_compute_at); on a GPU, barriers surround
each shared-memory fill. Guards sit just inside the
innermost loop they depend on.
"""

from __future__ import annotations

from dataclasses import replace

from minitc import ir
from minitc.errors import ScheduleError
from minitc.expr import Const, Var, logical, substitute, transform, walk
from minitc.lowering.allreduce import ThreadAllReduce
from minitc.lowering.bounds import StageInfo
from minitc.schedule.state import Read, Stage, State
from minitc.te import Reduce, combine


class NestBuilder:
    def __init__(self, state: State, info: dict, buffers: dict, gpu: bool = False):
        self.state = state
        self.gpu = gpu
        self.info = info
        self.buffers = buffers  # stage name -> ir.Buffer

    # -- expressions -----------------------------------------------------------------------
    def load(self, name: str, indices: tuple):
        """A read of stage `name` at global coordinates, as a Load of its buffer."""
        buf = self.buffers[name]
        info = self.info.get(name)
        if info is not None:
            indices = tuple(info.index(d, i) for d, i in enumerate(indices))
        return ir.Load(buf, indices)

    def lower_expr(self, e, values: dict):
        """Replace axes by their values and stage reads by buffer loads."""

        def fn(node):
            if isinstance(node, Read):
                return self.load(node.stage, tuple(lower(i) for i in node.indices))
            return None

        def lower(x):
            return transform(substitute(x, values), fn)

        return lower(e)

    # -- statements ------------------------------------------------------------------------
    def stage(self, name: str) -> ir.Stmt:
        st = self.state.stage(name)
        info = self.info[name]
        self._check_vector_loops(st)
        idx = tuple(info.index(d, info.values[a]) for d, a in enumerate(st.axes))
        buf = self.buffers[name]
        loops = list(range(len(st.loops)))
        if not isinstance(st.body, Reduce):
            store = ir.Store(buf, idx, self.lower_expr(st.body, info.values))
            return self.nest(st, info, loops, store, info.guards, info.vars)
        body = st.body
        if any(lp.reduce and lp.kind in ir.THREAD_TAGS for lp in st.loops):
            return self.cross_thread_reduction(st, info, buf, idx)
        update = ir.Store(
            buf, idx, combine(body.combiner, ir.Load(buf, idx), self.lower_expr(body.source, info.values))
        )
        first = next(n for n, lp in enumerate(st.loops) if lp.reduce)
        shared, rest = loops[:first], loops[first:]
        shared_vars = {info.vars[st.loops[p].name] for p in shared}
        outer_guards = [g for g in info.guards if not (_vars(g) - shared_vars - self._outside_vars(info))]
        inner_guards = [g for g in info.guards if g not in outer_guards]
        # the initialisation repeats the spatial loops inside the first reduction loop
        init_loops = [p for p in rest if not st.loops[p].reduce]
        fresh = {info.vars[st.loops[p].name]: Var(st.loops[p].name) for p in init_loops}
        init_vars = dict(info.vars)
        init_vars.update({st.loops[p].name: fresh[info.vars[st.loops[p].name]] for p in init_loops})
        init = ir.Store(buf, tuple(substitute(i, fresh) for i in idx), body.init)
        init_guards = [substitute(g, fresh) for g in inner_guards if not (_vars(g) & self._reduce_vars(st, info))]
        init_nest = self.nest(st, info, init_loops, init, init_guards, init_vars, attach=False, top=False)
        update_nest = self.nest(st, info, rest, update, inner_guards, info.vars, top=False)
        return self.nest(st, info, shared, ir.seq(init_nest, update_nest), outer_guards, info.vars)

    def cross_thread_reduction(self, st: Stage, info: StageInfo, buf: ir.Buffer, idx: tuple) -> ir.Stmt:
        """A reduction loop bound to threadIdx.x: the bound loop hoisted outside the other
        reduction loops, a partial result per thread, then a ThreadAllReduce that leaves the
        total in every thread (lowering/allreduce.py has the nest and how it is lowered)."""
        first = next(n for n, lp in enumerate(st.loops) if lp.reduce)
        if any(not lp.reduce for lp in st.loops[first:]):
            raise ScheduleError(
                f"{st.name} binds a reduction loop to threadIdx.x, so its spatial loops must all come before "
                "its reduction loops (each thread group reduces one element at a time); reorder them"
            )
        (tp,) = [n for n, lp in enumerate(st.loops) if lp.reduce and lp.kind in ir.THREAD_TAGS]
        red = [n for n in range(first, len(st.loops)) if n != tp]
        tx, extent = info.vars[st.loops[tp].name], info.extents[st.loops[tp].name]
        acc = ir.Buffer(f"{st.name}_red", (1,), buf.dtype, "local")
        zero = (Const(0, "int64"),)
        body = st.body
        update = ir.Store(
            acc, zero, combine(body.combiner, ir.Load(acc, zero), self.lower_expr(body.source, info.values))
        )
        spatial_vars = {info.vars[st.loops[p].name] for p in range(first)} | self._outside_vars(info)
        outer_guards = [g for g in info.guards if not (_vars(g) - spatial_vars)]
        inner_guards = [g for g in info.guards if g not in outer_guards]
        partial = self.nest(st, info, red, update, inner_guards, info.vars, top=False)
        result = ir.Store(buf, idx, ir.Load(acc, zero))
        if buf.scope != "local":  # one thread writes the total; a local result is every thread's own
            result = ir.IfThenElse(tx == 0, result)
        all_reduce = ThreadAllReduce(acc, body.combiner, body.init, tx, extent, st.name)
        before, after = self.attached(st, st.loops[tp].name)
        inner = ir.Allocate(acc, ir.seq(*before, ir.Store(acc, zero, body.init), partial, all_reduce, result, *after))
        return self.nest(
            st, info, list(range(first)), ir.For(tx, extent, st.loops[tp].kind, inner), outer_guards, info.vars
        )

    def nest(self, st: Stage, info: StageInfo, positions, inner, guards, vars_, attach=True, top=True):
        """Wrap `inner` in the loops at `positions` (outermost first), placing each guard just
        inside the innermost loop it mentions and attached stages at their loops."""
        level, skip = _levels(guards, st, positions, vars_), _levels(info.skips if attach else (), st, positions, vars_)
        stmt = inner
        for p in reversed(positions):
            stmt = _guard(stmt, level.get(p, []))
            if attach:
                before, after = self.attached(st, st.loops[p].name)
                stmt = _guard(ir.seq(*before, stmt, *after), skip.get(p, []))
            lp = st.loops[p]
            stmt = ir.For(vars_[lp.name], info.extents[lp.name], lp.kind, stmt, lp.prefetch)
            if attach:
                stmt = self._allocate_attached(st, lp.name, stmt)
        if top or None in level:
            stmt = _guard(stmt, level.get(None, []))
        return stmt

    def attached(self, st: Stage, loop: str) -> tuple:
        here = [s for s in self.state.attached_to(st.name) if s.attach.loop == loop]
        before = []
        for s in here:
            if not s.attach.reverse:
                before.extend(self._fill(s))
        after = [self.stage(s.name) for s in here if s.attach.reverse]
        return before, after

    def _fill(self, s: Stage) -> list:
        """A shared-memory tile is filled by all threads of the block together: wait until they
        are done with the previous tile before, and until the fill is complete after."""
        if self.gpu and s.scope == "shared":
            return [ir.Barrier(), self.stage(s.name), ir.Barrier()]
        return [self.stage(s.name)]

    def _allocate_attached(self, st: Stage, loop: str, for_stmt: ir.For) -> ir.Stmt:
        """Tiles computed inside the loop live for one iteration: allocate them in the body."""
        body = for_stmt.body
        for s in reversed(self.state.attached_to(st.name)):
            if s.attach.loop == loop and self.info[s.name].local:
                body = ir.Allocate(self.buffers[s.name], body)
        return replace(for_stmt, body=body)

    def _outside_vars(self, info: StageInfo) -> set:
        own = set(info.vars.values())
        out = set()
        for g in info.guards:
            out |= _vars(g) - own
        return out

    @staticmethod
    def _reduce_vars(st: Stage, info: StageInfo) -> set:
        return {info.vars[lp.name] for lp in st.loops if lp.reduce}

    def _check_vector_loops(self, st: Stage) -> None:
        for n, lp in enumerate(st.loops):
            if lp.kind != "vectorized":
                continue
            if n != len(st.loops) - 1:
                raise ScheduleError(
                    f"vectorized loop {lp.name} of {st.name} is not innermost: loop {st.loops[n + 1].name} "
                    "is inside it; reorder so that the vectorized loop comes last"
                )
            inside = [s.name for s in self.state.attached_to(st.name) if s.attach.loop == lp.name]
            if inside:
                raise ScheduleError(f"vectorized loop {lp.name} of {st.name} cannot contain stage {inside[0]}")


def _levels(guards, st: Stage, positions, vars_) -> dict:
    """{loop position (None: outside them all): the guards to place just inside that loop, the
    innermost one each mentions}."""
    level: dict = {}
    for g in guards:
        used = _vars(g)
        deepest = [p for p in positions if vars_[st.loops[p].name] in used]
        level.setdefault(max(deepest) if deepest else None, []).append(g)
    return level


def _vars(e) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}


def _guard(stmt: ir.Stmt, guards: list) -> ir.Stmt:
    if not guards:
        return stmt
    cond = guards[0]
    for g in guards[1:]:
        cond = logical("and", cond, g)
    return ir.IfThenElse(cond, stmt)
