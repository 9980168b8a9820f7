"""Lowering: schedule -> loop-nest IR: stages inlined, the loop nest built, then the named,
ordered passes of STMT_PASSES (and gpu_passes() for a GPU) over it.

Set MINITC_DEBUG=2 to print the IR after every pass (MINITC_DEBUG=1 prints the final IR).
"""

from __future__ import annotations

import os
import sys

from minitc import ir
from minitc.errors import IRError, ScheduleError
from minitc.expr import IterVar, free_vars
from minitc.lowering.bounds import BoundInference
from minitc.lowering.index_check import check_indices
from minitc.lowering.limits import EXTENTS, slots, stage_limits, trip_guards
from minitc.lowering.nest import NestBuilder
from minitc.lowering.passes import check_no_bindings, check_parallel_nesting, inline_stages, simplify_stmt
from minitc.schedule.state import State
from minitc.verify import verify


def debug_level() -> int:
    try:
        return int(os.environ.get("MINITC_DEBUG", "0"))
    except ValueError:
        return 0


def _make_buffers(state: State, info: dict, params: dict, gpu: bool) -> tuple[dict, list]:
    """A buffer per stage: kernel params for inputs/outputs, region-sized tiles for compute_at
    stages, full-size temporaries (allocated at the top) for the rest. On a GPU a tile is
    `shared` by a block or `local` to a thread, and a full-size temporary is always `global`:
    it is written and read by different kernel launches. Shared tiles read along a reduction
    get a padded row (`_rows_run_along_a_reduction`)."""
    buffers, temporaries = dict(params), []
    for st in state.stages:
        if st.name in buffers:
            continue
        if st.is_placeholder:
            raise ScheduleError(f"input {st.name} is not among the kernel arguments")
        si = info[st.name]
        if si.local:
            scope = "shared" if gpu and st.scope == "shared" else "local"
            shape = tuple(e for _, e in si.region)
            if scope == "shared" and shape[-1] % 2 == 0 and _rows_run_along_a_reduction(state, st.name):
                shape = shape[:-1] + (shape[-1] + 1,)
            buffers[st.name] = ir.Buffer(st.name, shape, st.dtype, scope)
        else:
            scope = "global" if st.scope == "global" or gpu else "local"
            buffers[st.name] = ir.Buffer(st.name, st.shape, st.dtype, scope)
            temporaries.append(buffers[st.name])
    return buffers, temporaries


def _rows_run_along_a_reduction(state: State, name: str) -> bool:
    """Whether a reader indexes the tile's last dimension by its reduction axes alone (dense's
    W[n, k] tile: at each k step the threads read down a column). Rows of an even number of
    words then put the threads on few memory banks (16 words a row: all on one bank), so the
    buffer gets one word of padding per row; the indices stay the same. Not when the fill is
    vectorized: that asks for aligned rows."""
    if any(lp.kind == "vectorized" for lp in state.stage(name).loops):
        return False
    for st in state.stages:
        for read in st.reads() if st.body is not None else ():
            if read.stage == name:
                used = free_vars(read.indices[-1])
                if used and all(isinstance(v, IterVar) and v.kind == "reduce" for v in used):
                    return True
    return False


def _build(state: State, params: dict, gpu: bool):
    info = BoundInference(state, gpu).run()
    if EXTENTS in params:  # dynamic shapes: skip the tiles past the run-time extents
        limits = stage_limits(state)
        for st in state.stages:
            if not st.is_placeholder and limits[st.name]:
                info[st.name].skips.extend(trip_guards(st, info[st.name], limits[st.name], params[EXTENTS]))
    buffers, temporaries = _make_buffers(state, info, params, gpu)
    builder = NestBuilder(state, info, buffers, gpu)
    roots = [st for st in state.stages if not st.is_placeholder and st.attach is None]
    body = ir.seq(*(builder.stage(st.name) for st in roots))
    for buf in reversed(temporaries):
        body = ir.Allocate(buf, body)
    return body


def _simplify(body):
    check_parallel_nesting(body)
    return simplify_stmt(body) or ir.Seq(())


# The passes over the built loop nest, in order: (name MINITC_DEBUG=2 prints, function of the body)
STMT_PASSES = (("simplify", _simplify),)


def gpu_passes() -> tuple:
    """The passes a GPU kernel's loop nest takes after STMT_PASSES (imported on first use)."""
    from minitc.lowering.allreduce import lower_allreduce
    from minitc.lowering.double_buffer import double_buffer
    from minitc.lowering.gpu import sink_guards

    return (
        ("cross-thread reductions", lower_allreduce),
        ("sink guards below barriers", sink_guards),
        ("double buffer shared tiles", double_buffer),
    )


def lower_state(state: State, inputs: list, outputs: list, name: str = "kernel", gpu: bool = False) -> ir.Kernel:
    """Lower a schedule state. `inputs` and `outputs` are stage names in argument order. `gpu`
    lowers for a GPU (shared-memory tiles and barriers); otherwise GPU bindings are an error."""
    if not gpu:
        check_no_bindings(state)
    state = inline_stages(state)
    params = {}
    for n in list(inputs) + list(outputs):
        st = state.stage(n)
        params[n] = ir.Buffer(n, st.shape, st.dtype, "global")
    inputs = list(inputs)
    count = slots(state)
    if count:  # the run-time extents of dynamic dimensions: the last input
        params[EXTENTS] = ir.Buffer(EXTENTS, (count,), "int64", "global")
        inputs.append(EXTENTS)
    body = _build(state, params, gpu)
    _dump("build", body)
    for pass_name, fn in STMT_PASSES + (gpu_passes() if gpu else ()):
        body = fn(body)
        _dump(pass_name, body)
    kernel = ir.Kernel(name, [params[n] for n in inputs + list(outputs)], len(inputs), body)

    try:
        verify(kernel)
    except IRError as e:  # a lowering bug, not a user error: say so
        raise IRError(f"internal error: lowering produced invalid IR ({e}); please report this schedule") from e
    check_indices(kernel)
    if debug_level() >= 1:
        print(kernel, file=sys.stderr)
    return kernel


def _dump(pass_name: str, body) -> None:
    if debug_level() >= 2:
        from minitc.printer import format_stmt

        print(f"--- after {pass_name} ---\n{format_stmt(body)}", file=sys.stderr)
