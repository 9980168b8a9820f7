"""The command line's side of the `<op> --shape ...` syntax of `minitc tune`, `minitc show` and
`minitc explain`: the click options, their help, and `parse_call`, whose errors are click's
usage errors (exit code 2). The vocabulary itself (families, options, `OpCall`) is
minitc/ops/calls.py, which the explorer reads too.
"""

from __future__ import annotations

import click

from minitc.ops import calls
from minitc.ops.calls import ACTIVATIONS, FAMILIES, FAMILY_OF, OPTION_FLAGS, OpCall, OpCallError


def shape_help() -> str:
    """The --shape syntax of every op family, for --help (click keeps `\\b` blocks as they are)."""
    groups = {}
    for op, fam in FAMILY_OF.items():
        groups.setdefault(fam, []).append(op)
    lines = ["\b", "OP and --shape (float32 inputs):"]
    for fam, ops in groups.items():
        f = FAMILIES[fam]
        lines.append(f"  {'/'.join(ops)}: {f.syntax}  {f.meaning}")
        lines.append(f"      e.g. {ops[0]} {f.example}")
    return "\n".join(lines)


def op_options(fn):
    """Add --shape and the op options to a click command (order: as they appear in --help)."""
    opts = [
        click.option("--shape", help="The op's sizes, comma-separated (see the table above)."),
        click.option("--stride", help="conv/pool stride: an int or H,W."),
        click.option("--padding", help="conv/pool padding: an int or H,W."),
        click.option("--dilation", help="conv dilation: an int or H,W."),
        click.option("--kernel", help="pool window: an int or H,W (required for pools)."),
        click.option("--axis", help="softmax/bias_add axis, or the reduction axes (0,2 or 'all')."),
        click.option("--keepdims", is_flag=True, default=None, help="reductions: keep reduced axes."),
        click.option("--bias", is_flag=True, default=None, help="dense: add a bias."),
        click.option("--activation", type=click.Choice(ACTIVATIONS), help="dense: epilogue activation."),
        click.option("--eps", type=float, help="layer_norm epsilon (default 1e-5)."),
        click.option("--transpose-a", is_flag=True, default=None, help="matmul/batch_matmul: A given as [K,M]."),
        click.option("--transpose-b", is_flag=True, default=None, help="matmul/batch_matmul: B given as [N,K]."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def pop_op_options(kwargs: dict) -> tuple:
    """(shape, {option: value} of the op options given) out of a command's keyword arguments."""
    shape = kwargs.pop("shape", None)
    given = {name: kwargs.pop(name) for name in OPTION_FLAGS if name in kwargs}
    return shape, {k: v for k, v in given.items() if v is not None}


def parse_call(op: str, shape: str | None, options: dict, hint: str = "OP") -> OpCall:
    """The OpCall of `minitc tune OP --shape SHAPE [options]` (ops/calls.py); raises
    click.BadParameter (exit code 2) for an unknown op, a malformed shape or an option the op
    does not take."""
    try:
        return calls.parse_call(op, shape, options, hint)
    except OpCallError as e:
        raise click.BadParameter(e.message, param_hint=e.hint) from None
