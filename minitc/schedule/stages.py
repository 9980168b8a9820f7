"""Stage primitives: where a stage is computed (compute_at, reverse_compute_at, compute_inline)
and the caching stages (cache_write, cache_read).

Each is a pure function on the schedule state. Rules that depend on the final schedule (every
consumer inside the attach loop, vectorized loops innermost, ...) are checked again by lowering.
"""

from __future__ import annotations

from dataclasses import replace

from minitc.arith import affine
from minitc.errors import ScheduleError
from minitc.expr import IterVar, transform
from minitc.schedule.state import Attach, Read, Stage, State, initial_loops, unique_name
from minitc.te import Reduce

SCOPES = ("global", "local", "shared")


def _compute_stage(state: State, name: str, primitive: str) -> Stage:
    st = state.stage(name)
    if st.is_placeholder:
        raise ScheduleError(f"{primitive}: {name} is an input placeholder; it has no computation to move")
    if st.inline:
        raise ScheduleError(f"{primitive}: {name} was inlined with compute_inline; it has no loops any more")
    return st


def depends_on(state: State, consumer: str, producer: str) -> bool:
    """True if `consumer` reads `producer`, directly or through other stages."""
    todo, seen = [consumer], set()
    while todo:
        name = todo.pop()
        for r in state.stage(name).read_stages():
            if r == producer:
                return True
            if r not in seen:
                seen.add(r)
                todo.append(r)
    return False


def _is_inside(state: State, stage: str, ancestor: str) -> bool:
    """True if `stage` is attached, directly or transitively, under `ancestor`."""
    st = state.stage(stage)
    while st.attach is not None:
        if st.attach.target == ancestor:
            return True
        st = state.stage(st.attach.target)
    return False


def _check_target(state: State, stage: str, target: str, loop: str, primitive: str):
    tgt = _compute_stage(state, target, primitive)
    if target == stage:
        raise ScheduleError(f"{primitive}: cannot attach {stage} to its own loop {loop}")
    if _is_inside(state, target, stage):
        raise ScheduleError(f"{primitive}: {target} is itself computed inside {stage}; attaching would form a cycle")
    lp = tgt.loop(loop)
    if lp.kind == "vectorized":
        raise ScheduleError(f"{primitive}: loop {loop} of {target} is vectorized; nothing can be computed inside it")
    return tgt


def compute_at(state: State, stage: str, target: str, loop: str) -> State:
    """Compute a producer inside a loop of one of its consumers, just the part that one
    iteration of the loop reads.

    Before: compute_at(P, C.i)               After:
        for i in range(N):                       for i in range(N):
            for j in range(M):                       for j in range(M):     # P's region for this i
                P[i, j] = f(i, j)                        P_tile[j] = f(i, j)
        for i in range(N):                           for j in range(M):
            for j in range(M):                           C[i, j] = g(P_tile[j])
                C[i, j] = g(P[i, j])
    """
    st = _compute_stage(state, stage, "compute_at")
    if st.output:
        raise ScheduleError(f"compute_at: {stage} is an output of the schedule; attach its producers to it instead")
    _check_target(state, stage, target, loop, "compute_at")
    if not depends_on(state, target, stage):
        raise ScheduleError(
            f"compute_at: {target} does not read {stage}, so {stage} cannot be computed inside its loop {loop}"
        )
    return state.replace_stage(replace(st, attach=Attach(target, loop), inline=False))


