"""Constant folding: a node whose inputs are all constants, or that has none (`arange`, `full`,
`scalar_tensor`), is computed once when the model is compiled and becomes a constant.

In BERT-base and GPT-2 this folds the position ids, the token types and the input-independent
part of the attention mask, which would otherwise run as a dozen small PyTorch calls per
inference. PyTorch nodes are evaluated with PyTorch, minitc operators with the numpy
evaluator (`minitc.te_eval`). Nodes whose result differs between calls (`rand`, `dropout`,
`empty`) stay, and so does a node whose result would take much more memory than its inputs
(a broadcast of a constant is cheaper read through its index math than stored).
"""

from __future__ import annotations

import numpy as np

from minitc.frontend.graph import Graph, is_pure, reads_extents
from minitc.frontend.kernels import node_tensor
from minitc.frontend.runtime import call_torch
from minitc.te import placeholder
from minitc.te_eval import evaluate

GROWTH_BYTES = 1 << 20  # a folded value may exceed its inputs by at most this much


def fold_constants(graph: Graph) -> Graph:
    """The graph with every foldable node replaced by its value, as a constant of the same name."""
    g = graph.copy()
    nodes = []
    for node in g.nodes:
        # (what reads the run-time extents of dynamic shapes is not the same at every call)
        foldable = is_pure(node) and node.op != "fused" and node.name not in g.outputs and not reads_extents(node)
        if not foldable or not all(i in g.constants for i in node.inputs):
            nodes.append(node)
            continue
        value = _value(node, g.constants, g.symbols)
        inputs_bytes = sum(g.constants[i].nbytes for i in node.inputs)
        if not isinstance(value, np.ndarray) or value.nbytes > inputs_bytes + GROWTH_BYTES:
            nodes.append(node)
            continue
        g.constants[node.name] = np.asarray(value, order="C")
    g.nodes = nodes
    return g.prune()


def _value(node, constants: dict, symbols: dict):
    """The node's result computed from the constants it reads."""
    if node.op == "torch":
        import torch

        with torch.inference_mode():
            return call_torch(node.aten, constants, symbols)
    if node.op == "view":
        return constants[node.inputs[0]].reshape(node.shape)
    arrays = [constants[i] for i in node.inputs]
    tensors = [placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in enumerate(arrays)]
    (value,) = evaluate([node_tensor(node, tensors)], dict(zip(tensors, arrays)))
    return value
