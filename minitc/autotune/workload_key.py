"""Workload keys: a structural identity for a computation, independent of Python object ids
and of the names the user gave its tensors, so tuning records survive restarts and renames."""

from __future__ import annotations

import hashlib
import json

from minitc.expr import Binary, Call, Cast, Compare, Const, Expr, Not, Select, Var
from minitc.schedule.state import Read, from_tensors
from minitc.te import Reduce


def _encode(e: Expr, axes: dict, stages: dict):
    if isinstance(e, Const):
        return ["c", e.dtype, repr(e.value)]
    if isinstance(e, Var):
        return ["v", axes.get(e, e.name)]
    if isinstance(e, Read):
        return ["r", stages[e.stage]] + [_encode(i, axes, stages) for i in e.indices]
    if isinstance(e, Reduce):
        return [
            "reduce",
            e.combiner,
            [axes[a] for a in e.axes],
            _encode(e.init, axes, stages),
            _encode(e.source, axes, stages),
        ]
    head = {Binary: "b", Compare: "cmp", Not: "not", Select: "sel", Cast: "cast", Call: "call"}.get(type(e))
    if head is None:
        head = type(e).__name__
    extra = [getattr(e, f) for f in ("op", "name") if hasattr(e, f) and not isinstance(e, Var)]
    return [head, e.dtype] + extra + [_encode(c, axes, stages) for c in e.children()]


def canonical(outputs) -> list:
    """A JSON-able structural description of the computation graph of `outputs`."""
    state, _ = from_tensors(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
    stages = {st.name: n for n, st in enumerate(state.stages)}
    desc = []
    for st in state.stages:
        if st.is_placeholder:  # a constant (cold) input is measured otherwise: another workload
            desc.append(["input", list(st.shape), st.dtype] + ([st.tag] if st.tag else []))
            continue
        axes = {a: n for n, a in enumerate(st.all_axes)}
        extents = [a.extent for a in st.all_axes]
        desc.append(["compute", st.tag, list(st.shape), st.dtype, extents, _encode(st.body, axes, stages)])
    desc.append(["outputs", [stages[o] for o in state.outputs]])
    return desc


def workload_key(outputs) -> str:
    """sha256 of the canonical description: equal for structurally equal computations."""
    text = json.dumps(canonical(outputs), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def describe(outputs) -> str:
    """A short human-readable summary, e.g. `matmul float32[512, 512]x[512, 512]->[512, 512]`."""
    state, _ = from_tensors(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
    ins = [st for st in state.stages if st.is_placeholder]
    out = state.stage(state.outputs[0])
    tag = out.tag or "compute"
    shapes = "x".join(str(list(st.shape)) for st in ins)
    return f"{tag} {out.dtype}{shapes}->{list(out.shape)}"
