"""Saving a compiled model and loading it without the PyTorch model or the records database.

    compiled.save("bert.minitc")
    model = minitc.frontend.load("bert.minitc")   # kernels rebuilt from the saved traces
    y = model(x)

The file is a zip archive: `model.json` (format, target, the graph with every node, and each
task's nodes and schedule trace) and `arrays.npz` (the constants and the example inputs). It is
written to a temporary file and renamed, so an interrupted save never leaves half a file. A
file that is not one, or is damaged, raises SavedModelError naming it.
"""

from __future__ import annotations

import io
import json
import operator
import os
import zipfile
from pathlib import Path

import numpy as np

from minitc.errors import MinitcError
from minitc.frontend.graph import Graph, Node, Value
from minitc.frontend.importer import Ref, getattr_path
from minitc.schedule import Trace

FORMAT = "minitc-model-1"


class SavedModelError(MinitcError):
    """A saved model file that cannot be read."""


# --- torch nodes' arguments as JSON -------------------------------------------------------------
def _encode(value, where: str):
    import torch

    if isinstance(value, Ref):
        return {"ref": str(value)}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode(v, where) for v in value]}
    if isinstance(value, dict):  # keyword arguments
        return {"kwargs": {k: _encode(v, where) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    for kind in ("dtype", "device", "memory_format", "layout"):
        if isinstance(value, getattr(torch, kind)):
            return {kind: str(value).removeprefix("torch.")}
    raise SavedModelError(f"cannot save {where}: an argument of type {type(value).__name__} ({value!r})")


def _decode(value):
    import torch

    if not isinstance(value, dict):
        return value
    ((kind, inner),) = value.items()
    if kind == "ref":
        return Ref(inner)
    if kind == "kwargs":
        return {k: _decode(v) for k, v in inner.items()}
    if kind in ("list", "tuple"):
        items = [_decode(v) for v in inner]
        return items if kind == "list" else tuple(items)
    if kind == "device":
        return torch.device(inner)
    return getattr(torch, inner)


def _tuples(value):
    """JSON lists back to the tuples the graph's attributes hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _node_json(node: Node) -> dict:
    out = {"name": node.name, "op": node.op, "inputs": list(node.inputs), "attrs": node.attrs,
           "shape": list(node.shape), "dtype": node.dtype}  # fmt: skip
    if node.body:
        out["body"] = [_node_json(b) for b in node.body]
    if node.op == "torch":
        target, args, kwargs = node.aten
        name = "getitem" if target is operator.getitem else str(target)
        out["aten"] = [name, _encode(args, node.name), _encode(kwargs, node.name)]
    return out


def _node(d: dict) -> Node:
    import torch

    aten = None
    if "aten" in d:
        name, args, kwargs = d["aten"]
        target = operator.getitem if name == "getitem" else getattr_path(torch.ops, name)
        aten = (target, _decode(args), _decode(kwargs))
    attrs = {k: _tuples(v) for k, v in d["attrs"].items()}
    body = tuple(_node(b) for b in d.get("body", ()))
    return Node(d["name"], d["op"], tuple(d["inputs"]), attrs, tuple(d["shape"]), d["dtype"], aten, body)


# --- files --------------------------------------------------------------------------------------
def save(compiled, path) -> None:
    graph = compiled.graph
    names = list(graph.constants)
    arrays = {f"c{k}": graph.constants[n] for k, n in enumerate(names)}
    inputs = [t.detach().cpu().numpy() for t in compiled.example_inputs]
    arrays.update({f"i{k}": a for k, a in enumerate(inputs)})
    doc = {
        "format": FORMAT,
        "target": compiled.target,
        "inputs": [[v.name, list(v.shape), v.dtype] for v in graph.inputs],
        "constants": names,
        "outputs": list(graph.outputs),
        "nodes": [_node_json(n) for n in graph.nodes],
        "tasks": [{"nodes": t.nodes, "trace": t.trace.to_json()} for t in compiled.tasks],
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model.json", json.dumps(doc))
        archive.writestr("arrays.npz", buffer.getvalue())
    os.replace(partial, path)


def _read(path: Path):
    try:
        with zipfile.ZipFile(path) as archive:
            doc = json.loads(archive.read("model.json"))
            arrays = dict(np.load(io.BytesIO(archive.read("arrays.npz")), allow_pickle=False))
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError) as e:
        raise SavedModelError(f"{path}: not a saved minitc model, or damaged ({type(e).__name__}: {e})") from None
    if doc.get("format") != FORMAT:
        raise SavedModelError(f"{path}: format {doc.get('format')!r}; this minitc reads {FORMAT}")
    return doc, arrays


def read(path) -> tuple:
    """(graph, {a task's node names: its trace}, the example inputs, the target) of the model
    saved in `path`; compiler.load rebuilds the compiled model from them."""
    import torch

    path = Path(path)
    doc, arrays = _read(path)
    try:
        graph = Graph(
            [Value(n, tuple(s), d) for n, s, d in doc["inputs"]],
            {name: arrays[f"c{k}"] for k, name in enumerate(doc["constants"])},
            [_node(d) for d in doc["nodes"]],
            list(doc["outputs"]),
        )
        traces = {tuple(t["nodes"]): Trace.from_json(t["trace"]) for t in doc["tasks"]}
        inputs = tuple(torch.from_numpy(arrays[f"i{k}"]) for k in range(len(graph.inputs)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SavedModelError(f"{path}: damaged saved model ({type(e).__name__}: {e})") from None
    return graph, traces, inputs, doc["target"]
