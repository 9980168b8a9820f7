"""Schedule state: the computation graph as named stages, each with its loop structure.

A schedule never edits loop-nest IR directly. Like Halide and TVM's tensor-expression schedules,
it records per stage *how* to iterate (leaf loops in order, the splits and fuses that derive
them from the stage's axes, loop kinds) and *where* (at the root, inside another stage's loop, or
inlined). Lowering turns the state into IR, inferring how much of each stage every attach point
needs. All objects here are immutable; primitives return new states.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from minitc.errors import ScheduleError
from minitc.expr import Expr, IterVar, substitute, transform, walk
from minitc.te import ComputeOp, Reduce, Tensor, TensorRead, graph


class Read(Expr):
    """`stage[indices]`: a read of another stage's element, by stage name."""

    __slots__ = ("stage", "indices")

    def __init__(self, stage: str, indices: tuple, dtype: str):
        self.stage, self.indices, self.dtype = stage, tuple(indices), dtype

    def children(self):
        return self.indices

    def rebuild(self, kids):
        return Read(self.stage, kids, self.dtype)


@dataclass(frozen=True)
class Loop:
    name: str
    extent: int  # nominal: from the full shape; lowering recomputes it from the inferred region
    kind: str = "serial"
    reduce: bool = False
    prefetch: tuple = ()  # ir.PrefetchRequests of the `prefetch` step; lowering copies them to the For


@dataclass(frozen=True)
class Split:
    parent: str
    outer: str
    inner: str
    factor: int  # the inner extent, or the outer one when `nparts`
    nparts: bool = False


@dataclass(frozen=True)
class Fuse:
    outer: str
    inner: str
    fused: str


