"""The operators the explorer offers (those `minitc tune` accepts, minitc/ops/calls.py) with
a default shape small enough to run and check in a second, and the tensor-expression code of
an operator call, which the page shows in its expression pane.

    catalog()                                   # [{"op": "matmul", "shape": "256,256,256", ...}]
    call = op_call("conv2d", "1,32,28,28,32,3,3", "padding=1")
    expression_code(call)                       # X = tc.placeholder(...); out = tc.ops.conv2d(...)
"""

from __future__ import annotations

import inspect

import minitc as tc
from minitc.errors import MinitcError
from minitc.ops.calls import FAMILIES, FAMILY_OF, OPTION_FLAGS, OpCall, OpCallError, parse_call

OUTPUT_VAR = "out"  # the variable the generated expression code assigns the output to

# family -> (shape, options) the page starts with
DEFAULTS = {
    "matmul": ("256,256,256", ""),
    "batch_matmul": ("4,128,128,64", ""),
    "dense": ("64,256,256", "bias activation=relu"),
    "conv2d": ("1,32,28,28,32,3,3", "padding=1"),
    "depthwise_conv2d": ("1,32,28,28,3,3", "padding=1"),
    "pool": ("1,32,56,56", "kernel=3 stride=2 padding=1"),
    "softmax": ("256,256", ""),
    "layer_norm": ("256,768", ""),
    "unary": ("512,512", ""),
    "binary": ("512,512", ""),
    "bias_add": ("1,32,28,28", ""),
    "reduce": ("512,512", "axis=1"),
}
FLAGS = ("keepdims", "bias", "transpose_a", "transpose_b")

CUSTOM_EXPRESSION = """\
# A tensor expression: placeholders, then compute / reduce_axis.
# The last tensor assigned is the output the schedule works on.
M, N, K = 256, 256, 256
A = tc.placeholder((M, K), "float32", name="A")
B = tc.placeholder((K, N), "float32", name="B")
k = tc.reduce_axis(K, name="k")
C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
"""


class OpError(MinitcError):
    """An unknown operator, a malformed shape or an option the operator does not take."""


def catalog() -> list:
    """Every operator with its family's shape syntax and the explorer's default arguments."""
    out = []
    for op, fam_name in FAMILY_OF.items():
        fam = FAMILIES[fam_name]
        shape, options = DEFAULTS[fam_name]
        out.append(
            {
                "op": op,
                "syntax": fam.syntax,
                "meaning": fam.meaning,
                "options": list(fam.options),
                "shape": shape,
                "default_options": options,
            }
        )
    return out


def parse_options(text: str) -> dict:
    """`"padding=1 stride=2,1 bias"` -> the options dict parse_call takes."""
    options = {}
    for token in (text or "").replace(";", " ").split():
        key, eq, value = token.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if key not in OPTION_FLAGS:
            raise OpError(f"unknown option {key!r}; options are {', '.join(OPTION_FLAGS)} (as name=value)")
        if key in FLAGS:
            options[key] = value.lower() not in ("0", "false", "no") if eq else True
        elif not eq or not value:
            raise OpError(f"option {key} needs a value, e.g. {key}=1")
        elif key == "eps":
            try:
                options[key] = float(value)
            except ValueError:
                raise OpError(f"eps must be a number, got {value!r}") from None
        else:
            options[key] = value
    return options


def op_call(op: str, shape: str, options: str = "") -> OpCall:
    """The OpCall of an operator, shape and options as typed into the page."""
    if op not in FAMILY_OF:
        raise OpError(f"unknown operator {op!r}; operators: {', '.join(FAMILY_OF)}")
    try:
        return parse_call(op, shape, parse_options(options))
    except OpCallError as e:
        hint = e.hint.lstrip("-")  # the page's fields, not command-line flags
        raise OpError(f"{hint}: {e.message}" if hint else e.message) from None


def _literal(value) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def expression_code(call: OpCall) -> str:
    """The placeholders and the `tc.ops` call of `call`, as Python."""
    names = list(inspect.signature(tc.ops.OPS[call.op].build).parameters)
    fam = FAMILIES[FAMILY_OF[call.op]]
    lines = [f"# {call.op}: {fam.meaning}"]
    for shape, name in zip(call.shapes, names):
        lines.append(f'{name} = tc.placeholder({tuple(shape)!r}, "float32", name="{name}")')
    args = names[: len(call.shapes)] + [f"{k}={_literal(v)}" for k, v in call.params]
    lines.append(f"{OUTPUT_VAR} = tc.ops.{call.op}({', '.join(args)})")
    return "\n".join(lines) + "\n"
