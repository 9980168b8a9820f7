"""The GEMM structure of a computation written with `tc.compute` (issue 52): which output axes
are batch, M and N, and which reduction axes are K, whatever the operands' layouts.

    C[b, i, j]  = sum_k A[b, i, k] * B[b, k, j]          batch (b), M (i), N (j), K (k)
    C[i, j]     = sum_k A[k, i] * B[j, k]                Aᵀ·Bᵀ: the same roles
    Y[n, y, x, o] = sum_(rh, rw, c) X[n, y + rh, x + rw, c] * W[rh, rw, c, o]
                                                         a convolution in NHWC as an implicit
                                                         GEMM: M (n, y, x), N (o), K (rh, rw, c),
                                                         windows (y, rh), (x, rw)

An axis both operands read is a batch axis; one only A reads, an M axis; one only B reads, an
N axis. B is the operand that reads an N axis in its last (contiguous) dimension, so its
vectors load along N while A's elements are broadcast, as in the GEMM templates; `vector` is
that axis where the output stores it contiguously too.
"""

from __future__ import annotations

from dataclasses import dataclass

from minitc.expr import Binary, Cast, IterVar, walk
from minitc.te import Reduce


@dataclass(frozen=True)
class Contraction:
    a: str  # the operand broadcast per row (stage name)
    b: str  # the operand loaded as vectors
    batch: tuple  # output axis names both operands read
    m: tuple  # output axis names only A reads
    n: tuple  # output axis names only B reads
    k: tuple  # reduction axis names
    windows: tuple = ()  # (output axis, reduction axis) read together in one index of A
    vector: str | None = None  # the N axis B and the output both store contiguously


def _operand(expr):
    """The read under casts, or None."""
    while isinstance(expr, Cast):
        expr = expr.value
    return expr if hasattr(expr, "indices") and hasattr(expr, "stage") else None


def _axes_of(index) -> list:
    return [node.name for node in walk(index) if isinstance(node, IterVar)]


def _read_axes(read) -> set:
    return {name for index in read.indices for name in _axes_of(index)}


def _last_axis(read) -> str | None:
    """The axis the read's last index is, if it is exactly one axis."""
    last = read.indices[-1] if read.indices else None
    return last.name if isinstance(last, IterVar) else None


def find_contraction(stage) -> Contraction | None:
    """The GEMM structure of `stage` (a schedule state's Stage): a sum over its reduction axes of
    the product of two reads, each output axis read by one or both; else None."""
    body = stage.body
    if not isinstance(body, Reduce) or body.combiner != "sum":
        return None
    source = body.source
    while isinstance(source, Cast):
        source = source.value
    if not (isinstance(source, Binary) and source.op == "mul"):
        return None
    x, y = _operand(source.a), _operand(source.b)
    if x is None or y is None:
        return None
    out = [ax.name for ax in stage.axes]
    k = tuple(ax.name for ax in body.axes)
    in_x, in_y = _read_axes(x), _read_axes(y)
    if any(a not in in_x | in_y for a in out) or any(r not in in_x | in_y for r in k):
        return None
    only_x, only_y = [a for a in out if a not in in_y], [a for a in out if a not in in_x]
    if _last_axis(x) in only_x and _last_axis(y) not in only_y:
        x, y, only_x, only_y = y, x, only_y, only_x  # B is the operand read contiguously along N
    vector = _last_axis(y) if _last_axis(y) in only_y and out and out[-1] == _last_axis(y) else None
    windows = tuple(
        (a, r) for index in x.indices for a in _axes_of(index) if a in out for r in _axes_of(index) if r in k
    )
    return Contraction(
        a=x.stage,
        b=y.stage,
        batch=tuple(a for a in out if a in in_x and a in in_y),
        m=tuple(only_x),
        n=tuple(only_y),
        k=k,
        windows=windows,
        vector=vector,
    )


def reductions_under(s, out: str):
    """The reduction stages that `out` reads through elementwise stages only (never through
    another reduction), in the order a depth-first walk meets them: the products under an
    elementwise epilogue (bias, activation, a residual add, a scale)."""
    todo, seen = [out], set()
    while todo:
        for name in s.state.stage(todo.pop()).read_stages():
            st = s.state.stage(name)
            if st.reduce_axes:
                yield name
            elif name not in seen and not st.is_placeholder:
                seen.add(name)
                todo.append(name)


def reduction_under(s, out: str) -> str | None:
    """The one reduction that is no contraction under the elementwise output `out`, or None
    (none, several, or a contraction among them)."""
    names = set(reductions_under(s, out))
    if len(names) != 1:
        return None
    (name,) = names
    return name if find_contraction(s.state.stage(name)) is None else None
