"""Dynamic shapes: skip the tiles that lie past a dimension's run-time extent.

A model compiled for a range of sequence lengths runs its kernels on buffers padded to the
largest length of a bucket (minitc/frontend/dynamic.py). A dimension with a *limit* holds only
`extents[slot]` valid elements at run time, where `extents` is one more kernel input (int64).
The padding past them feeds nothing valid: the graph masks what reduces over it. So for each
stage that computes a limited axis whole (at the root, or attached inside a loop of another
axis), tiled by an outer serial or parallel loop, lowering adds a guard that skips the tiles
holding only padding:

    for i_o in parallel(86):                    # 512 rows in tiles of 6
        if i_o < (extents[0] + 5) // 6:         # only the tiles that hold valid rows
            ...

The LLVM backend divides such a parallel loop among the threads by the guard's bound (the
valid tiles), not by its extent. Rows of the last tile past the extent are computed anyway.
Everything else about the kernel is static: shapes, strides, tiles.

Limits are given on a kernel's output tensor (`Tensor.limits`) and flow back to a producer
stage when every reader indexes that dimension with a limited axis of its own (a stage that
some reader reduces over is computed whole).
"""

from __future__ import annotations

from minitc import ir
from minitc.expr import Const, IterVar, binary, compare, const
from minitc.schedule.state import Fuse, Split, State

EXTENTS = "dyn_extents"  # the name of the kernel's extents buffer


def stage_limits(state: State) -> dict:
    """{stage name: {dim: slot}} for every stage, the given limits plus those that flow back."""
    limits = {s.name: dict(s.limits) for s in state.stages}
    readers: dict = {}
    for st in state.stages:
        for r in st.reads():
            readers.setdefault(r.stage, []).append((st, r))
    for st in reversed(state.stages):  # consumers first
        if st.is_placeholder or st.limits or st.name not in readers:
            continue
        agreed = None
        for consumer, r in readers[st.name]:
            theirs = limits[consumer.name]
            mine = {}
            for d, index in enumerate(r.indices):
                if isinstance(index, IterVar) and index in consumer.axes:
                    slot = theirs.get(consumer.axes.index(index))
                    if slot is not None:
                        mine[d] = slot
            agreed = mine if agreed is None else {d: s for d, s in agreed.items() if mine.get(d) == s}
        limits[st.name] = agreed or {}
    return limits


def slots(state: State) -> int:
    """How many run-time extents the kernel of `state` reads (0: a static kernel)."""
    used = [slot for st in state.stages for _, slot in st.limits]
    return max(used) + 1 if used else 0


def trip_guards(st, info, limits: dict, extents: ir.Buffer) -> list:
    """The guards that skip the tiles of stage `st` past its limited dimensions, along those it
    computes whole (a stage at the root; one attached inside a loop of another dimension)."""
    leaves = {lp.name: lp for lp in st.loops}
    guards = []
    for dim, slot in sorted(limits.items()):
        lo, extent = info.region[dim]
        if not (isinstance(lo, Const) and lo.value == 0 and extent == st.shape[dim]):
            continue
        name, bound = st.axes[dim].name, ir.Load(extents, (const(slot),))
        while name not in leaves:  # follow the loop that carries the axis's outermost part
            rel = next((r for r in st.relations if name in _sources(r)), None)
            if isinstance(rel, Split):  # parent = outer * inner_extent + inner
                step = info.extents[rel.inner]
                bound = binary("floordiv", binary("add", bound, const(step - 1)), const(step))
                name = rel.outer
            elif isinstance(rel, Fuse) and rel.outer == name:  # fused = outer * inner_extent + inner
                bound = binary("mul", bound, const(info.extents[rel.inner]))
                name = rel.fused
            elif isinstance(rel, Fuse) and info.extents[rel.outer] == 1:  # fused = inner
                name = rel.fused
            elif isinstance(rel, Fuse) and rel.fused in leaves:  # fused = outer * inner_extent + inner
                value = binary("mod", info.vars[rel.fused], const(info.extents[rel.inner]))
                if leaves[rel.fused].kind in ("serial", "parallel"):
                    guards.append(compare("lt", value, bound))  # the heads x row tiles of attention
                name = None
                break
            else:
                break
        loop = leaves.get(name)
        if loop is not None and loop.kind in ("serial", "parallel") and info.extents[name] > 1:
            guards.append(compare("lt", info.vars[name], bound))
    return guards


def _sources(rel) -> tuple:
    return (rel.parent,) if isinstance(rel, Split) else (rel.outer, rel.inner)
