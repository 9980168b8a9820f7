"""ATen linear algebra to graph nodes: `linear`, `addmm`, `mm`, `bmm` as dense and matmul kernels."""

from __future__ import annotations

import math

import numpy as np

from minitc.frontend.aten_common import _floating, _require, converts
from minitc.frontend.aten_elementwise import _binary


def _flatten_leading(im, x: str) -> tuple:
    """x viewed as 2-D [rows, last] (dense reads 2-D), and the leading shape to restore."""
    shape = im.shape(x)
    _require(len(shape) >= 2)
    lead = shape[:-1]
    return im.view(x, (math.prod(lead), shape[-1])), lead


# --- linear algebra -----------------------------------------------------------------------------
@converts("aten.linear.default")
def linear(im, node, x, w, b=None):
    dtype = _floating(im, x, w, *([b] if b else []))
    _require(len(im.shape(w)) == 2 and (b is None or len(im.shape(b)) == 1))
    x2, lead = _flatten_leading(im, x)
    out = im.shape(w)[0]
    attrs = {}
    weight = im.constant_array(w)
    if weight is not None:  # transposed once here: the kernel packs [in, out] panels by plain copies
        w, attrs = im.constant(np.ascontiguousarray(weight.T), f"{w}_t"), {"weight_in_out": True}
    y = im.emit("dense", [x2, w] + ([b] if b else []), attrs, (im.shape(x2)[0], out), dtype, base=node.name)
    return im.view(y, (*lead, out))


@converts("aten.addmm.default")
def addmm(im, node, bias, a, b, beta=1, alpha=1):
    """`a @ b + bias`. With a constant [in, out] weight (GPT-2's Conv1D) and a [out] bias it is
    a dense layer reading the weight as it is stored (`weight_in_out`)."""
    _require(beta == 1 and alpha == 1)
    dtype = _floating(im, bias, a, b)
    _require(len(im.shape(a)) == 2 and len(im.shape(b)) == 2)
    shape = (im.shape(a)[0], im.shape(b)[1])
    weight = im.constant_array(b)
    if weight is not None and im.shape(bias) == (shape[1],):
        return im.emit("dense", [a, b, bias], {"weight_in_out": True}, shape, dtype, base=node.name)
    y = im.emit("matmul", [a, b], {}, shape, dtype, base=f"{node.name}_mm")
    return _binary(im, node, "add", y, bias)


@converts("aten.mm.default")
def mm(im, node, a, b):
    dtype = _floating(im, a, b)
    return im.emit("matmul", [a, b], {}, (im.shape(a)[0], im.shape(b)[1]), dtype, base=node.name)


@converts("aten.bmm.default")
def bmm(im, node, a, b):
    dtype = _floating(im, a, b)
    (batch, m, _), n = im.shape(a), im.shape(b)[2]
    return im.emit("batch_matmul", [a, b], {}, (batch, m, n), dtype, base=node.name)
