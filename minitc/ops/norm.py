"""Normalisations: softmax (any axis) and layer_norm (last axis), as several stages.

Stage naming, with `base` = `name` or the operator name:
    softmax:     base_max, base_exp, base_sum, base   (max, exp(x - max), sum, divide)
    layer_norm:  base_mean, base_var, base            (mean, biased variance, normalise)
The per-row statistics have the input's shape without the reduced axis (shape (1,) for 1-D
input).
"""

from __future__ import annotations

from minitc import te
from minitc.errors import ShapeError
from minitc.expr import call, select
from minitc.ops import _util
from minitc.te import Tensor, compute, reduce_axis

# softmax's exp(x - max) is 0 below this: exp(-70) = 4e-31, under float32's resolution of any
# row (the max's term is 1), where exp(-100) would be a denormal (3.7e-44) that slows every
# kernel that reads it by ~20x on x86 (a microcode assist per multiply). Swin's shifted-window
# mask adds -100: measured on the Intel Xeon (SPR class), 2 threads, the 49x49 probabilities'
# batch matmul [48,49,49]x[4,49,12,32] ran 4.29 ms with the denormals, 0.056 ms without.
FLUSH_BELOW = -70.0


def softmax(X, axis: int = -1, name: str | None = None, safe: bool = False) -> Tensor:
    """exp(X - max) / sum(exp(X - max)) along `axis`; numerically stable. A row that is all
    -inf gives NaN, as torch.softmax does, or 0 with `safe` (torch's _safe_softmax, which
    scaled_dot_product_attention uses for fully masked rows)."""
    op = "softmax"
    _util.tensor(op, "X", X)
    _util.floating(op, X)
    ax = _util.axis(op, X, axis)
    base = name or op
    reduced = (ax,)
    row_shape = _util.reduced_shape(X.shape, reduced, keepdims=False)
    one_d = X.ndim == 1

    def row(i):  # index into a per-row statistic from a full index
        return (0,) if one_d else i[:ax] + i[ax + 1 :]

    k = reduce_axis(X.shape[ax], name="k")
    M = compute(
        row_shape,
        lambda *r: te.max(X[_util.full_index(X.ndim, reduced, () if one_d else r, (k,), False)], axis=k),
        name=f"{base}_max",
        tag="softmax_max",
    )

    def exp(*i):  # exp(x - max), 0 far below the max (FLUSH_BELOW)
        d = X[i] - M[row(i)]
        return select(d < FLUSH_BELOW, 0.0, call("exp", d))

    E = compute(X.shape, exp, name=f"{base}_exp", tag="softmax_exp")
    k2 = reduce_axis(X.shape[ax], name="k")
    S = compute(
        row_shape,
        lambda *r: te.sum(E[_util.full_index(X.ndim, reduced, () if one_d else r, (k2,), False)], axis=k2),
        name=f"{base}_sum",
        tag="softmax_sum",
    )
    if not safe:
        return compute(X.shape, lambda *i: E[i] / S[row(i)], name=base, tag="softmax", attrs={"axis": ax})

    def masked(*i):  # a row of -inf has max -inf: 0 there, where exp(-inf - -inf) is NaN
        return select(M[row(i)] == float("-inf"), 0.0, E[i] / S[row(i)])

    return compute(X.shape, masked, name=base, tag="softmax", attrs={"axis": ax, "safe": True})


def layer_norm(X, gamma, beta, eps: float = 1e-5, name: str | None = None) -> Tensor:
    """(X - mean) / sqrt(var + eps) * gamma + beta over the last axis of X, like
    torch.nn.functional.layer_norm(X, X.shape[-1:], gamma, beta, eps) (biased variance).
    gamma and beta are [D] with D = X.shape[-1]; either may be None (no scale / no shift)."""
    op = "layer_norm"
    _util.tensor(op, "X", X)
    D = X.shape[-1]
    for what, p in (("gamma", gamma), ("beta", beta)):
        if p is not None:
            _util.rank(op, what, p, 1, f"[{D}], the last axis of X")
            if p.shape[0] != D:
                raise ShapeError(f"{op}: {what} has {p.shape[0]} elements but the last axis of X {X.shape} has {D}")
    _util.floating(op, X, *(p for p in (gamma, beta) if p is not None))
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
        raise ShapeError(f"{op}: eps must be a non-negative number, got {eps!r}")
    base = name or op
    last = (X.ndim - 1,)
    row_shape = _util.reduced_shape(X.shape, last, keepdims=False)
    one_d = X.ndim == 1
    inv_d = 1.0 / D

    def row(i):
        return (0,) if one_d else i[:-1]

    def at(r, k):
        return X[(k,) if one_d else r + (k,)]

    k = reduce_axis(D, name="k")
    mean = compute(row_shape, lambda *r: te.sum(at(r, k) * inv_d, axis=k), name=f"{base}_mean", tag="layer_norm_mean")
    k2 = reduce_axis(D, name="k")

    def var_body(*r):
        centred = at(r, k2) - mean[(0,) if one_d else r]
        return te.sum(centred * centred * inv_d, axis=k2)

    var = compute(row_shape, var_body, name=f"{base}_var", tag="layer_norm_var")

    def norm_body(*i):
        y = (X[i] - mean[row(i)]) / call("sqrt", var[row(i)] + float(eps))
        if gamma is not None:
            y = y * gamma[i[-1]]
        if beta is not None:
            y = y + beta[i[-1]]
        return y

    return compute(X.shape, norm_body, name=base, tag="layer_norm", attrs={"eps": float(eps)})