def reverse_compute_at(state: State, stage: str, target: str, loop: str) -> State:
    """Compute a consumer inside a loop of its producer, right after each tile of the producer
    is complete (epilogue fusion).

    Before: reverse_compute_at(R, C.i)        After:
        for i in range(N):                        for i in range(N):
            for j in range(M):                        for j in range(M):
                C[i, j] = ...                             C[i, j] = ...
        for i in range(N):                            for j in range(M):
            for j in range(M):                            R[i, j] = relu(C[i, j])
                R[i, j] = relu(C[i, j])

    The consumer must read the producer at its own axes plus constants (an elementwise epilogue);
    the loop must enclose all of the producer's reduction loops, so each tile is complete.
    """
    st = _compute_stage(state, stage, "reverse_compute_at")
    tgt = _check_target(state, stage, target, loop, "reverse_compute_at")
    if target not in st.read_stages():
        raise ScheduleError(f"reverse_compute_at: {stage} does not read {target}")
    for d, (axis, offset) in enumerate(axis_map(st, target)):
        extent = st.shape[st.axes.index(axis)]
        if offset != 0 or extent != tgt.shape[d]:
            raise ScheduleError(
                f"reverse_compute_at: {stage} reads {target} shifted or over a different range along axis "
                f"{axis.name} (offset {offset}, extents {extent} vs {tgt.shape[d]}), so some of its elements "
                f"would never be computed inside {target}'s loops; compute {target} at {stage}'s loop instead"
            )
    check_complete_tile(tgt, loop, stage)
    return state.replace_stage(replace(st, attach=Attach(target, loop, reverse=True), inline=False))


def axis_map(consumer: Stage, producer: str) -> list:
    """For an epilogue `consumer`, the pair (consumer axis, offset) that each dimension of its
    reads of `producer` uses; raise ScheduleError if a read is not of that form."""
    mapping = None
    for r in consumer.reads():
        if r.stage != producer:
            continue
        dims = []
        for d, index in enumerate(r.indices):
            form = affine(index, atoms=False)
            axes = [v for v in (form.coef if form else {}) if v in consumer.axes]
            if form is None or len(form.coef) != 1 or len(axes) != 1 or form.coef[axes[0]] != 1:
                raise ScheduleError(
                    f"reverse_compute_at: {consumer.name} reads {producer} with index {d} not of the form "
                    "axis + constant; only elementwise consumers can be fused into the producer's loops"
                )
            dims.append((axes[0], form.offset))
        if mapping is not None and mapping != dims:
            raise ScheduleError(
                f"reverse_compute_at: {consumer.name} reads {producer} at two different places; an element "
                "it needs could belong to a tile that is not computed yet"
            )
        if len({a for a, _ in dims}) != len(dims):
            raise ScheduleError(f"reverse_compute_at: {consumer.name} uses one axis for two dimensions of {producer}")
        mapping = dims
    return mapping or []


def check_complete_tile(producer: Stage, loop: str, consumer: str) -> None:
    pos = producer.position(loop)
    for lp in producer.loops[: pos + 1]:
        if lp.reduce:
            raise ScheduleError(
                f"reverse_compute_at: loop {loop} of {producer.name} is inside its reduction loop {lp.name}, "
                f"so {consumer} would read partial sums; attach it at a loop outside the reduction"
            )


def compute_inline(state: State, stage: str) -> State:
    """Substitute an elementwise stage into its consumers; it gets no loops or buffer.

    Before: compute_inline(B)                After:
        for i in range(N):                       for i in range(N):
            B[i] = A[i] * 2                          C[i] = A[i] * 2 + 1
        for i in range(N):
            C[i] = B[i] + 1
    """
    st = _compute_stage(state, stage, "compute_inline")
    if st.reduce_axes:
        raise ScheduleError(f"compute_inline: {stage} is a reduction; only elementwise stages can be inlined")
    if st.output:
        raise ScheduleError(f"compute_inline: {stage} is an output of the schedule and must be stored")
    attached = state.attached_to(stage)
    if attached:
        raise ScheduleError(
            f"compute_inline: {', '.join(s.name for s in attached)} is computed inside {stage}'s loops; move it first"
        )
    return state.replace_stage(replace(st, inline=True, attach=None))


