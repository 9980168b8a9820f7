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
from minitc.frontend.dynamic import DynamicShapes
from minitc.frontend.graph import Graph, Node, Value
from minitc.frontend.importer import Ref, SymArg, getattr_path
from minitc.frontend.torch_ops import GraphOp
from minitc.schedule import Trace

FORMAT = "minitc-model-2"  # 2: constants named to array keys (shared by the buckets), dynamic shapes
READS = ("minitc-model-1", FORMAT)


class SavedModelError(MinitcError):
    """A saved model file that cannot be read."""


# --- torch nodes' arguments as JSON -------------------------------------------------------------
def _encode(value, where: str):
    import torch

    if isinstance(value, Ref):
        return {"ref": str(value)}
    if isinstance(value, SymArg):  # an integer of the dynamic sizes
        return {"sym": str(value.expr)}
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


def _decode(value, symbols: dict):
    import torch

    if not isinstance(value, dict):
        return value
    ((kind, inner),) = value.items()
    if kind == "ref":
        return Ref(inner)
    if kind == "sym":
        import sympy

        return SymArg(sympy.sympify(inner, locals=symbols))
    if kind == "kwargs":
        return {k: _decode(v, symbols) for k, v in inner.items()}
    if kind in ("list", "tuple"):
        items = [_decode(v, symbols) for v in inner]
        return items if kind == "list" else tuple(items)
    if kind == "device":
        return torch.device(inner)
    return getattr(torch, inner)


def _tuples(value):
    """JSON lists back to the tuples the graph's attributes hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _attr(key: str, value):
    if key == "limits":  # dynamic shapes: {dim: slot}, whose keys JSON made strings
        return {int(d): slot for d, slot in value.items()}
    return _tuples(value)


def _node_json(node: Node) -> dict:
    out = {"name": node.name, "op": node.op, "inputs": list(node.inputs), "attrs": node.attrs,
           "shape": list(node.shape), "dtype": node.dtype}  # fmt: skip
    if node.body:
        out["body"] = [_node_json(b) for b in node.body]
    if node.op == "torch" and isinstance(node.aten[0], GraphOp):  # a graph node PyTorch runs (torch_ops.py)
        out["graph_op"] = _node_json(node.aten[0].node)
    elif node.op == "torch":
        target, args, kwargs = node.aten
        name = "getitem" if target is operator.getitem else str(target)
        out["aten"] = [name, _encode(args, node.name), _encode(kwargs, node.name)]
    return out


def _node(d: dict, symbols: dict) -> Node:
    import torch

    aten = None
    if "graph_op" in d:
        aten = (GraphOp(_node(d["graph_op"], symbols)), tuple(Ref(i) for i in d["inputs"]), {})
    elif "aten" in d:
        name, args, kwargs = d["aten"]
        target = operator.getitem if name == "getitem" else getattr_path(torch.ops, name)
        aten = (target, _decode(args, symbols), _decode(kwargs, symbols))
    attrs = {k: _attr(k, v) for k, v in d["attrs"].items()}
    body = tuple(_node(b, symbols) for b in d.get("body", ()))
    return Node(d["name"], d["op"], tuple(d["inputs"]), attrs, tuple(d["shape"]), d["dtype"], aten, body)


# --- files --------------------------------------------------------------------------------------
def save(compiled, path) -> None:
    """Write `compiled`; a model with dynamic shapes is compiled for every bucket first, so
    that the file serves the whole range."""
    if compiled.dynamic is not None:
        compiled.compile_every_bucket()
    arrays: dict = {}
    inputs = [t.detach().cpu().numpy() for t in compiled.example_inputs]
    arrays.update({f"i{k}": a for k, a in enumerate(inputs)})
    doc = {"format": FORMAT, "target": compiled.target}
    if compiled.dynamic is None:
        doc.update(_graph_doc(compiled.graph, compiled.tasks, arrays))
    else:
        doc["dynamic"] = compiled.dynamic.to_json()
        doc["buckets"] = [
            {"bucket": list(bucket), "dims": _dims_doc(plan.dims), **_graph_doc(graph, tasks, arrays)}
            for bucket, (graph, tasks, plan) in compiled._variants.items()
        ]
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model.json", json.dumps(doc))
        archive.writestr("arrays.npz", buffer.getvalue())
    os.replace(partial, path)


def _graph_doc(graph, tasks, arrays: dict) -> dict:
    """The graph and its tasks as JSON; its constants go into `arrays`, each array once (the
    buckets of a dynamic model share their weights)."""
    keys = []
    for name, a in graph.constants.items():
        key = next((k for k, b in arrays.items() if k.startswith("c") and b is a), None)
        if key is None:
            key = f"c{sum(k.startswith('c') for k in arrays)}"
            arrays[key] = a
        keys.append([name, key])
    return {
        "inputs": [[v.name, list(v.shape), v.dtype] for v in graph.inputs],
        "constants": keys,
        "outputs": list(graph.outputs),
        "nodes": [_node_json(n) for n in graph.nodes],
        "tasks": [{"nodes": t.nodes, "trace": t.trace.to_json()} for t in tasks],
    }


def _dims_doc(dims: dict) -> dict:
    return {name: [[d, slot] for d, slot in per.items()] for name, per in dims.items()}


def _read(path: Path):
    try:
        with zipfile.ZipFile(path) as archive:
            doc = json.loads(archive.read("model.json"))
            arrays = dict(np.load(io.BytesIO(archive.read("arrays.npz")), allow_pickle=False))
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError) as e:
        raise SavedModelError(f"{path}: not a saved minitc model, or damaged ({type(e).__name__}: {e})") from None
    if doc.get("format") not in READS:
        raise SavedModelError(f"{path}: format {doc.get('format')!r}; this minitc reads {', '.join(READS)}")
    return doc, arrays


def read(path) -> tuple:
    """(target, example inputs, dynamic.DynamicShapes or None, [(bucket or None, graph, {a task's
    node names: its trace}, dims)]) of the model saved in `path`; compiler.load rebuilds the
    compiled model from them."""
    import torch

    path = Path(path)
    doc, arrays = _read(path)
    try:
        dynamic = DynamicShapes.from_json(doc["dynamic"]) if "dynamic" in doc else None
        symbols = {str(s): s for s in dynamic.symbols} if dynamic else {}
        parts = doc["buckets"] if dynamic else [doc]
        variants = []
        for part in parts:
            constants = part["constants"]
            if constants and isinstance(constants[0], str):  # files written before the buckets: c0, c1, ...
                constants = [[name, f"c{k}"] for k, name in enumerate(constants)]
            graph = Graph(
                [Value(n, tuple(s), d) for n, s, d in part["inputs"]],
                {name: arrays[key] for name, key in constants},
                [_node(d, symbols) for d in part["nodes"]],
                list(part["outputs"]),
            )
            traces = {tuple(t["nodes"]): Trace.from_json(t["trace"]) for t in part["tasks"]}
            dims = {name: {int(d): int(slot) for d, slot in per} for name, per in part.get("dims", {}).items()}
            variants.append((tuple(part["bucket"]) if dynamic else None, graph, traces, dims))
        inputs = tuple(torch.from_numpy(arrays[f"i{k}"]) for k in range(len(variants[0][1].inputs)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SavedModelError(f"{path}: damaged saved model ({type(e).__name__}: {e})") from None
    return doc["target"], inputs, dynamic, variants
