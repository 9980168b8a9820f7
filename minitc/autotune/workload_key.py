"""Workload keys: a structural identity for a computation, independent of Python object ids
and of the names the user gave its tensors, so tuning records survive restarts and renames.

The canonical form (`canonical`) is a JSON list, one entry per stage, producers first:

    ["input", shape, dtype]  (+ ["constant"] for a cold input, tc.placeholder(constant=True))
    ["compute", tag, shape, dtype, extents of the spatial then the reduce axes, body]
                             (+ the tensor's attrs, a JSON object, in the stored form only)
    ["outputs", [stage numbers]]

A body node is ["c", dtype, repr(value)], ["v", axis number], ["r", stage number, *indices],
["reduce", combiner, [axis numbers], init, source], or [head, dtype, (op or name), *children]
with head b (Binary), cmp (Compare), not, sel (Select), cast, call. The key hashes the form
without attrs; the records database stores it with them (`canonical(outputs, attrs=True)`),
so that workload_decode.decode rebuilds tensors the operator templates recognise.
"""

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


def _json_attr(value):
    """An attribute value as JSON (tuples as lists), or None where it has no JSON form."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        items = [_json_attr(v) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value)) else items
    return None


def _json_attrs(attrs: dict) -> dict:
    out = {}
    for name, value in sorted(attrs.items()):
        encoded = _json_attr(value)
        if encoded is not None or value is None:
            out[str(name)] = encoded
    return out


def canonical(outputs, attrs: bool = False) -> list:
    """A JSON-able structural description of the computation graph of `outputs` (see the module
    docstring); with `attrs`, each compute entry that has attrs carries them last."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    state, names = from_tensors(outputs)
    tensors = {name: t for t, name in names.items()}
    stages = {st.name: n for n, st in enumerate(state.stages)}
    desc = []
    for st in state.stages:
        if st.is_placeholder:  # a constant (cold) input is measured otherwise: another workload
            desc.append(["input", list(st.shape), st.dtype] + ([st.tag] if st.tag else []))
            continue
        axes = {a: n for n, a in enumerate(st.all_axes)}
        extents = [a.extent for a in st.all_axes]
        desc.append(["compute", st.tag, list(st.shape), st.dtype, extents, _encode(st.body, axes, stages)])
        extra = _json_attrs(tensors[st.name].op.attrs) if attrs else None
        if extra:
            desc[-1].append(extra)
    desc.append(["outputs", [stages[o] for o in state.outputs]])
    return desc


def without_attrs(form: list) -> list:
    """The canonical form as the key hashes it: compute entries without their attrs."""
    return [entry[:6] if isinstance(entry, list) and entry[:1] == ["compute"] else entry for entry in form]


def form_key(form: list) -> str:
    """The workload key of a canonical form (stored with attrs or not)."""
    text = json.dumps(without_attrs(form), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def workload_key(outputs) -> str:
    """sha256 of the canonical description: equal for structurally equal computations."""
    return form_key(canonical(outputs))


def describe(outputs) -> str:
    """A short human-readable summary, e.g. `matmul float32[512, 512]x[512, 512]->[512, 512]`."""
    state, _ = from_tensors(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
    ins = [st for st in state.stages if st.is_placeholder]
    out = state.stage(state.outputs[0])
    tag = out.tag or "compute"
    shapes = "x".join(str(list(st.shape)) for st in ins)
    return f"{tag} {out.dtype}{shapes}->{list(out.shape)}"
