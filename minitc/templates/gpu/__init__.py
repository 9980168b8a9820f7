"""GPU schedule templates, registered per operator tag like the CPU ones (minitc/templates),
and the generic binding every other stage gets.

On a GPU a loop nest that binds nothing runs in a single thread, so `gpu_template_schedule`
first applies the operator's template (gemm.py, conv.py, reduce.py, window.py) and then gives every root
stage left unbound the simple binding: its spatial loops fused, split into blocks of `threads`
threads, one output element per thread (`bind_flat`). Reductions outside reduce.py's templates
stay serial inside each thread.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.ir import GPU_TAGS
from minitc.schedule.recorder import Schedule
from minitc.templates.elementwise import inline_producers
from minitc.templates.gpu.registry import (  # noqa: F401  (the registry, read here and re-exported)
    GPU_DEFAULTS,
    GPU_PARAMS,
    GPU_TEMPLATES,
    MAX_THREADS,
    SHARED_BYTES,
    THREADS,
    defaults,
    template,
    unrolled_k_steps,
)


def load_gpu_templates() -> None:
    from minitc.templates.gpu import conv, gemm, reduce, window, winograd  # noqa: F401  (they register themselves)


def is_bound(s: Schedule, name: str) -> bool:
    return any(lp.kind in GPU_TAGS for lp in s.state.stage(name).loops)


def bind_flat(s: Schedule, name: str, threads: int = THREADS) -> None:
    """One thread per output element: fuse the spatial loops, split by `threads`, bind."""
    st = s.state.stage(name)
    loops = s.loops(name)
    spatial = [ref for ref, lp in zip(loops, st.loops) if not lp.reduce]
    if not spatial:
        return  # a reduction to a scalar: one thread does it
    fused = s.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    bo, ti = s.split(fused, factor=threads)
    s.bind(bo, "blockIdx.x")
    s.bind(ti, "threadIdx.x")


def bind_unbound(s: Schedule, threads: int = THREADS) -> None:
    """Give every root stage that binds nothing the flat binding."""
    for st in s.state.stages:
        if st.is_placeholder or st.inline or st.attach is not None or is_bound(s, st.name):
            continue
        bind_flat(s, st.name, threads)


def gpu_template_schedule(outputs, target) -> Schedule:
    """The schedule `tc.build(tensor, target="cuda")` uses: the operator's GPU template with
    its defaults, elementwise producers inlined, every remaining stage flat-bound."""
    load_gpu_templates()
    s = Schedule(outputs)
    for out in s.state.outputs:
        tag = s.state.stage(out).tag
        if len(s.state.outputs) == 1 and tag in GPU_TEMPLATES:
            params = GPU_DEFAULTS[tag](s, out, target) if tag in GPU_DEFAULTS else {}
            try:
                GPU_TEMPLATES[tag](s, out, target, **params)
            except ScheduleError as e:  # a template must never make a computation unbuildable
                raise ScheduleError(f"the default GPU {tag} template failed on {out}: {e}") from e
        else:
            inline_producers(s, out)
            for name in s.state.stage(out).read_stages():  # padding: a select in the window loads
                st = s.state.stage(name)
                if st.tag == "pad" and not st.output and not st.inline and st.attach is None:
                    s.compute_inline(name)
    bind_unbound(s)
    return s
