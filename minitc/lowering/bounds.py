"""Bound inference: for every stage, which region of it each execution of its loop nest computes,
the loop extents that follow, and the value of every axis in terms of the loop variables.

A stage at the root computes its whole shape. A stage attached with compute_at computes the
union of what its consumers read during one iteration of the attach loop (a conservative
superset is always correct); on a GPU, a shared-memory stage computes what the whole block
reads, so its region also spans the thread-bound loops around the attach loop. A stage
attached with reverse_compute_at computes exactly the tile its producer has just finished
(that must be exact, so it is checked to be a box).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minitc.arith import bounds, simplify
from minitc.errors import ScheduleError
from minitc.expr import Const, Expr, Var, binary, compare, const, substitute
from minitc.ir import THREAD_TAGS
from minitc.lowering.intervals import exact_box, interval, union
from minitc.schedule.stages import axis_map
from minitc.schedule.state import Split, Stage, State, derived_extents


@dataclass
class StageInfo:
    stage: Stage
    region: list = field(default_factory=list)  # per spatial dim: (min expr, extent)
    extents: dict = field(default_factory=dict)  # loop/axis name -> extent
    vars: dict = field(default_factory=dict)  # leaf loop name -> Var
    values: dict = field(default_factory=dict)  # axis IterVar -> global value expression
    guards: list = field(default_factory=list)  # bool expressions over the loop variables
    # guards that skip whole iterations of a loop, with the stages attached in it (lowering/limits.py)
    skips: list = field(default_factory=list)
    local: bool = False  # stored in a region-sized buffer indexed relative to the region
    producer_region: list = field(default_factory=list)  # reverse_compute_at: (axis, offset, region)

    def index(self, dim: int, value: Expr) -> Expr:
        """The buffer index of global coordinate `value` along `dim`."""
        return simplify(binary("sub", value, self.region[dim][0])) if self.local else value


class BoundInference:
    def __init__(self, state: State, gpu: bool = False):
        self.state = state
        self.gpu = gpu
        self.info: dict = {}
        self.ranges: dict = {}  # every loop Var -> (0, extent - 1)

    def run(self) -> dict:
        for name in self._order():
            self._infer(self.state.stage(name))
        return self.info

    def _order(self) -> list:
        """Stages in an order where each one's region inputs are known: a compute_at stage after
        its consumers, a reverse_compute_at stage after its producer."""
        compute = [s for s in self.state.stages if not s.is_placeholder]
        deps = {}
        for s in compute:
            if s.attach is None:
                deps[s.name] = set()
            elif s.attach.reverse:
                deps[s.name] = {s.attach.target}
            else:
                deps[s.name] = {c.name for c in self.state.consumers(s.name)}
        done, order = set(), []
        while len(order) < len(compute):
            ready = [s.name for s in compute if s.name not in done and deps[s.name] <= done]
            if not ready:
                stuck = ", ".join(s.name for s in compute if s.name not in done)
                raise ScheduleError(f"cannot infer bounds: the attachments of {stuck} depend on each other")
            for name in ready:
                done.add(name)
                order.append(name)
        return order

    # -- regions ---------------------------------------------------------------------------
    def _infer(self, st: Stage) -> None:
        info = StageInfo(st)
        full = [(const(0), n) for n in st.shape]
        if st.attach is None:
            info.region = full
        elif st.attach.reverse:
            info.region = self._reverse_region(st, info)
        else:
            info.region = self._compute_at_region(st)
            info.local = not st.output
        self._derive_loops(st, info)
        self._domain_guards(st, info)
        self.info[st.name] = info

    def inside_vars(self, target: str, loop: str) -> dict:
        """Variables of all loops strictly inside `loop` of `target` (including the loops of
        stages attached there), with their extents."""
        st = self.state.stage(target)
        pos = st.position(loop)
        out = {}
        tinfo = self.info.get(target)
        if tinfo is not None:
            for lp in st.loops[pos + 1 :]:
                out[tinfo.vars[lp.name]] = tinfo.extents[lp.name]
        for s in self.state.attached_to(target):
            if st.position(s.attach.loop) >= pos:
                out.update(self._subtree_vars(s.name))
        return out

    def thread_vars_around(self, target: str, loop: str) -> dict:
        """The thread-bound loops enclosing `loop` of `target` (itself included), up through the
        stages `target` is attached to, with their extents."""
        out = {}
        name = target
        while True:
            st, info = self.state.stage(name), self.info[name]
            for lp in st.loops[: st.position(loop) + 1]:
                if lp.kind in THREAD_TAGS:
                    out[info.vars[lp.name]] = info.extents[lp.name]
            if st.attach is None:
                return out
            name, loop = st.attach.target, st.attach.loop

    def _subtree_vars(self, name: str) -> dict:
        out = {}
        info = self.info.get(name)
        if info is not None:
            out.update({v: info.extents[n] for n, v in info.vars.items()})
        for s in self.state.attached_to(name):
            out.update(self._subtree_vars(s.name))
        return out

    def _compute_at_region(self, st: Stage) -> list:
        target, loop = st.attach.target, st.attach.loop
        self._check_consumers_inside(st)
        varying = self.inside_vars(target, loop)
        if self.gpu and st.scope == "shared":
            varying.update(self.thread_vars_around(target, loop))
        per_dim = [[] for _ in st.shape]
        for consumer in self.state.consumers(st.name):
            cinfo = self.info[consumer.name]
            for r in consumer.reads():
                if r.stage != st.name:
                    continue
                for d, index in enumerate(r.indices):
                    per_dim[d].append(interval(substitute(index, cinfo.values), varying))
        region = []
        for d, n in enumerate(st.shape):
            parts = per_dim[d]
            merged = union(parts) if parts and all(p is not None for p in parts) else None
            if merged is None or merged[1] + 1 >= n:
                region.append((const(0), n))
            else:
                region.append((merged[0], merged[1] + 1))
        return region

    def _check_consumers_inside(self, st: Stage) -> None:
        target, loop = st.attach.target, st.attach.loop
        pos = self.state.stage(target).position(loop)
        for consumer in self.state.consumers(st.name):
            node = consumer
            inside = node.name == target
            while not inside and node.attach is not None:
                if node.attach.target == target:
                    inside = self.state.stage(target).position(node.attach.loop) >= pos
                    break
                node = self.state.stage(node.attach.target)
            if not inside:
                raise ScheduleError(
                    f"compute_at: {st.name} is computed inside loop {loop} of {target}, but its consumer "
                    f"{consumer.name} runs outside that loop and would read only the last tile; attach "
                    f"{consumer.name} inside the loop too, or compute {st.name} at a loop enclosing both"
                )

    def _reverse_region(self, st: Stage, info: StageInfo) -> list:
        target, loop = st.attach.target, st.attach.loop
        tst = self.state.stage(target)
        tinfo = self.info[target]
        self._check_producers_before(st)
        varying = self.inside_vars(target, loop)
        box = exact_box([tinfo.values[a] for a in tst.axes], varying)
        if box is None:
            raise ScheduleError(
                f"reverse_compute_at: the elements of {target} produced in one iteration of loop {loop} "
                "do not form a box (fused or reordered sub-loops); attach at another loop"
            )
        region = [(const(0), n) for n in st.shape]
        for d, (axis, offset) in enumerate(axis_map(st, target)):
            lo, ext = box[d]
            dim = st.axes.index(axis)
            region[dim] = (simplify(binary("sub", lo, const(offset))), ext)
            # compute only the part of the box the producer really computed (its region)
            info.producer_region.append((axis, offset, tinfo.region[d]))
        return region

    def _check_producers_before(self, st: Stage) -> None:
        """A fused epilogue runs inside its producer's nest, so everything else it reads must be
        complete by the time that nest starts."""
        order = [s.name for s in self.state.stages]
        root = self._root_of(st.attach.target)
        for name in st.read_stages():
            if name == st.attach.target or self.state.stage(name).is_placeholder:
                continue
            if order.index(self._root_of(name)) >= order.index(root):
                raise ScheduleError(
                    f"reverse_compute_at: {st.name} also reads {name}, which is not complete before "
                    f"{st.attach.target}'s loops run; it cannot be fused there"
                )

    def _root_of(self, name: str) -> str:
        st = self.state.stage(name)
        while st.attach is not None:
            st = self.state.stage(st.attach.target)
        return st.name

    # -- loops -----------------------------------------------------------------------------
    def _derive_loops(self, st: Stage, info: StageInfo) -> None:
        ext = {a.name: info.region[d][1] for d, a in enumerate(st.axes)}
        ext.update({a.name: a.extent for a in st.reduce_axes})
        ext = info.extents = derived_extents(st.relations, ext)
        value = {}
        for lp in st.loops:
            var = Var(lp.name)
            info.vars[lp.name] = var
            value[lp.name] = var
            self.ranges[var] = (0, ext[lp.name] - 1)
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                v = binary("add", binary("mul", value[rel.outer], const(ext[rel.inner])), value[rel.inner])
                value[rel.parent] = v
                if ext[rel.outer] * ext[rel.inner] != ext[rel.parent]:
                    info.guards.append(compare("lt", v, const(ext[rel.parent])))
            else:
                value[rel.outer] = binary("floordiv", value[rel.fused], const(ext[rel.inner]))
                value[rel.inner] = binary("mod", value[rel.fused], const(ext[rel.inner]))
        for d, a in enumerate(st.axes):
            local = simplify(value[a.name])
            info.values[a] = simplify(binary("add", info.region[d][0], local))
        for a in st.reduce_axes:
            info.values[a] = simplify(value[a.name])
        if st.predicate is not None:  # rfactor: skip the updates past the edge of the axis
            info.guards.append(substitute(st.predicate, info.values))
        for axis, offset, (t_lo, t_ext) in info.producer_region:
            v = binary("sub", info.values[axis], const(offset))
            info.guards.append(compare("ge", v, t_lo))
            info.guards.append(compare("lt", v, binary("add", t_lo, const(t_ext))))

    def _domain_guards(self, st: Stage, info: StageInfo) -> None:
        """A region may stick out of the stage's shape (a tile at the edge, padding reads);
        guard the points outside unless the bounds prove there are none."""
        for d, a in enumerate(st.axes):
            lo, ext = info.region[d]
            if isinstance(lo, Const) and lo.value == 0 and ext <= st.shape[d]:
                continue
            b = bounds(lo, self.ranges)
            v = info.values[a]
            if b is None or b[0] < 0:
                info.guards.append(compare("ge", v, const(0)))
            if b is None or b[1] + ext > st.shape[d]:
                info.guards.append(compare("lt", v, const(st.shape[d])))
