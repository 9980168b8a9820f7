"""Every graph op in PyTorch: what a node, or a fused group, runs when minitc fails to build its
kernel (an internal error; compiler.py falls back). Packed and blocked layouts (NCHW[c] data,
conv2d_nchwc's and Winograd's weights, dense's blocked weight) are unpacked here, so that any
node the passes produce can run, whatever pass produced it.

    y = run_node(node, [x, w])      # torch tensors in, a torch tensor out

`torch_node(node, reason)` is the same node as a `torch` node of the graph (the runtime calls
`GraphOp(node)` with its inputs).
"""

from __future__ import annotations

from minitc.errors import MinitcError
from minitc.frontend.fallback import INTERNAL
from minitc.frontend.graph import Node
from minitc.frontend.importer import Ref


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _unblock(x):
    """[N, C/c, H, W, c] -> [N, C, H, W]."""
    n, cb, h, w, c = x.shape
    return x.permute(0, 1, 4, 2, 3).reshape(n, cb * c, h, w)


def _block(x, c: int):
    """[N, C, H, W] -> [N, C/c, H, W, c]."""
    n, k, h, w = x.shape
    return x.reshape(n, k // c, c, h, w).permute(0, 1, 3, 4, 2).contiguous()


def _conv_args(a: dict) -> dict:
    return {"stride": _pair(a["stride"]), "padding": _pair(a["padding"]), "dilation": _pair(a["dilation"])}


def _conv2d(n, x, w):
    import torch.nn.functional as F

    if n.attrs.get("weight_layout") == "CRSK":  # [C, R, S, K + padding] -> [K, C, R, S]
        w = w.permute(3, 0, 1, 2)[: n.shape[1]]
    return F.conv2d(x, w, **_conv_args(n.attrs))


def _depthwise(x, w, attrs: dict):
    import torch.nn.functional as F

    w = w.reshape(w.shape[0], 1, w.shape[-2], w.shape[-1])  # [K, 1, R, S] or [K, R, S]
    return F.conv2d(x, w, groups=x.shape[1], **_conv_args(attrs))


def _conv2d_nchwc(n, x, w):
    import torch.nn.functional as F

    kb_, cb_, r, s, cb, kb = w.shape  # to_blocked_weight's [K/kb, C/cb, R, S, cb, kb]
    w = w.permute(0, 5, 1, 4, 2, 3).reshape(kb_ * kb, cb_ * cb, r, s)
    return _block(F.conv2d(_unblock(x), w, **_conv_args(n.attrs)), kb)


def _filters(u):
    """The 3x3 filters [K, C, 3, 3] of Winograd weights U [4, 4, K, C] = G g G^T (G has full
    column rank: pinv(G) G = I recovers g exactly, up to rounding)."""
    import torch

    from minitc.ops.winograd import G

    g = torch.linalg.pinv(torch.tensor(G, dtype=torch.float64, device=u.device))
    return torch.einsum("ia,abkc,jb->kcij", g, u.double(), g).to(u.dtype)


def _winograd_nchwc(n, x, u):
    import torch.nn.functional as F

    p, q, kb_, cb_, cb, kb = u.shape  # winograd_weights' [4, 4, K/kb, C/cb, cb, kb]
    u = u.permute(0, 1, 2, 5, 3, 4).reshape(p, q, kb_ * kb, cb_ * cb)
    return _block(F.conv2d(_unblock(x), _filters(u), padding=_pair(n.attrs["padding"])), kb)


def _winograd(n, x, u):
    import torch.nn.functional as F

    return F.conv2d(x, _filters(u.permute(0, 1, 3, 2)), padding=_pair(n.attrs["padding"]))  # U [4, 4, C, K]


def _depthwise_nchwc(n, x, w):
    cb_, r, s, c = w.shape
    return _block(_depthwise(_unblock(x), w.permute(0, 3, 1, 2).reshape(cb_ * c, r, s), n.attrs), c)


def _pool(kind: str, blocked: bool):
    def run(n, x):
        import torch.nn.functional as F

        a = n.attrs
        stride = a["kernel"] if a.get("stride") is None else a["stride"]
        args = (_pair(a["kernel"]), _pair(stride), _pair(a["padding"]))
        y = _unblock(x) if blocked else x
        y = F.max_pool2d(y, *args) if kind == "max" else F.avg_pool2d(y, *args, count_include_pad=True)
        return _block(y, x.shape[-1]) if blocked else y

    return run


def _dense(n, x, w, b=None):

    a = n.attrs
    if a.get("weight_block"):  # [OUT/B, IN, B] -> [IN, OUT]
        rows = w.permute(1, 0, 2).reshape(w.shape[1], -1)[:, : n.shape[-1]]
    else:
        rows = w if a.get("weight_in_out") else w.t()
    y = x @ rows
    if b is not None:
        y = y + b
    return ACTIVATIONS[a["activation"]](y) if a.get("activation") else y


def _matmul(n, a, b):
    a = a.transpose(-1, -2) if n.attrs.get("transpose_a") else a
    b = b.transpose(-1, -2) if n.attrs.get("transpose_b") else b
    return a @ b


def _reduce(fn: str):
    def run(n, x):
        import torch

        axis = n.attrs.get("axis")
        axes = tuple(range(x.ndim)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
        if fn == "max":
            return torch.amax(x, dim=axes, keepdim=n.attrs["keepdims"])
        return getattr(torch, fn)(x, dim=axes, keepdim=n.attrs["keepdims"])

    return run


def _softmax(n, x):
    import torch

    y = torch.softmax(x, dim=-1)
    if n.attrs.get("safe"):  # a row of -inf gives 0, not NaN
        y = torch.where(torch.isneginf(x).all(dim=-1, keepdim=True), torch.zeros_like(y), y)
    return y


def _layer_norm(n, x, g, b):
    import torch.nn.functional as F

    return F.layer_norm(x, x.shape[-1:], g, b, eps=n.attrs["eps"])


def _clamp(n, x):
    import torch

    return torch.clamp(x, n.attrs["low"], n.attrs["high"])


def _pad(n, x):
    """x with `before` elements of `value` ahead of each axis, `step - 1` between elements."""
    import torch

    out = torch.full(n.shape, n.attrs["value"], dtype=x.dtype, device=x.device)
    steps = n.attrs.get("step", (1,) * x.ndim)
    out[tuple(slice(a, a + (e - 1) * s + 1, s) for a, s, e in zip(n.attrs["before"], steps, x.shape))] = x
    return out


def _slice(n, x):
    axis, start, step = n.attrs["axis"], n.attrs["start"], n.attrs.get("step", 1)
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, start + (n.shape[axis] - 1) * step + 1, step)
    return x[tuple(index)]


def _cat(n, *pieces):
    import torch

    return torch.cat(pieces, dim=n.attrs["axis"])


def _binary(fn: str):
    def run(n, x, y=None):
        import torch

        return getattr(torch, fn)(x, n.attrs["scalar"] if y is None else y)

    return run


def _unary(fn: str):
    def run(n, x):
        import torch

        return getattr(torch, fn)(x)

    return run


def _gelu(x):
    import torch.nn.functional as F

    return F.gelu(x)  # exact (erf), as minitc's


ACTIVATIONS = {
    "relu": lambda x: x.clamp_min(0),
    "gelu": _gelu,
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
}


TORCH_OPS = {
    "dense": _dense,
    "matmul": _matmul,
    "batch_matmul": _matmul,
    "conv2d": _conv2d,
    "depthwise_conv2d": lambda n, x, w: _depthwise(x, w, n.attrs),
    "conv2d_nchwc": _conv2d_nchwc,
    "conv2d_winograd_nchwc": _winograd_nchwc,
    "conv2d_winograd": _winograd,
    "depthwise_conv2d_nchwc": _depthwise_nchwc,
    "max_pool2d": _pool("max", False),
    "avg_pool2d": _pool("avg", False),
    "max_pool2d_nchwc": _pool("max", True),
    "avg_pool2d_nchwc": _pool("avg", True),
    "mean": _reduce("mean"),
    "sum": _reduce("sum"),
    "max": _reduce("max"),
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "scale_shift": lambda n, x, scale, shift: x * scale + shift,
    "clamp": _clamp,
    "permute": lambda n, x: x.permute(*n.attrs["dims"]),
    "expand": lambda n, x: x.expand(n.shape),
    "rsqrt": lambda n, x: x.rsqrt(),
    "pad": _pad,
    "cat": _cat,
    "slice": _slice,
    "roll": lambda n, x: x.roll(-n.attrs["shift"], n.attrs["axis"]),
    "view": lambda n, x: x.reshape(n.shape),
    **{op: _binary(op) for op in ("add", "sub", "mul", "div")},
    **{op: (lambda fn: lambda n, x: fn(x))(fn) for op, fn in ACTIVATIONS.items()},
    "exp": _unary("exp"),
}


def runs_in_torch(node: Node) -> bool:
    """Whether `node` (a fused node: each member) has a PyTorch form here. Dynamic shapes' nodes
    (run-time extents) do not."""
    members = node.body or (node,)
    return all(m.op in TORCH_OPS and not any(k in m.attrs for k in ("limits", "slot", "start_slot", "piece_slots"))
               for m in members)  # fmt: skip


def run_node(node: Node, inputs: list):
    """`node`'s value computed by PyTorch from the torch tensors `inputs` (a fused node: its
    members in order)."""
    import torch

    env = dict(zip(node.inputs, inputs))
    for member in node.body or (node,):
        env[member.name] = TORCH_OPS[member.op](member, *[env[i] for i in member.inputs])
    out = env[(node.body or (node,))[-1].name]
    if tuple(out.shape) != tuple(node.shape):
        raise MinitcError(f"graph node {node.name}: PyTorch computes {list(out.shape)}, the graph expects {node.shape}")
    return out.to(getattr(torch, node.dtype)).contiguous()


class GraphOp:
    """The call of a `torch` node that runs a graph node through PyTorch (runtime.call_torch
    calls it with the node's inputs as torch tensors)."""

    def __init__(self, node: Node):
        self.node = node

    def __call__(self, *inputs):
        return run_node(self.node, list(inputs))

    def __str__(self) -> str:
        return f"minitc.{self.node.op}"


def torch_node(node: Node, reason: str) -> Node:
    """`node` as a `torch` node of the graph: the same name, inputs, shape and dtype, run by
    PyTorch through GraphOp."""
    ops = ", ".join(m.op for m in node.body) if node.body else node.op
    target = f"minitc.fused[{ops}]" if node.body else f"minitc.{node.op}"
    attrs = {"target": target, "reason": INTERNAL + reason}
    call = (GraphOp(node), tuple(Ref(i) for i in node.inputs), {})
    return Node(node.name, "torch", node.inputs, attrs, node.shape, node.dtype, call)
