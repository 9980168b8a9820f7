"""The operator-call vocabulary: which operators a command or the explorer can name, what
numbers their shape takes per family, which options apply, and the `tc.ops` call they make. The
command line (commands/spec.py: its click options and help) and the explorer both read it.

    call = parse_call("conv2d", "1,64,56,56,64,3,3", {"stride": "1", "padding": "1"})
    out = call.build()                 # float32 placeholders named after tc.ops' parameters
    call.flops(), call.bytes()         # work of one call (flops: None for memory-bound ops)
    flops("matmul", (512, 512), (512, 512))   # the same from input shapes, like a tc.ops call
    command_args(call)                 # ["conv2d", "--shape", "1,64,56,56,64,3,3", "--padding", "1"]

A malformed call raises `OpCallError`, whose `hint` names the flag at fault (`--shape`, ...).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from minitc.errors import MinitcError
from minitc.ops._util import window_output_size
from minitc.ops.registry import OPS
from minitc.te import placeholder

F32 = "float32"
ACTIVATIONS = ("relu", "gelu", "sigmoid", "tanh")


@dataclass(frozen=True)
class Family:
    syntax: str  # what --shape takes
    example: str  # a full example of the op's arguments
    meaning: str
    options: tuple = ()  # the op options (see OPTION_FLAGS) that apply


FAMILIES = {
    "matmul": Family("M,N,K", "--shape 512,512,512", "A[M,K] @ B[K,N]", ("transpose_a", "transpose_b")),
    "batch_matmul": Family("B,M,N,K", "--shape 12,128,128,64", "A[B,M,K] @ B[B,K,N]", ("transpose_a", "transpose_b")),
    "dense": Family(
        "M,IN,OUT",
        "--shape 128,768,3072 --bias --activation relu",
        "X[M,IN] @ W[OUT,IN].T (+ bias[OUT]) (+ activation)",
        ("bias", "activation"),
    ),
    "conv2d": Family(
        "N,C,H,W,K,R,S",
        "--shape 1,64,56,56,64,3,3 --stride 1 --padding 1",
        "X[N,C,H,W] conv W[K,C,R,S]",
        ("stride", "padding", "dilation"),
    ),
    "depthwise_conv2d": Family(
        "N,C,H,W,R,S[,M]",
        "--shape 1,128,56,56,3,3 --padding 1",
        "X[N,C,H,W] conv W[C*M,1,R,S] (M: channel multiplier, default 1)",
        ("stride", "padding", "dilation"),
    ),
    "pool": Family(
        "N,C,H,W",
        "--shape 1,64,112,112 --kernel 3 --stride 2 --padding 1",
        "X[N,C,H,W]; --kernel is required, --stride defaults to it",
        ("kernel", "stride", "padding"),
    ),
    "softmax": Family("D0,D1,...", "--shape 1536,128 [--axis -1]", "along --axis (default -1)", ("axis",)),
    "layer_norm": Family("D0,...,D", "--shape 512,768 [--eps 1e-5]", "over the last axis; gamma, beta [D]", ("eps",)),
    "unary": Family("D0,D1,...", "--shape 1024,1024", "elementwise on X", ()),
    "binary": Family(
        "D0,...[:E0,...]",
        "--shape 1024,1024  or  --shape 64,1,32:8,1",
        "X op Y; Y has X's shape unless given after ':' (numpy broadcasting)",
        (),
    ),
    "bias_add": Family("D0,D1,...", "--shape 1,64,56,56 [--axis 1]", "X + bias[D_axis] (--axis default 1)", ("axis",)),
    "reduce": Family(
        "D0,D1,...",
        "--shape 4096,4096 --axis 1 [--keepdims]",
        "over --axis: an int, a list like 0,2, or 'all' (default)",
        ("axis", "keepdims"),
    ),
}

FAMILY_OF = {
    "matmul": "matmul",
    "batch_matmul": "batch_matmul",
    "dense": "dense",
    "conv2d": "conv2d",
    "depthwise_conv2d": "depthwise_conv2d",
    "max_pool2d": "pool",
    "avg_pool2d": "pool",
    "softmax": "softmax",
    "layer_norm": "layer_norm",
    "bias_add": "bias_add",
    **{op: "unary" for op in ("relu", "gelu", "sigmoid", "tanh", "exp")},
    **{op: "binary" for op in ("add", "sub", "mul", "div", "maximum", "minimum")},
    **{op: "reduce" for op in ("sum", "max", "min", "mean")},
}

# option name -> how it is written on the command line (the explorer takes the names)
OPTION_FLAGS = {
    "stride": "--stride",
    "padding": "--padding",
    "dilation": "--dilation",
    "kernel": "--kernel",
    "axis": "--axis",
    "keepdims": "--keepdims",
    "bias": "--bias",
    "activation": "--activation",
    "eps": "--eps",
    "transpose_a": "--transpose-a",
    "transpose_b": "--transpose-b",
}


# ---------------------------------------------------------------------------------------------
# one call of an op


@dataclass(frozen=True)
class OpCall:
    op: str
    shapes: tuple  # input tensor shapes, in the order of tc.ops.<op>'s tensor parameters
    params: tuple = ()  # (name, value) keyword arguments of tc.ops.<op>

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    def build(self):
        """Placeholders (named after the op's parameters) and the output tensor."""
        fn = OPS[self.op].build
        names = list(inspect.signature(fn).parameters)
        phs = [placeholder(s, F32, name=n) for s, n in zip(self.shapes, names)]
        return fn(*phs, **self.kwargs)

    def flops(self):
        return flops(self.op, *self.shapes, **self.kwargs)

    def bytes(self, out_shape=None) -> int:
        """Bytes of one call: every input read once and the output written once."""
        out_shape = out_shape if out_shape is not None else self.build().shape
        return 4 * sum(_prod(s) for s in (*self.shapes, out_shape))

    def label(self) -> str:
        """A short name, e.g. `conv2d 1x64x56x56 64x64x3x3 padding=1`."""
        parts = [self.op] + ["x".join(map(str, s)) for s in self.shapes]
        parts += [f"{k}={v}" for k, v in self.params if v not in (None, False)]
        return " ".join(parts)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _pair(v) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def flops(op: str, *shapes, **params):
    """Floating-point operations of one call of `tc.ops.<op>` on inputs of these shapes (a
    multiply-add counts 2), or None where FLOPs are not the measure (memory-bound ops). For
    dense, the product only (bias and activation are O(M*OUT))."""
    if op == "matmul":
        (a0, a1), (b0, b1) = shapes[:2]
        m, k = (a1, a0) if params.get("transpose_a") else (a0, a1)
        n = b0 if params.get("transpose_b") else b1
        return 2.0 * m * n * k
    if op == "batch_matmul":
        a, b = shapes[:2]
        m, k = (a[2], a[1]) if params.get("transpose_a") else (a[1], a[2])
        n = b[1] if params.get("transpose_b") else b[2]
        return 2.0 * max(a[0], b[0]) * m * n * k
    if op == "dense":
        (m, k), (n, _) = shapes[:2]
        return 2.0 * m * n * k
    if op in ("conv2d", "depthwise_conv2d"):
        (n, c, h, w), wshape = shapes[:2]
        k, r, s = wshape[0], wshape[-2], wshape[-1]
        (sh, sw), (ph, pw), (dh, dw) = (
            _pair(params.get(p, d)) for p, d in (("stride", 1), ("padding", 0), ("dilation", 1))
        )
        oh, ow = window_output_size(h, ph, r, sh, dh), window_output_size(w, pw, s, sw, dw)
        per_output = (c if op == "conv2d" else 1) * r * s
        return 2.0 * n * k * oh * ow * per_output
    return None


# ---------------------------------------------------------------------------------------------
# parsing


class OpCallError(MinitcError):
    """An unknown operator, a malformed shape or an option the operator does not take; `hint`
    names what is at fault as the command line writes it (`OP`, `--shape`, `--axis`, ...)."""

    def __init__(self, message: str, hint: str = "--shape"):
        super().__init__(message)
        self.message, self.hint = message, hint


def _bad(msg: str, hint: str = "--shape"):
    return OpCallError(msg, hint)


def _ints(text: str, what: str, hint: str) -> tuple:
    items = [t.strip() for t in re.split(r"[,x]", text.strip()) if t.strip()]
    try:
        values = tuple(int(t) for t in items)
    except ValueError:
        raise _bad(f"{what}: expected comma-separated integers, got {text!r}", hint) from None
    if not values or any(v < 1 for v in values):
        raise _bad(f"{what}: sizes must be integers >= 1, got {text!r}", hint)
    return values


def _int_or_pair(text, flag: str, minimum: int):
    if text is None:
        return None
    values = [t.strip() for t in str(text).split(",")]
    try:
        ints = [int(v) for v in values]
    except ValueError:
        raise _bad(f"expected an int or H,W, got {text!r}", flag) from None
    if len(ints) not in (1, 2) or any(v < minimum for v in ints):
        raise _bad(f"expected an int or H,W of integers >= {minimum}, got {text!r}", flag)
    return ints[0] if len(ints) == 1 else tuple(ints)


def _axis(text, multiple: bool):
    if text is None:
        return None
    if multiple and text.strip().lower() in ("all", "none"):
        return None
    try:
        axes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise _bad(
            f"expected an int{' or a list like 0,2 or all' if multiple else ''}, got {text!r}", "--axis"
        ) from None
    if not axes or (len(axes) > 1 and not multiple):
        raise _bad(f"expected {'axes like 0,2' if multiple else 'one int'}, got {text!r}", "--axis")
    return axes[0] if len(axes) == 1 else axes


def check_op(op: str, hint: str = "OP") -> str:
    if op in FAMILY_OF:
        return op
    import difflib

    close = difflib.get_close_matches(op, list(FAMILY_OF), n=3)
    close_text = f" Did you mean {' or '.join(close)}?" if close else ""
    raise OpCallError(f"unknown op {op!r}.{close_text} Ops: {', '.join(FAMILY_OF)}.", hint)


def parse_call(op: str, shape: str | None, options: dict, hint: str = "OP") -> OpCall:
    """The OpCall of `OP --shape SHAPE [options]`; raises OpCallError for an unknown op, a
    malformed shape or an option the op does not take."""
    fam_name = FAMILY_OF[check_op(op, hint)]
    fam = FAMILIES[fam_name]
    if not shape:
        raise OpCallError(f"{op} needs --shape {fam.syntax}, e.g. {op} {fam.example}", "--shape")
    for name in options:
        if name not in fam.options:
            takes = ", ".join(OPTION_FLAGS[o] for o in fam.options) or "no options"
            raise _bad(f"does not apply to {op} (it takes {takes})", OPTION_FLAGS[name])
    call = _PARSERS[fam_name](op, shape, options, fam)
    try:
        out = call.build()  # shape errors of tc.ops (e.g. a kernel larger than the input)
    except Exception as e:  # noqa: BLE001 - any tc.ops rejection is a usage error here
        raise _bad(f"{type(e).__name__}: {e}") from None
    del out
    return call


def _need(op, shape, fam, counts) -> tuple:
    dims = _ints(shape, op, "--shape")
    if len(dims) not in counts:
        raise _bad(
            f"{op} takes {fam.syntax} ({' or '.join(map(str, counts))} numbers), got {shape!r}; e.g. {op} {fam.example}"
        )
    return dims


def _parse_matmul(op, shape, o, fam):
    ta, tb = bool(o.get("transpose_a")), bool(o.get("transpose_b"))
    if op == "matmul":
        m, n, k = _need(op, shape, fam, (3,))
        a, b = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    else:
        bt, m, n, k = _need(op, shape, fam, (4,))
        a, b = ((bt, k, m) if ta else (bt, m, k)), ((bt, n, k) if tb else (bt, k, n))
    return OpCall(op, (a, b), (("transpose_a", ta), ("transpose_b", tb)))


def _parse_dense(op, shape, o, fam):
    m, i, n = _need(op, shape, fam, (3,))
    shapes = ((m, i), (n, i)) + (((n,),) if o.get("bias") else ())
    return OpCall(op, shapes, (("activation", o.get("activation")),))


def _conv_params(o, pool=False):
    params = [
        ("stride", _int_or_pair(o.get("stride"), "--stride", 1) or (None if pool else 1)),
        ("padding", _int_or_pair(o.get("padding"), "--padding", 0) or 0),
    ]
    if not pool:
        params.append(("dilation", _int_or_pair(o.get("dilation"), "--dilation", 1) or 1))
    return tuple(params)


def _parse_conv(op, shape, o, fam):
    if op == "conv2d":
        n, c, h, w, k, r, s = _need(op, shape, fam, (7,))
        return OpCall(op, ((n, c, h, w), (k, c, r, s)), _conv_params(o))
    dims = _need(op, shape, fam, (6, 7))
    n, c, h, w, r, s = dims[:6]
    mult = dims[6] if len(dims) == 7 else 1
    return OpCall(op, ((n, c, h, w), (c * mult, 1, r, s)), _conv_params(o))


def _parse_pool(op, shape, o, fam):
    dims = _need(op, shape, fam, (4,))
    kernel = _int_or_pair(o.get("kernel"), "--kernel", 1)
    if kernel is None:
        raise _bad(f"{op} needs --kernel (an int or H,W), e.g. {op} {fam.example}", "--kernel")
    return OpCall(op, (dims,), (("kernel", kernel),) + _conv_params(o, pool=True))


def _parse_any_rank(op, shape, o, fam):
    fam_name = FAMILY_OF[op]
    if fam_name == "binary":
        x_text, _, y_text = shape.partition(":")
        x = _ints(x_text, op, "--shape")
        y = _ints(y_text, op, "--shape") if y_text.strip() else x
        return OpCall(op, (x, y))
    dims = _ints(shape, op, "--shape")
    if fam_name == "unary":
        return OpCall(op, (dims,))
    if fam_name == "softmax":
        return OpCall(op, (dims,), (("axis", -1 if o.get("axis") is None else _axis(o["axis"], False)),))
    if fam_name == "layer_norm":
        return OpCall(op, (dims, dims[-1:], dims[-1:]), (("eps", 1e-5 if o.get("eps") is None else o["eps"]),))
    if fam_name == "bias_add":
        ax = 1 if o.get("axis") is None else _axis(o["axis"], False)
        if not -len(dims) <= ax < len(dims):
            raise _bad(f"axis {ax} is out of range for shape {dims}", "--axis")
        return OpCall(op, (dims, (dims[ax],)), (("axis", ax),))
    return OpCall(op, (dims,), (("axis", _axis(o.get("axis"), True)), ("keepdims", bool(o.get("keepdims")))))


_PARSERS = {
    "matmul": _parse_matmul,
    "batch_matmul": _parse_matmul,
    "dense": _parse_dense,
    "conv2d": _parse_conv,
    "depthwise_conv2d": _parse_conv,
    "pool": _parse_pool,
    **{f: _parse_any_rank for f in ("softmax", "layer_norm", "unary", "binary", "bias_add", "reduce")},
}


_DEFAULT_VALUES = {"stride": (1, None), "padding": (0,), "dilation": (1,), "eps": (1e-5,), "keepdims": (False,)}
_DEFAULT_AXIS = {"softmax": -1, "bias_add": 1, "reduce": None}


def _joined(*dims) -> str:
    return ",".join(str(d) for d in dims)


def shape_text(call: OpCall) -> str:
    """The --shape value that gives `call` (the inverse of the family's parser)."""
    fam, (x, *rest) = FAMILY_OF[call.op], call.shapes
    if fam in ("matmul", "batch_matmul"):
        (a0, a1), (b0, b1) = x[-2:], rest[0][-2:]
        m, k = (a1, a0) if call.kwargs.get("transpose_a") else (a0, a1)
        n = b0 if call.kwargs.get("transpose_b") else b1
        return _joined(m, n, k) if fam == "matmul" else _joined(max(x[0], rest[0][0]), m, n, k)
    if fam == "dense":
        return _joined(x[0], x[1], rest[0][0])
    if fam == "conv2d":
        w = rest[0]
        return _joined(*x, w[0], *w[2:])
    if fam == "depthwise_conv2d":
        w = rest[0]
        mult = w[0] // x[1]
        return _joined(*x, *w[-2:], *((mult,) if mult != 1 else ()))
    if fam == "binary" and rest[0] != x:
        return _joined(*x) + ":" + _joined(*rest[0])
    return _joined(*x)


def command_args(call: OpCall) -> list:
    """The `OP --shape ... [options]` arguments that give `call` (shown by `minitc show`);
    options at their default values are left out."""
    out = [call.op, "--shape", shape_text(call)]
    if call.op == "dense" and len(call.shapes) == 3:
        out.append("--bias")
    for k, v in call.params:
        pool_stride = k == "stride" and FAMILY_OF[call.op] == "pool"  # defaults to the kernel, not 1
        if v is None or v is False or (v in _DEFAULT_VALUES.get(k, ()) and not pool_stride):
            continue
        if k == "axis" and v == _DEFAULT_AXIS.get(FAMILY_OF[call.op]):
            continue
        out += [OPTION_FLAGS[k]] if v is True else [OPTION_FLAGS[k], _joined(*v) if isinstance(v, tuple) else str(v)]
    return out
