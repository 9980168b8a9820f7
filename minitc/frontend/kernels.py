"""Graph nodes as tensor expressions: `node_tensor(node, inputs)` gives the output tensor of a
node whose inputs are the placeholders `inputs`, built with `minitc.ops` (so the operator's
template schedules it). A `view` has no kernel: it is the same buffer with another shape.
"""

from __future__ import annotations

from minitc import ops
from minitc.errors import MinitcError
from minitc.expr import binary, call, const, select
from minitc.ops import nchwc, winograd
from minitc.ops.elementwise import broadcast_read
from minitc.te import compute

NO_KERNEL = ("view", "torch")


def _dense(n, x, w, b=None):
    a = n.attrs
    layout = {k: a[k] for k in ("weight_in_out", "weight_block", "out_features") if k in a}
    return ops.dense(x, w, b, activation=a.get("activation"), **layout)


def _matmul(n, a, b):
    return ops.matmul(a, b, n.attrs.get("transpose_a", False), n.attrs.get("transpose_b", False))


def _batch_matmul(n, a, b):
    return ops.batch_matmul(a, b, n.attrs.get("transpose_a", False), n.attrs.get("transpose_b", False))


def _conv(op):
    def build(n, x, w):
        a = n.attrs
        # conv2d's packed weights, whose rows may be padded past the output channels
        layout = {"weight_layout": a["weight_layout"], "out_channels": n.shape[1]} if "weight_layout" in a else {}
        return op(x, w, stride=a["stride"], padding=a["padding"], dilation=a["dilation"], **layout)

    return build


def _winograd(n, x, u):
    return winograd.conv2d_winograd_nchwc(x, u, padding=n.attrs["padding"])


def _winograd_nchw(n, x, u):
    return winograd.conv2d_winograd(x, u, padding=n.attrs["padding"])


def _pool(op):
    def build(n, x):
        return op(x, n.attrs["kernel"], n.attrs["stride"], n.attrs["padding"])

    return build


def _reduce(op):
    def build(n, x):
        return op(x, axis=n.attrs["axis"], keepdims=n.attrs["keepdims"])

    return build


def _binary(op):
    def build(n, x, y=None):
        return op(x, n.attrs["scalar"] if y is None else y)

    return build


def _unary(op):
    def build(n, x):
        return op(x)

    return build


def _clamp(n, x):
    low, high = n.attrs["low"], n.attrs["high"]
    y = x if low is None else ops.maximum(x, low)
    return y if high is None else ops.minimum(y, high)


def _scale_shift(n, x, scale, shift):
    return compute(
        x.shape,
        lambda *i: x[i] * broadcast_read(scale, i) + broadcast_read(shift, i),
        name=n.op,
        tag="elementwise",
        attrs={"op": "scale_shift"},
    )


def _permute(n, x):
    dims = n.attrs["dims"]
    inverse = [dims.index(d) for d in range(len(dims))]
    return compute(n.shape, lambda *i: x[tuple(i[inverse[d]] for d in range(len(dims)))], name=n.op, tag="elementwise")


def split_groups(source: tuple, shape: tuple):
    """For a view that only splits axes ([128, 768] -> [1, 128, 12, 64]): the view's axes that
    make up each axis of `source`, in order; None for any other view (one that merges axes)."""
    groups, j = [], 0
    for extent in source:
        group, size = [], 1
        while size < extent and j < len(shape):
            group.append(j)
            size *= shape[j]
            j += 1
        if size != extent:
            return None
        groups.append(group)
    return groups if all(e == 1 for e in shape[j:]) else None