def cache_write(state: State, stage: str, scope: str = "local", layout: tuple | None = None) -> tuple[State, str]:
    """Compute a stage into a cache stage, then copy the result out. With compute_at, the cache
    becomes a small accumulator tile kept in registers or L1. `layout` (a permutation of the
    dimensions) stores the cache transposed: (0, 2, 1) keeps C_local[i, k, j] for C[i, j, k], so
    that vectors along k are contiguous in the tile while C stays as it is.

    Before: cache_write(C, "local")          After:
        for i, j:                                for i, j:
            C[i, j] = sum_k A[i, k] B[k, j]          C_local[i, j] = sum_k A[i, k] B[k, j]
                                                 for i, j:
                                                     C[i, j] = C_local[i, j]
    Must come before other primitives on the stage. Returns (state, cache stage name).
    """
    st = _compute_stage(state, stage, "cache_write")
    _check_scope(scope, "cache_write")
    untouched = initial_loops(st.axes, st.reduce_axes)
    if st.relations or st.loops != untouched or st.attach is not None or state.attached_to(stage):
        raise ScheduleError(f"cache_write on {stage} must come before any other primitive on {stage}")
    ndim = len(st.shape)
    layout = tuple(range(ndim)) if layout is None else tuple(layout)
    if sorted(layout) != list(range(ndim)):
        raise ScheduleError(f"cache_write of {stage}: layout {layout} is not a permutation of its {ndim} dimensions")
    taken = {s.name for s in state.stages}
    name = unique_name(f"{stage}_{scope}", taken)
    cache_axes = tuple(st.axes[p] for p in layout)
    cache = replace(
        st,
        name=name,
        shape=tuple(st.shape[p] for p in layout),
        axes=cache_axes,
        loops=initial_loops(cache_axes, st.reduce_axes),
        scope=scope,
        output=False,
        attach=None,
    )
    axes = tuple(IterVar(a.name, a.extent, "spatial") for a in st.axes)
    copy = replace(
        st,
        axes=axes,
        body=Read(name, tuple(axes[p] for p in layout), st.dtype),
        loops=initial_loops(axes, ()),
        relations=(),
        predicate=None,
    )
    stages = []
    for s in state.stages:
        stages.extend((cache, copy) if s.name == stage else (s,))
    return replace(state, stages=tuple(stages)), name


def cache_read(state: State, stage: str, scope: str, readers: tuple, layout: tuple | None = None) -> tuple[State, str]:
    """Copy a tensor into a cache stage that the given readers read instead. With compute_at,
    each tile of the input is packed into a small contiguous buffer; `layout` (a permutation of
    the dimensions) also re-lays it out, e.g. (1, 0) stores the transpose.

    Before: cache_read(B, "local", [C])       After:
                                                  for k, j:
                                                      B_local[k, j] = B[k, j]
        for i, j, k:                              for i, j, k:
            C[i, j] += A[i, k] * B[k, j]              C[i, j] += A[i, k] * B_local[k, j]
    Returns (state, cache stage name).
    """
    src = state.stage(stage)
    if src.inline:
        raise ScheduleError(f"cache_read: {stage} was inlined; it has no buffer to read from")
    _check_scope(scope, "cache_read")
    if not readers:
        raise ScheduleError(f"cache_read of {stage}: give at least one reader stage")
    for r in readers:
        if stage not in state.stage(r).read_stages():
            raise ScheduleError(f"cache_read: {r} does not read {stage}")
    ndim = len(src.shape)
    layout = tuple(range(ndim)) if layout is None else tuple(layout)
    if sorted(layout) != list(range(ndim)):
        raise ScheduleError(f"cache_read of {stage}: layout {layout} is not a permutation of its {ndim} dimensions")
    taken = {s.name for s in state.stages}
    name = unique_name(f"{stage}_{scope}", taken)
    shape = tuple(src.shape[p] for p in layout)
    axes = tuple(IterVar(f"ax{d}", n, "spatial") for d, n in enumerate(shape))
    src_index = [None] * ndim
    for d, p in enumerate(layout):
        src_index[p] = axes[d]
    body = Read(stage, tuple(src_index), src.dtype)
    cache = Stage(name, shape, src.dtype, axes, body, initial_loops(axes, ()), scope=scope)

    def redirect(node):
        if isinstance(node, Read) and node.stage == stage:
            idx = tuple(transform(i, redirect) for i in node.indices)
            return Read(name, tuple(idx[p] for p in layout), node.dtype)
        return None

    stages = []
    for s in state.stages:
        if s.name in readers:
            s = replace(s, body=_map_body(s.body, redirect))
        stages.append(s)
        if s.name == stage:
            stages.append(cache)
    return replace(state, stages=tuple(stages)), name


def _map_body(body, fn):
    if isinstance(body, Reduce):
        return Reduce(body.combiner, transform(body.source, fn), body.axes, body.init)
    return transform(body, fn)


def _check_scope(scope: str, primitive: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{primitive}: unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