def derived_extents(relations, extents: dict) -> dict:
    """`extents` (loop name -> extent) with the extents of the loops that `relations` derive
    from those loops added, as lowering computes them: a split factor larger than its loop is
    clipped to it. Relations of loops `extents` does not name are skipped."""
    ext = dict(extents)
    for rel in relations:
        if isinstance(rel, Split):
            if rel.parent not in ext:
                continue
            parent = ext[rel.parent]
            if rel.nparts:
                outer = min(rel.factor, parent)
                inner = -(-parent // outer)
            else:
                inner = min(rel.factor, parent)
                outer = -(-parent // inner)
            ext[rel.outer], ext[rel.inner] = outer, inner
        elif rel.outer in ext:
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    return ext


@dataclass(frozen=True)
class Attach:
    """Where a stage's loop nest goes: inside loop `loop` of stage `target`."""

    target: str
    loop: str
    reverse: bool = False  # reverse_compute_at: the stage consumes the target


@dataclass(frozen=True)
class Stage:
    name: str
    shape: tuple
    dtype: str
    axes: tuple = ()  # spatial IterVars, one per dimension
    body: Expr | None = None  # None for placeholders; a Reduce at the top for reductions
    loops: tuple = ()  # leaf loops, outermost first
    relations: tuple = ()  # Split/Fuse steps deriving the leaf loops from the axes
    attach: Attach | None = None
    inline: bool = False
    scope: str = "global"
    output: bool = False
    tag: str = ""  # operator family from tc.compute(tag=...), for templates and design spaces
    # rfactor stages: the reduction updates only where this condition on the axes holds (the
    # iterations past the edge of a split reduction axis are skipped; lowering adds it as a guard)
    predicate: Expr | None = None
    # dynamic shapes: ((dim, slot), ...): dimension `dim` has extents[slot] valid elements at
    # run time, the rest is padding that need not be computed (minitc/lowering/limits.py)
    limits: tuple = ()

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    @property
    def reduce_axes(self) -> tuple:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def all_axes(self) -> tuple:
        return self.axes + self.reduce_axes

    def loop(self, name: str) -> Loop:
        for lp in self.loops:
            if lp.name == name:
                return lp
        raise ScheduleError(
            f"stage {self.name} has no loop {name!r} (its loops: {', '.join(lp.name for lp in self.loops)})"
        )

    def position(self, name: str) -> int:
        for n, lp in enumerate(self.loops):
            if lp.name == name:
                return n
        raise ScheduleError(
            f"stage {self.name} has no loop {name!r} (its loops: {', '.join(lp.name for lp in self.loops)})"
        )

    def reads(self) -> list:
        """The Read nodes of the body, in order."""
        if self.body is None:
            return []

        return [n for n in walk(self.body) if isinstance(n, Read)]

    def read_stages(self) -> list:
        seen = []
        for r in self.reads():
            if r.stage not in seen:
                seen.append(r.stage)
        return seen


@dataclass(frozen=True)
class State:
    stages: tuple  # producers before consumers
    outputs: tuple  # stage names

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ScheduleError(
            f"no stage named {name!r} in this schedule (stages: {', '.join(s.name for s in self.stages)})"
        )

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.stages)

    def replace_stage(self, stage: Stage) -> State:
        return replace(self, stages=tuple(stage if s.name == stage.name else s for s in self.stages))

    def consumers(self, name: str) -> list:
        return [s for s in self.stages if name in s.read_stages()]

    def attached_to(self, name: str) -> list:
        return [s for s in self.stages if s.attach is not None and s.attach.target == name]


@dataclass(frozen=True)
class LoopRef:
    """A handle to one loop of one stage, as returned by `Schedule.loops` and the primitives."""

    stage: str
    name: str
    schedule: int | None = field(default=None, compare=False)  # the Schedule that made it (its id)

    def __repr__(self):
        return f"<loop {self.stage}.{self.name}>"


def initial_loops(axes: tuple, reduce_axes: tuple) -> tuple:
    return tuple(Loop(a.name, a.extent, "serial", False) for a in axes) + tuple(
        Loop(a.name, a.extent, "serial", True) for a in reduce_axes
    )


def unique_name(base: str, taken) -> str:
    if base not in taken:
        return base
    n = 1
    while f"{base}{n}" in taken:
        n += 1
    return f"{base}{n}"


def _fresh_axes(axes: tuple, taken: set) -> tuple:
    """Copies of the axes whose names are unique within the stage."""
    out = []
    for a in axes:
        name = unique_name(a.name, taken)
        taken.add(name)
        out.append(IterVar(name, a.extent, a.kind))
    return tuple(out)


def from_tensors(outputs: list) -> tuple[State, dict]:
    """Build the initial state of a schedule; also return the map tensor -> stage name."""
    tensors = graph(outputs)
    names = _stage_names(tensors)
    out_set = set(outputs)
    stages = []
    for t in tensors:
        if not isinstance(t.op, ComputeOp):
            cold = getattr(t.op, "constant", False)
            stages.append(Stage(names[t], t.shape, t.dtype, tag="constant" if cold else ""))
            continue
        if t.dtype == "bool":
            raise ScheduleError(f"compute {t.name} produces booleans; cast the condition to int32 or float32")
        axis_names: set = set()
        axes = _fresh_axes(t.op.axes, axis_names)
        raxes = _fresh_axes(t.op.reduce_axes, axis_names)
        mapping = dict(zip(t.op.axes + t.op.reduce_axes, axes + raxes))
        body = _convert_body(t.op.body, mapping, names)
        stages.append(
            Stage(names[t], t.shape, t.dtype, axes, body, initial_loops(axes, raxes), output=t in out_set, tag=t.op.tag)
        )
        if t.limits:
            stages[-1] = replace(stages[-1], limits=tuple(sorted(t.limits.items())))
    return State(tuple(stages), tuple(names[o] for o in outputs)), names


def _stage_names(tensors: list) -> dict:
    """Map each tensor to its stage name: its own name, or `T_1`, `T_2`, ... for every one of
    several tensors named T, so that no stage answers to a name that means more than one tensor."""
    counts = Counter(t.name for t in tensors)
    taken = {name for name, c in counts.items() if c == 1}
    names: dict = {}
    for t in tensors:
        if counts[t.name] == 1:
            names[t] = t.name
            continue
        n = 1
        while f"{t.name}_{n}" in taken:
            n += 1
        names[t] = f"{t.name}_{n}"
        taken.add(names[t])
    return names


def _convert_body(body: Expr, mapping: dict, names: dict) -> Expr:
    def fn(node):
        if isinstance(node, TensorRead):
            idx = tuple(_convert_body(i, mapping, names) for i in node.indices)
            return Read(names[node.tensor], idx, node.tensor.dtype)
        if isinstance(node, Reduce):
            src = _convert_body(node.source, mapping, names)
            return Reduce(node.combiner, src, tuple(mapping[a] for a in node.axes), node.init)
        return None

    return substitute(transform(body, fn), mapping)


def stage_tensor(stage: Stage) -> Tensor:
    """A Tensor handle for a stage created by the schedule (cache_read / cache_write)."""
    return Tensor(stage.shape, stage.dtype, stage.name, None)