def _view(n, x):
    """The same elements in another shape (inside a fused kernel, where views are index math):
    affine when the view only splits axes, else through the flat index."""
    groups = split_groups(tuple(x.shape), tuple(n.shape))
    if groups is not None:

        def combine(i, group):
            index = 0
            for d in group:
                index = index * n.shape[d] + i[d]
            return index

        return compute(n.shape, lambda *i: x[tuple(combine(i, g) for g in groups)], name=n.op, tag="elementwise")
    strides = [1] * len(x.shape)
    for d in range(len(x.shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * x.shape[d + 1]
    out_strides = [1] * len(n.shape)
    for d in range(len(n.shape) - 2, -1, -1):
        out_strides[d] = out_strides[d + 1] * n.shape[d + 1]

    def read(*i):
        flat = sum(v * st for v, st in zip(i, out_strides))
        return x[tuple((flat // st) % ext for st, ext in zip(strides, x.shape))]

    return compute(n.shape, read, name=n.op, tag="elementwise")


def _mask(n, x, extents):
    """x, with `fill` past the run-time extent of dynamic axis `axis` (minitc/frontend/dynamic.py):
    what reduces over that axis then sees its identity in the padding."""
    axis, fill = n.attrs["axis"], n.attrs["fill"]
    return compute(
        n.shape,
        lambda *i: select(i[axis] < extents[n.attrs["slot"]], x[i], const(fill, x.dtype)),
        name="mask",
        tag="elementwise",
    )


def _slice(n, x, extents=None):
    """x from `start` along `axis`; with dynamic shapes the start may be `extents[start_slot] +
    start` (the last token: `x[:, -1:]`), clamped into the axis."""
    axis, start, step = n.attrs["axis"], n.attrs["start"], n.attrs.get("step", 1)

    def index(i):
        if "start_slot" not in n.attrs:
            return i * step + start
        return _index_into(i * step + start + extents[n.attrs["start_slot"]], x.shape[axis])

    return compute(n.shape, lambda *i: x[i[:axis] + (index(i[axis]),) + i[axis + 1 :]], name=n.op, tag="elementwise")


def _pad(n, x):
    """x with `before` elements of `value` ahead of each axis (and the rest after it), and with
    `step - 1` of them between its elements along an axis of step > 1 (a transposed convolution's
    input); select-guarded reads."""
    before, steps = n.attrs["before"], n.attrs.get("step", (1,) * len(x.shape))

    def read(*i):
        inside, index = None, []
        for d, (a, step, extent) in enumerate(zip(before, steps, x.shape)):
            if a or step > 1 or n.shape[d] != extent:
                cond = (i[d] >= a) & (i[d] < a + (extent - 1) * step + 1)
                if step > 1:
                    cond = cond & ((i[d] - a) % step == 0)
                inside = cond if inside is None else inside & cond
            index.append(i[d] - a if step == 1 else (i[d] - a) // step)
        return select(inside, x[tuple(index)], n.attrs["value"])

    return compute(n.shape, read, name=n.op, tag="elementwise")


def _rsqrt(n, x):
    return compute(x.shape, lambda *i: 1.0 / call("sqrt", x[i]), name=n.op, tag="elementwise")


def _cat(n, *pieces):
    """Each output element read from the piece that holds it: a chain of selects on the axis.
    With dynamic shapes a piece's size along the axis may be `extents[slot]` (a key/value cache
    and the new token's key): `piece_slots` names them, and the extents are the last input."""
    axis, slots = n.attrs["axis"], n.attrs.get("piece_slots")
    if slots:
        *pieces, extents = pieces
    starts = [const(0, "int64")]
    for k, p in enumerate(pieces):
        size = extents[slots[k]] if slots and slots[k] is not None else const(p.shape[axis], "int64")
        starts.append(starts[-1] + size)

    def read(*i):
        def piece(k):
            at = i[axis] - starts[k]
            if slots:  # the selects' conditions read the extents, so they bound nothing: clamp
                at = _index_into(at, pieces[k].shape[axis])
            return pieces[k][i[:axis] + (at,) + i[axis + 1 :]]

        value = piece(len(pieces) - 1)
        for k in range(len(pieces) - 2, -1, -1):
            value = select(i[axis] < starts[k + 1], piece(k), value)
        return value

    return compute(n.shape, read, name=n.op, tag="elementwise")


def _roll(n, x):
    """x rotated along `axis`: out[..., i, ...] = x[..., (i + shift) % extent, ...] (torch.roll by
    -shift; frontend/rolls.py), as a select of two reads so that each index is affine."""
    axis, shift = n.attrs["axis"], n.attrs["shift"]
    extent = x.shape[axis]

    def read(*i):
        before, after = i[:axis], i[axis + 1 :]
        wrapped = x[before + (i[axis] + (shift - extent),) + after]
        return select(i[axis] < extent - shift, x[before + (i[axis] + shift,) + after], wrapped)

    return compute(n.shape, read, name=n.op, tag="elementwise")


def _index_into(index, extent: int):
    """`index` moved into [0, extent): an index computed from run-time extents (dynamic shapes)."""
    return binary("max", binary("min", index, const(extent - 1, "int64")), const(0, "int64"))


def _expand(n, x):
    return compute(n.shape, lambda *i: broadcast_read(x, i), name=n.op, tag="elementwise")


BUILDERS = {
    "dense": _dense,
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "conv2d": _conv(ops.conv2d),
    "depthwise_conv2d": _conv(ops.depthwise_conv2d),
    "conv2d_nchwc": _conv(nchwc.conv2d_nchwc),
    "conv2d_winograd_nchwc": _winograd,
    "conv2d_winograd": _winograd_nchw,
    "depthwise_conv2d_nchwc": _conv(nchwc.depthwise_conv2d_nchwc),
    "max_pool2d": _pool(ops.max_pool2d),
    "max_pool2d_nchwc": _pool(nchwc.max_pool2d_nchwc),
    "avg_pool2d_nchwc": _pool(nchwc.avg_pool2d_nchwc),
    "avg_pool2d": _pool(ops.avg_pool2d),
    "mean": _reduce(ops.mean),
    "sum": _reduce(ops.sum),
    "max": _reduce(ops.max),
    "softmax": lambda n, x: ops.softmax(x, safe=n.attrs.get("safe", False)),
    "layer_norm": lambda n, x, g, b: ops.layer_norm(x, g, b, eps=n.attrs["eps"]),
    "scale_shift": _scale_shift,
    "clamp": _clamp,
    "permute": _permute,
    "expand": _expand,
    "rsqrt": _rsqrt,
    "pad": _pad,
    "cat": _cat,
    "slice": _slice,
    "roll": _roll,
    "mask": _mask,
    "view": _view,
    **{op: _binary(getattr(ops, op)) for op in ("add", "sub", "mul", "div")},
    **{op: _unary(getattr(ops, op)) for op in ("relu", "gelu", "sigmoid", "tanh", "exp")},
}


# anchors whose epilogue only the GPU templates apply (templates/gpu/window.py, at the store): the
# CPU's NCHW depthwise and pooling templates take none, so fusion.py joins them on GPU targets only
GPU_EPILOGUE_TAGS = {op: op for op in ("depthwise_conv2d", "max_pool2d", "avg_pool2d")}
# the tag of a fused kernel's result, by its anchor: the template that computes the whole body
# per output tile of the anchor (conv2d's template finds the convolution under its epilogue)
EPILOGUE_TAGS = {
    "dense": "dense_epilogue",
    "conv2d": "conv2d",
    "conv2d_nchwc": "conv2d_nchwc",
    "conv2d_winograd_nchwc": "conv2d_winograd_nchwc",
    "conv2d_winograd": "conv2d_winograd",
    "depthwise_conv2d_nchwc": "depthwise_conv2d_nchwc",
    **GPU_EPILOGUE_TAGS,
}


def _fused(node, inputs: list):
    """The body's tensors built in order; with an anchor (dense, conv2d), the result is tagged
    for the anchor's epilogue template, which computes the whole body per output tile."""
    env = dict(zip(node.inputs, inputs))
    for member in node.body:
        env[member.name] = _one(member, [env[i] for i in member.inputs])
    out = env[node.body[-1].name]
    tag = next((EPILOGUE_TAGS[m.op] for m in node.body if m.op in EPILOGUE_TAGS), None)
    if tag is not None:
        out = compute(out.shape, lambda *i: out[i], name="epilogue", tag=tag)
    return out


def _one(node, inputs: list):
    if node.op not in BUILDERS:
        raise MinitcError(f"graph node {node.name}: no minitc kernel for the op {node.op!r}")
    return BUILDERS[node.op](node, *inputs)


def node_tensor(node, inputs: list):
    """The output tensor of `node` computed from the tensors `inputs`. A node with `limits`
    (dynamic shapes) takes the run-time extents as its last input, read by lowering only."""
    limits = node.attrs.get("limits")
    if limits:
        inputs = inputs[:-1]
    out = _fused(node, inputs) if node.body else _one(node, inputs)
    if limits:
        out.limits = dict(limits)
    if tuple(out.shape) != tuple(node.shape) or out.dtype != node.dtype:
        raise MinitcError(
            f"graph node {node.name} ({node.op}): the kernel computes {out.dtype}{list(out.shape)}, "
            f"the graph expects {node.dtype}{list(node.shape)}"
        )
    return out
