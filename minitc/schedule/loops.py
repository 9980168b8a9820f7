"""Loop primitives: split, fuse, reorder, the loop kinds (unroll, parallel, vectorize) and
prefetch requests carried by a loop.

Each is a pure function `(state, stage name, loop names, ...) -> state` that raises
ScheduleError naming the loop and the reason when the request is illegal.
"""

from __future__ import annotations

from dataclasses import replace

from minitc.errors import ScheduleError
from minitc.ir import GPU_TAGS, PrefetchRequest
from minitc.schedule.state import Fuse, Loop, Split, State, unique_name

MAX_VECTOR_LANES = 64


def _positive_int(value, what: str, loop: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScheduleError(f"split of loop {loop}: {what} must be a positive int, got {value!r}")
    return value


def split(state: State, stage: str, loop: str, factor=None, nparts=None) -> tuple[State, str, str]:
    """Split a loop into an outer and an inner loop.

    Before (extent 100, factor 32):      After:
        for i in range(100):                for i_o in range(4):
            body(i)                             for i_i in range(32):
                                                    if i_o * 32 + i_i < 100:
                                                        body(i_o * 32 + i_i)

    `factor` fixes the inner extent, `nparts` the outer one. A factor that does not divide the
    extent is legal: lowering adds the guard shown. Returns (state, outer name, inner name).

    The loop's prefetch requests move to the inner loop unchanged: i = i_o * 32 + i_i is linear
    in i_i with i's coefficient, so i_i + ahead addresses iteration i + ahead (in the next
    block when i_i + ahead >= 32: the index is not wrapped), one iteration of i_i being one of
    i, and the loops inside i_i are those that were inside i.
    """
    if (factor is None) == (nparts is None):
        raise ScheduleError(f"split of loop {loop}: give exactly one of factor= or nparts=")
    st = state.stage(stage)
    pos = st.position(loop)
    old = st.loops[pos]
    taken = {lp.name for lp in st.loops} | _all_names(st)
    outer = unique_name(f"{loop}_o", taken)
    inner = unique_name(f"{loop}_i", taken | {outer})
    if factor is not None:
        f = _positive_int(factor, "factor", loop)
        ext_outer, ext_inner = -(-old.extent // f), f
    else:
        f = _positive_int(nparts, "nparts", loop)
        ext_outer, ext_inner = f, -(-old.extent // f)
    new_loops = (
        Loop(outer, ext_outer, "serial", old.reduce),
        Loop(inner, ext_inner, "serial", old.reduce, prefetch=old.prefetch),
    )
    loops = st.loops[:pos] + new_loops + st.loops[pos + 1 :]
    rel = Split(loop, outer, inner, f, nparts is not None)
    st = replace(st, loops=loops, relations=st.relations + (rel,))
    return _retarget(state.replace_stage(st), stage, loop, inner), outer, inner


def fuse(state: State, stage: str, loops: tuple) -> tuple[State, str]:
    """Fuse consecutive loops, outermost first, into one.

    Before:                          After:
        for i in range(4):               for i_j_f in range(32):
            for j in range(8):               body(i_j_f // 8, i_j_f % 8)
                body(i, j)

    The loops must be adjacent in the stage's loop order and all spatial or all reduction.
    Returns (state, fused loop name).
    """
    if len(loops) < 2:
        raise ScheduleError(f"fuse needs at least two loops, got {len(loops)}")
    st = state.stage(stage)
    positions = [st.position(n) for n in loops]
    for a, b, na, nb in zip(positions, positions[1:], loops, loops[1:]):
        if b != a + 1:
            raise ScheduleError(
                f"fuse: loops {na} and {nb} of stage {stage} are not adjacent in the loop order "
                f"({', '.join(lp.name for lp in st.loops)}); reorder them first"
            )
    kinds = {st.loops[p].reduce for p in positions}
    if len(kinds) > 1:
        raise ScheduleError(f"fuse: cannot fuse spatial and reduction loops ({', '.join(loops)}) of stage {stage}")
    for p in positions:  # the fused index is a div/mod of each loop's: no iteration to shift by `ahead`
        if st.loops[p].prefetch:
            raise ScheduleError(
                f"fuse: loop {st.loops[p].name} of stage {stage} carries a prefetch of "
                f"{_requested(st.loops[p])}, which the fused loop cannot keep; fuse first, then prefetch"
            )
    relations = list(st.relations)
    current = st.loops[positions[0]]
    taken = {lp.name for lp in st.loops} | _all_names(st)
    for p in positions[1:]:
        nxt = st.loops[p]
        name = unique_name(f"{current.name}_{nxt.name}_f", taken)
        taken.add(name)
        relations.append(Fuse(current.name, nxt.name, name))
        current = Loop(name, current.extent * nxt.extent, "serial", current.reduce)
    new_loops = st.loops[: positions[0]] + (current,) + st.loops[positions[-1] + 1 :]
    st = replace(st, loops=new_loops, relations=tuple(relations))
    new_state = state.replace_stage(st)
    for name in loops:
        new_state = _retarget(new_state, stage, name, current.name)
    return new_state, current.name


def reorder(state: State, stage: str, loops: tuple) -> State:
    """Put the given loops in the given order, in the positions they occupy now.

    Before: reorder(j, i)            After:
        for i in range(4):               for j in range(8):
            for j in range(8):               for i in range(4):
                body(i, j)                       body(i, j)
    """
    st = state.stage(stage)
    if len(set(loops)) != len(loops):
        raise ScheduleError(f"reorder: a loop of stage {stage} is listed twice: {', '.join(loops)}")
    positions = sorted(st.position(n) for n in loops)
    new_loops = list(st.loops)
    for p, name in zip(positions, loops):
        new_loops[p] = st.loop(name)
    return state.replace_stage(replace(st, loops=tuple(new_loops)))


def annotate(state: State, stage: str, loop: str, kind: str) -> State:
    """Set how a loop runs: `unrolled`, `parallel`, `vectorized` (or back to `serial`).

    Before: vectorize(j_i)           After:
        for j_i in range(8):             for j_i in vectorized(8):
            C[i, j_o*8 + j_i] = ...          C[i, j_o*8 + j_i] = ...   # one <8 x float> op

    Parallel and vectorized loops must be spatial (a reduction loop would race); a vectorized
    loop must also be the innermost loop of its stage when lowered, with at most 64 lanes.
    """
    st = state.stage(stage)
    lp = st.loop(loop)
    if kind in ("parallel", "vectorized") and lp.reduce:
        verb = "parallelize" if kind == "parallel" else "vectorize"
        raise ScheduleError(
            f"cannot {verb} loop {loop} of stage {stage}: it is a reduction loop, whose iterations all "
            "update the same element; split or reorder a spatial loop instead"
        )
    if kind == "vectorized" and lp.extent > MAX_VECTOR_LANES:
        raise ScheduleError(
            f"cannot vectorize loop {loop} of stage {stage}: extent {lp.extent} exceeds {MAX_VECTOR_LANES} lanes; "
            "split it and vectorize the inner loop"
        )
    if lp.prefetch and kind not in ORDERED_KINDS:
        raise ScheduleError(
            f"cannot make loop {loop} of stage {stage} {kind}: it carries a prefetch of {_requested(lp)}, and a "
            f"{kind} loop has no iteration order to prefetch ahead in; make it {kind} before the prefetch step "
            "and put the prefetch on a serial or unrolled loop"
        )
    loops = tuple(replace(lp, kind=kind) if lp.name == loop else lp for lp in st.loops)
    return state.replace_stage(replace(st, loops=loops))


PREFETCH_LOCALITIES = (2, 3)  # llvm.prefetch's: 3 keeps the line in L1, 2 in L2 (and outward)
ORDERED_KINDS = ("serial", "unrolled")  # loops that run their iterations in order: they may prefetch


def _requested(lp: Loop) -> str:
    return ", ".join(f"{r.buffer} ({r.ahead} ahead)" for r in lp.prefetch)


def prefetch(state: State, stage: str, loop: str, buffer: str, ahead: int, locality: int = 3) -> State:
    """In each iteration of `loop`, prefetch what the iteration `ahead` later reads of the
    stage `buffer` (a stage that `stage` reads: a packed panel, an input).

    Before: prefetch(C_local.k_i, "B_local", ahead=2)      After (as the LLVM backend emits it):
        for k_i in unrolled(4):                  for k_i in unrolled(4):
            for i in unrolled(6):                    for j_v in unrolled(2):
                for j_v in unrolled(2):                  prefetch(B_local[k_o*4 + k_i + 2, j_v*8])
                    for j_l in vectorized(8):        for i in unrolled(6):
                        C_local[i, j] += ...             ... (unchanged)

    Only a hint: results do not change, and the backends without prefetches (CUDA, the
    interpreter) ignore it. The request rides on the loop (`Loop.prefetch`, lowered to
    `For.prefetch`): unroll keeps it, a split moves it to the inner loop (see split), while
    fuse, parallel, vectorize and bind of the loop refuse it.
    """
    st = state.stage(stage)
    lp = st.loop(loop)
    if buffer not in st.read_stages():
        raise ScheduleError(
            f"prefetch on loop {loop} of {stage}: {stage} does not read {buffer!r} "
            f"(it reads {', '.join(st.read_stages()) or 'nothing'})"
        )
    if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1:
        raise ScheduleError(f"prefetch on loop {loop} of {stage}: ahead must be a positive int, got {ahead!r}")
    if locality not in PREFETCH_LOCALITIES:
        raise ScheduleError(
            f"prefetch on loop {loop} of {stage}: locality {locality!r} is not one of {PREFETCH_LOCALITIES}"
        )
    if lp.kind not in ORDERED_KINDS:
        raise ScheduleError(
            f"prefetch on loop {loop} of {stage}: a {lp.kind} loop has no iteration order to prefetch ahead in; "
            "put the prefetch on a serial or unrolled loop"
        )
    requests = tuple(r for r in lp.prefetch if r.buffer != buffer) + (PrefetchRequest(buffer, ahead, locality),)
    loops = tuple(replace(lp, prefetch=requests) if lp.name == loop else lp for lp in st.loops)
    return state.replace_stage(replace(st, loops=loops))


def bind(state: State, stage: str, loop: str, tag: str) -> State:
    """Bind a loop to a GPU block or thread index (or a virtual thread, run as an unrolled loop).

    Before: bind(i_o, "blockIdx.x"), bind(i_i, "threadIdx.x")
        for i_o in range(8):                 for i_o in bind("blockIdx.x", 8):     # 8 blocks
            for i_i in range(128):               for i_i in bind("threadIdx.x", 128):  # of 128 threads
                B[i_o*128 + i_i] = f(A[...])         B[i_o*128 + i_i] = f(A[...])

    A bound loop is not a loop: every thread runs the body once with the variable set to its
    index. A reduction loop may be bound to threadIdx.x only: a cross-thread reduction, where
    each thread accumulates a partial result and the threads then combine theirs (warp
    shuffles, shared memory; minitc/lowering/allreduce.py). Each index can be bound once per
    stage.
    """
    if tag not in GPU_TAGS:
        raise ScheduleError(
            f"bind of loop {loop} of {stage}: unknown thread tag {tag!r}; use one of {', '.join(GPU_TAGS)}"
        )
    st = state.stage(stage)
    lp = st.loop(loop)
    if lp.prefetch:
        raise ScheduleError(
            f"cannot bind loop {loop} of stage {stage} to {tag}: it carries a prefetch of {_requested(lp)}, a CPU "
            "cache hint; bind a loop without one"
        )
    if lp.reduce and tag not in ("vthread", "threadIdx.x"):
        raise ScheduleError(
            f"cannot bind loop {loop} of stage {stage} to {tag}: it is a reduction loop; only threadIdx.x "
            "can carry a cross-thread reduction (the threads of a warp are consecutive in x), so bind it "
            "to threadIdx.x, or bind a spatial loop (or cache_write and bind its loops)"
        )
    for other in st.loops:
        if other.kind == tag and other.name != loop and tag != "vthread":
            raise ScheduleError(
                f"cannot bind loop {loop} of stage {stage} to {tag}: loop {other.name} is already bound to it; "
                "fuse the two loops and bind the fused one"
            )
    loops = tuple(replace(lp, kind=tag) if lp.name == loop else lp for lp in st.loops)
    return state.replace_stage(replace(st, loops=loops))


def _all_names(st) -> set:
    names = {a.name for a in st.all_axes}
    for r in st.relations:
        names |= {r.parent, r.outer, r.inner} if isinstance(r, Split) else {r.outer, r.inner, r.fused}
    return names


def _retarget(state: State, stage: str, old: str, new: str) -> State:
    """Stages attached at a loop that was split or fused follow it: a split moves them to the
    inner loop (so the loops they enclose stay the same), a fuse to the fused loop."""
    for s in state.attached_to(stage):
        if s.attach.loop == old:
            state = state.replace_stage(replace(s, attach=replace(s.attach, loop=new)))
    return state
