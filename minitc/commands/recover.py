"""From a workload in the records database back to tensors, for `minitc show <workload-key>`.

The database keeps a workload's key and description (`float32` tag, input and output shapes),
not the Python that built it. `calls_for(description)` lists the `tc.ops` calls (spec.OpCall)
that fit the description, trying the usual parameter values (square strides, paddings and
dilations up to a few, every axis choice, common layer_norm epsilons); `recover(key,
description)` keeps the first whose workload key matches. A workload built some other way
(a hand-written `tc.compute`, an unusual parameter) is not recovered: then `show` needs the
`<op> --shape ...` form.
"""

from __future__ import annotations

import itertools
import re

from minitc.autotune.workload_key import workload_key
from minitc.ops import window_output_size
from minitc.ops.calls import ACTIVATIONS, OpCall

_SHAPE = re.compile(r"\[([^\]]*)\]")
_MAX_CANDIDATES = 2000


def parse_description(description: str):
    """(tag, dtype, input shapes, output shape) of a `describe()` string, or None."""
    m = re.match(r"^(\S+) (\w+)(.*)->(\[[^\]]*\])$", description.strip())
    if not m:
        return None
    tag, dtype, ins, out = m.groups()
    shape = lambda s: tuple(int(x) for x in s.split(",") if x.strip())  # noqa: E731
    return tag, dtype, [shape(s) for s in _SHAPE.findall(ins)], shape(_SHAPE.findall(out)[0])


def _matmul_calls(op, ins, out):
    if len(ins) != 2:
        return
    for ta, tb in itertools.product((False, True), repeat=2):
        call = OpCall(op, tuple(ins), (("transpose_a", ta), ("transpose_b", tb)))
        yield call


def _dense_calls(tag, ins, out):
    if len(ins) not in (2, 3):
        return
    acts = (None,) if tag == "dense" else (None,) + ACTIVATIONS
    for act in acts:
        yield OpCall("dense", tuple(ins), (("activation", act),))


def _conv_calls(op, ins, out):
    if len(ins) != 2 or len(ins[0]) != 4 or len(out) != 4:
        return
    (_, _, h, w), wshape = ins
    r, s = wshape[-2], wshape[-1]
    for stride, dil in itertools.product(range(1, 5), range(1, 4)):
        for pad in range(0, max(r, s) * dil):
            if (window_output_size(h, pad, r, stride, dil), window_output_size(w, pad, s, stride, dil)) == out[2:]:
                yield OpCall(op, tuple(ins), (("stride", stride), ("padding", pad), ("dilation", dil)))


def _pool_calls(op, ins, out):
    if len(ins) != 1 or len(ins[0]) != 4 or len(out) != 4:
        return
    h, w = ins[0][2:]
    for kernel in range(1, 8):
        for stride in (None, *range(1, 5)):
            for pad in range(0, kernel // 2 + 1):
                st = stride or kernel
                if (window_output_size(h, pad, kernel, st), window_output_size(w, pad, kernel, st)) == out[2:]:
                    yield OpCall(op, tuple(ins), (("kernel", kernel), ("stride", stride), ("padding", pad)))


def _elementwise_calls(ins, out):
    if len(ins) == 1:
        for op in ("relu", "gelu", "sigmoid", "tanh", "exp"):
            yield OpCall(op, tuple(ins))
    elif len(ins) == 2:
        for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
            yield OpCall(op, tuple(ins))
        x, b = ins
        if len(b) == 1:
            for ax in range(len(x)):
                if x[ax] == b[0]:
                    yield OpCall("bias_add", tuple(ins), (("axis", ax),))


def _reduce_calls(ins, out):
    if len(ins) != 1:
        return
    (x,) = ins
    for n in range(1, len(x) + 1):
        for axes in itertools.combinations(range(len(x)), n):
            for keepdims in (False, True):
                kept = (
                    tuple(1 if d in axes else e for d, e in enumerate(x))
                    if keepdims
                    else tuple(e for d, e in enumerate(x) if d not in axes)
                )
                if (kept or (1,)) != tuple(out):
                    continue
                axis = None if n == len(x) else (axes[0] if n == 1 else axes)
                for op in ("sum", "max", "min", "mean"):
                    yield OpCall(op, (x,), (("axis", axis), ("keepdims", keepdims)))


def calls_for(description: str) -> list:
    """Candidate calls for a workload description (possibly none, possibly several)."""
    parsed = parse_description(description)
    if parsed is None:
        return []
    tag, dtype, ins, out = parsed
    if dtype != "float32":
        return []
    if tag in ("matmul", "batch_matmul"):
        gen = _matmul_calls(tag, ins, out)
    elif tag in ("dense", "dense_epilogue"):
        gen = _dense_calls(tag, ins, out)
    elif tag in ("conv2d", "depthwise_conv2d"):
        gen = _conv_calls(tag, ins, out)
    elif tag in ("max_pool2d", "avg_pool2d"):
        gen = _pool_calls(tag, ins, out)
    elif tag == "softmax" and len(ins) == 1:
        gen = (OpCall("softmax", tuple(ins), (("axis", ax),)) for ax in range(-1, -len(ins[0]) - 1, -1))
    elif tag == "layer_norm" and len(ins) == 3:
        gen = (OpCall("layer_norm", tuple(ins), (("eps", eps),)) for eps in (1e-5, 1e-6, 1e-12, 1e-3, 1e-8))
    elif tag == "elementwise":
        gen = _elementwise_calls(ins, out)
    elif tag == "reduce":
        gen = _reduce_calls(ins, out)
    else:
        return []
    return list(itertools.islice(gen, _MAX_CANDIDATES))


def recover(key: str, description: str):
    """The OpCall whose workload key is `key`, or None."""
    for call in calls_for(description):
        try:
            if workload_key(call.build()) == key:
                return call
        except Exception:  # noqa: BLE001 - a candidate tc.ops rejects is simply not it
            continue
    return None
