"""Constant weights repacked once at compile time into the layouts the templates read fastest:
`pack_conv_weights` ([C, R, S, K] for the channel-vector convolution), `pack_dense_weights`
(blocks of a vector's worth of output features for the GEMM template), and on a GPU
`winograd_convolutions` (3x3 stride-1 convolutions by F(2x2, 3x3), weights transformed once).
All take the target.
"""

from __future__ import annotations

import numpy as np

from minitc.frontend.graph import Graph
from minitc.ops.winograd import winograd_weights_ck
from minitc.target import is_gpu, parse_target
from minitc.templates.conv_channels import channel_vectors_pay


def pack_conv_weights(graph: Graph, target) -> Graph:
    if is_gpu(target):
        return graph
    t = parse_target(target)
    g = graph.copy()
    for node in g.nodes:
        weight = g.constants.get(node.inputs[1]) if node.op == "conv2d" else None
        if weight is None or node.attrs.get("weight_layout"):
            continue
        if channel_vectors_pay(t, node.dtype, weight.shape, node.shape[3], node.attrs["stride"][1]):
            packed = g.add_constant(f"{node.inputs[1]}_crsk", _padded_rows(weight.transpose(1, 2, 3, 0)))
            node.inputs = (node.inputs[0], packed, *node.inputs[2:])
            node.attrs["weight_layout"] = "CRSK"
    return g.prune()


def pack_dense_weights(graph: Graph, target) -> Graph:
    """A dense layer with a constant weight gets it packed once into blocks of a vector's worth
    of output features, [OUT/B, IN, B] (`weight_block=B`): the GEMM template then reads each
    register tile's weight vectors in place, one contiguous stream per block, instead of
    copying a panel out of rows OUT floats apart at every call. On a GPU the weight is stored
    transposed once instead, [IN, OUT] (`weight_in_out`): the GEMM template's shared tile of B is
    [k][n], and filling it from [IN, OUT] rows is the float4 copy that ran the BERT FFN dense +
    GELU at 0.94x cuBLAS on an H200, against 0.87x from torch's [OUT, IN]."""
    if is_gpu(target):
        return _transposed_dense_weights(graph)
    t = parse_target(target)
    g, packed = graph.copy(), {}
    for node in g.nodes:
        weight = g.constants.get(node.inputs[1]) if node.op == "dense" else None
        if weight is None or node.attrs.get("weight_block"):
            continue
        block = t.lanes(node.dtype)
        rows = weight if node.attrs.pop("weight_in_out", False) else weight.T  # [IN, OUT]
        if node.inputs[1] not in packed:
            padded = np.pad(rows, ((0, 0), (0, -rows.shape[1] % block)))  # the last block filled with zeros
            blocks = padded.reshape(rows.shape[0], -1, block).transpose(1, 0, 2)
            packed[node.inputs[1]] = g.add_constant(f"{node.inputs[1]}_blocked", blocks)
        node.inputs = (node.inputs[0], packed[node.inputs[1]], *node.inputs[2:])
        node.attrs["weight_block"] = block
        if rows.shape[1] % block:
            node.attrs["out_features"] = rows.shape[1]
    return g.prune()


def _transposed_dense_weights(graph: Graph) -> Graph:
    g, done = graph.copy(), {}
    for node in g.nodes:
        weight = g.constants.get(node.inputs[1]) if node.op == "dense" else None
        if weight is None or node.attrs.get("weight_in_out") or node.attrs.get("weight_block"):
            continue
        if node.inputs[1] not in done:
            done[node.inputs[1]] = g.add_constant(f"{node.inputs[1]}_in_out", np.ascontiguousarray(weight.T))
        node.inputs = (node.inputs[0], done[node.inputs[1]], *node.inputs[2:])
        node.attrs["weight_in_out"] = True
    return g.prune()


ROW_ALIGNMENT = 1024  # bytes: rows this far apart share L1 sets (4 KiB per way on common x86 cores)


def _padded_rows(weight) -> np.ndarray:
    """The [C, R, S, K] weight with each row padded by one cache line of zeros when its length is
    a multiple of ROW_ALIGNMENT: the micro-kernel reads one row per reduction step, and rows a
    whole number of KiB apart would all land in the same few L1 sets."""
    if weight.shape[-1] * weight.itemsize % ROW_ALIGNMENT:
        return weight
    extra = 64 // weight.itemsize
    return np.concatenate([weight, np.zeros(weight.shape[:-1] + (extra,), weight.dtype)], axis=-1)


WINOGRAD_MIN_CHANNELS = 32  # below this the 16 products are too thin a GEMM for the transforms' cost


def winograd_pays_on_gpu(weight_shape, attrs: dict) -> bool:
    """A convolution the GPU runs as `conv2d_winograd`: 3x3, stride 1, no dilation, at least
    WINOGRAD_MIN_CHANNELS input and output channels. On an H200 (docs/gpu.md) it ran four 3x3
    ResNet-50 layers at 1.60-4.49x cuDNN, where the direct template ran 0.40-0.71x."""
    K, C, R, S = weight_shape
    return (
        (R, S) == (3, 3)
        and tuple(attrs["stride"]) == (1, 1)
        and tuple(attrs["dilation"]) == (1, 1)
        and min(K, C) >= WINOGRAD_MIN_CHANNELS
    )


def winograd_convolutions(graph: Graph, target) -> Graph:
    """On a GPU: a convolution with a constant weight where Winograd pays becomes
    `conv2d_winograd`, its weight transformed once into U [4, 4, C, K]."""
    if not is_gpu(target):
        return graph
    g = graph.copy()
    for node in g.nodes:
        weight = g.constants.get(node.inputs[1]) if node.op == "conv2d" else None
        if weight is None or node.attrs.get("weight_layout") or not winograd_pays_on_gpu(weight.shape, node.attrs):
            continue
        u = g.add_constant(f"{node.inputs[1]}_winograd", winograd_weights_ck(weight).astype(weight.dtype))
        node.op = "conv2d_winograd"
        node.inputs = (node.inputs[0], u, *node.inputs[2:])
        node.attrs = {"padding": node.attrs["padding"]}
    return g.prune()
