"""Graph passes: each takes a graph and returns the rewritten graph (the input is not changed).

- `fold_batch_norm`: a per-channel scale and shift (inference batch norm) after a convolution
  with constant weights becomes new weights and a bias: w' = w * scale, b' = b * scale + shift.
- `fuse_dense_activation`: an activation applied to a dense layer's output, and read by nothing
  else, becomes the dense kernel's epilogue (`dense(..., activation=gelu)`), looking through
  the views that put a [batch * tokens, features] product back into [batch, tokens, features].
- `simplify_views`: views to the same shape disappear; a view of a view reads the source.

`run_all` applies them in order and prunes what no output needs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from minitc.frontend.graph import Graph

ACTIVATIONS = ("relu", "gelu", "sigmoid", "tanh")
CONVOLUTIONS = ("conv2d", "depthwise_conv2d")


def _copy(graph: Graph) -> Graph:
    return Graph(
        list(graph.inputs),
        dict(graph.constants),
        [replace(n, attrs=dict(n.attrs)) for n in graph.nodes],
        list(graph.outputs),
    )


def _single_use(graph: Graph, name: str, users: dict) -> bool:
    return len(users.get(name, [])) == 1 and name not in graph.outputs


def fold_batch_norm(graph: Graph) -> Graph:
    g = _copy(graph)
    producers, users = g.producers(), g.users()
    for i, node in enumerate(g.nodes):
        if node.op != "scale_shift":
            continue
        x, scale_name, shift_name = node.inputs
        scale, shift = g.constants.get(scale_name), g.constants.get(shift_name)
        bias = None
        src = producers.get(x)
        if src is not None and src.op == "add" and len(src.inputs) == 2 and _single_use(g, x, users):
            bias = g.constants.get(src.inputs[1])
            conv_name = src.inputs[0] if bias is not None else None
        else:
            conv_name = x
        conv = producers.get(conv_name) if conv_name else None
        if scale is None or shift is None or conv is None or conv.op not in CONVOLUTIONS:
            continue
        weight = g.constants.get(conv.inputs[1])
        if weight is None or not _single_use(g, conv.name, users):
            continue
        k = weight.shape[0]
        flat_scale = scale.reshape(k)
        new_weight = (weight * flat_scale.reshape((k,) + (1,) * (weight.ndim - 1))).astype(weight.dtype)
        new_bias = shift.reshape(k) + (bias.reshape(k) * flat_scale if bias is not None else 0)
        w_name = _new_constant(g, f"{conv.inputs[1]}_folded", new_weight)
        b_name = _new_constant(g, f"{node.name}_bias", new_bias.astype(weight.dtype).reshape(shift.shape))
        conv.inputs = (conv.inputs[0], w_name)
        g.nodes[i] = replace(node, op="add", inputs=(conv.name, b_name), attrs={})
    return g.prune()


def _new_constant(g: Graph, base: str, array) -> str:
    name, n = base, 1
    names = g.values()
    while name in names:
        n += 1
        name = f"{base}_{n}"
    g.constants[name] = np.ascontiguousarray(array)
    return name


def fuse_dense_activation(graph: Graph) -> Graph:
    g = _copy(graph)
    producers, users = g.producers(), g.users()
    for i, node in enumerate(g.nodes):
        if node.op not in ACTIVATIONS:
            continue
        views, src = [], producers.get(node.inputs[0])
        while src is not None and src.op == "view" and _single_use(g, src.name, users):
            views.append(src)
            src = producers.get(src.inputs[0])
        chain_ok = src is not None and src.op == "dense" and "activation" not in src.attrs
        if not chain_ok or not _single_use(g, src.name, users):
            continue
        src.attrs["activation"] = node.op
        g.nodes[i] = replace(node, op="view", inputs=(node.inputs[0],), attrs={"shape": node.shape})
    return g.prune()


def simplify_views(graph: Graph) -> Graph:
    """Views are free, but each is a step: a view to the same shape goes, and a view of a view
    reads the first view's source."""
    g, alias, producers, nodes = _copy(graph), {}, {}, []
    shapes = {name: v.shape for name, v in g.values().items()}
    for node in g.nodes:
        node.inputs = tuple(alias.get(i, i) for i in node.inputs)
        if node.op == "view":
            src = producers.get(node.inputs[0])
            if src is not None and src.op == "view":
                node.inputs = src.inputs
            if node.shape == shapes[node.inputs[0]]:
                alias[node.name] = node.inputs[0]
                continue
        producers[node.name] = node
        nodes.append(node)
    g.nodes = nodes
    g.outputs = [alias.get(o, o) for o in g.outputs]
    return g.prune()


PASSES = (fold_batch_norm, fuse_dense_activation, simplify_views)


def run_all(graph: Graph) -> Graph:
    for p in PASSES:
        graph = p(graph)
    return graph
