"""rfactor: split a reduction into partial reductions (a new stage) and a final one.

The point is vector accumulators along a reduced axis: a vectorized loop must be spatial, and
rfactor turns part of a reduction axis into a spatial axis of a new stage, which can then be
vectorized like any other. The final stage reduces over that axis once (the horizontal step).
"""

from __future__ import annotations

from dataclasses import replace

from minitc.errors import ScheduleError
from minitc.expr import IterVar, binary, compare, const, logical, select, substitute
from minitc.schedule.state import Loop, Read, Split, Stage, State, derived_extents, initial_loops, unique_name
from minitc.te import Reduce


def rfactor(state: State, stage: str, loop: str) -> tuple[State, str]:
    """Compute the reduction of `stage` as partial results indexed by its reduction loop `loop`
    (a new stage `<stage>_rf`, whose last axis is `loop`), then reduce those over `loop`.

    Before: split(k, factor=8), rfactor(k_i)      After:
        for i in range(N):                            for i in range(N):
            y[i] = 0                                      for k_i in range(8):
            for k_o in range(K / 8):                          y_rf[i, k_i] = 0
                for k_i in range(8):                          for k_o in range(K / 8):
                    y[i] += x[i, k_o*8 + k_i]                     y_rf[i, k_i] += x[i, k_o*8 + k_i]
                                                      for i in range(N):
                                                          y[i] = 0
                                                          for k_i in range(8):
                                                              y[i] += y_rf[i, k_i]

    The rf stage's axes are the stage's spatial axes plus `loop`; it reduces over the other
    reduction loops (as fresh loops, unsplit). Where a split does not divide its axis, the rf
    stage updates only under `if k_o*8 + k_i < K:` (its `predicate`), so its partial results
    stay exact; with no reduction loop left, it stores `select(k_o*8 + k_i < K, x[...],
    identity)` instead.
    The stage keeps its spatial loops; its reduction loops become the single loop `loop`. The
    rf stage is computed where the stage is (at the root, or at its compute_at loop, just
    before it). Returns (state, rf stage name).
    """
    st = _reduction_stage(state, stage, loop)
    extents = _extents(st)
    leaves = [lp for lp in st.loops if lp.reduce]
    factor = IterVar(loop, extents[loop], "spatial")
    rest = tuple(IterVar(lp.name, extents[lp.name], "reduce") for lp in leaves if lp.name != loop)
    leaf_vars = {v.name: v for v in (factor, *rest)}
    values, guards = _reduce_values(st, extents, leaf_vars)
    axes = tuple(IterVar(a.name, a.extent, "spatial") for a in st.axes)
    mapping = dict(zip(st.axes, axes))
    mapping.update({a: values[a.name] for a in st.reduce_axes})
    if st.predicate is not None:  # an rf stage's own edge carries over
        guards.insert(0, substitute(st.predicate, mapping))
    cond = None
    for g in guards:
        cond = g if cond is None else logical("and", cond, g)
    red = st.body
    source = substitute(red.source, mapping)
    if rest:
        body = Reduce(red.combiner, source, rest, red.init)
    else:  # no reduction left: every element is stored, the identity past the edge
        body, cond = (source if cond is None else select(cond, source, red.init)), None
    name = unique_name(f"{stage}_rf", {s.name for s in state.stages})
    rf_axes = axes + (factor,)
    rf = Stage(
        name,
        st.shape + (factor.extent,),
        st.dtype,
        rf_axes,
        body,
        initial_loops(rf_axes, rest),
        attach=st.attach,
        tag="rfactor",
        predicate=cond,
    )
    final = _final_stage(st, name, loop, factor.extent)
    stages = []
    for s in state.stages:
        stages.extend((rf, final) if s.name == stage else (s,))
    return replace(state, stages=tuple(stages)), name


def _reduction_stage(state: State, stage: str, loop: str) -> Stage:
    st = state.stage(stage)
    if st.is_placeholder or st.inline or not isinstance(st.body, Reduce):
        what = "an input placeholder" if st.is_placeholder else "inlined" if st.inline else "not a reduction"
        raise ScheduleError(f"rfactor: {stage} is {what}; rfactor applies to a loop of a reduction stage")
    lp = st.loop(loop)
    if not lp.reduce:
        names = ", ".join(x.name for x in st.loops if x.reduce)
        raise ScheduleError(
            f"rfactor: loop {loop} of {stage} is a spatial loop; give one of its reduction loops ({names})"
        )
    if st.attach is not None and st.attach.reverse:
        raise ScheduleError(
            f"rfactor: {stage} was fused into {st.attach.target} with reverse_compute_at; rfactor first"
        )
    producers = [s.name for s in state.attached_to(stage) if not s.attach.reverse]
    if producers:
        raise ScheduleError(
            f"rfactor: {', '.join(producers)} is computed inside {stage}'s loops, but after rfactor the rf "
            f"stage reads it; rfactor {stage} before compute_at"
        )
    return st


def _extents(st: Stage) -> dict:
    """Exact extents of the reduction axes and the loops derived from them (as bound inference
    computes them: a factor larger than its axis is clipped to it)."""
    return derived_extents(st.relations, {a.name: a.extent for a in st.reduce_axes})


def _reduce_values(st: Stage, extents: dict, leaf_vars: dict) -> tuple[dict, list]:
    """The value of every reduction axis in terms of the leaf loops (`leaf_vars`), and the
    conditions that hold inside the axes (one per split that does not divide)."""
    value = dict(leaf_vars)
    guards = []
    for rel in reversed(st.relations):
        if isinstance(rel, Split):
            if rel.outer not in value:
                continue
            v = binary("add", binary("mul", value[rel.outer], const(extents[rel.inner])), value[rel.inner])
            value[rel.parent] = v
            if extents[rel.outer] * extents[rel.inner] != extents[rel.parent]:
                guards.append(compare("lt", v, const(extents[rel.parent])))
        elif rel.fused in value:
            value[rel.outer] = binary("floordiv", value[rel.fused], const(extents[rel.inner]))
            value[rel.inner] = binary("mod", value[rel.fused], const(extents[rel.inner]))
    return value, guards


def _final_stage(st: Stage, rf: str, loop: str, extent: int) -> Stage:
    """The stage reduced over the rf stage's last axis: its spatial loops (and relations)
    stay, its reduction loops become the one loop `loop`."""
    axis = IterVar(loop, extent, "reduce")
    body = Reduce(st.body.combiner, Read(rf, st.axes + (axis,), st.dtype), (axis,), st.body.init)
    spatial = _spatial_names(st)
    loops, placed = [], False
    for lp in st.loops:
        if not lp.reduce:
            loops.append(lp)
        elif not placed:
            loops.append(Loop(loop, extent, "serial", True))
            placed = True
    relations = tuple(r for r in st.relations if (r.parent if isinstance(r, Split) else r.outer) in spatial)
    return replace(st, body=body, loops=tuple(loops), relations=relations, predicate=None)


def _spatial_names(st: Stage) -> set:
    names = {a.name for a in st.axes}
    for rel in st.relations:
        if isinstance(rel, Split) and rel.parent in names:
            names |= {rel.outer, rel.inner}
        elif not isinstance(rel, Split) and rel.outer in names:
            names.add(rel.fused)
    return names
