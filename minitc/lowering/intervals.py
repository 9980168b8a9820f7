"""Symbolic intervals of index expressions, for bound inference.

`interval(e, varying)` answers: as the variables in `varying` (var -> extent) run over their
loops while all other variables stay fixed, which values does `e` take? The answer is
`(lo, width)`: `lo` an expression of the fixed variables and `width` an int, so that every value
lies in [lo, lo + width]. The widths are exact for affine expressions and conservative for `//`
and `%`.
"""

from __future__ import annotations

from minitc.arith import affine, simplify
from minitc.expr import Binary, Const, Expr, Var, binary, const, structural_key, walk


def _mentions_any(e: Expr, varying: dict) -> bool:
    return any(isinstance(n, Var) and n in varying for n in walk(e))


def interval(e: Expr, varying: dict):
    """(lo, width) of `e` over the varying variables, or None if unknown."""
    form = affine(e)
    if form is None:
        return None
    lo, width = const(form.offset), 0
    for term, c in form.coef.items():
        if isinstance(term, Var) and term in varying:
            span = c * (varying[term] - 1)
            if span < 0:
                lo = binary("add", lo, const(span))
            width += abs(span)
            continue
        if not _mentions_any(term, varying):
            lo = binary("add", lo, term if c == 1 else binary("mul", term, const(c)))
            continue
        sub = _atom_interval(term, varying)
        if sub is None:
            return None
        sub_lo, sub_w = sub
        if c >= 0:
            lo = binary("add", lo, binary("mul", sub_lo, const(c)))
        else:
            lo = binary("add", lo, binary("mul", binary("add", sub_lo, const(sub_w)), const(c)))
        width += abs(c) * sub_w
    return simplify(lo), width


def _atom_interval(e: Expr, varying: dict):
    if not isinstance(e, Binary) or not isinstance(e.b, Const) or e.b.value <= 0:
        return None
    k = e.b.value
    inner = interval(e.a, varying)
    if inner is None:
        return None
    lo, w = inner
    if e.op == "floordiv":
        if isinstance(lo, Const):
            return const(lo.value // k), (lo.value + w) // k - lo.value // k
        return simplify(binary("floordiv", lo, const(k))), w // k + 1
    if e.op == "mod":
        if isinstance(lo, Const) and lo.value % k + w < k:
            return const(lo.value % k), w
        return const(0), k - 1
    return None


def exact_box(values: list, varying: dict):
    """If the values (one expression per dimension) range over an exact box as the varying
    variables run — each variable in one dimension, per dimension a dense mixed-radix
    combination — return [(lo, extent)] per dimension, else None."""
    used: set = set()
    box = []
    for v in values:
        form = affine(v, atoms=False)
        if form is None:
            return None
        terms = [(t, c) for t, c in form.coef.items() if t in varying]
        if any(t in used for t, _ in terms):
            return None
        used |= {t for t, _ in terms}
        fixed = [(t, c) for t, c in form.coef.items() if t not in varying]
        if any(_mentions_any(t, varying) for t, _ in fixed):
            return None
        stride = 1
        for t, c in sorted(terms, key=lambda tc: tc[1]):
            if c != stride:
                return None
            stride *= varying[t]
        lo = const(form.offset)
        for t, c in fixed:
            lo = binary("add", lo, t if c == 1 else binary("mul", t, const(c)))
        box.append((simplify(lo), stride))
    return box


def _constant_difference(a: Expr, b: Expr):
    """a - b if it is a constant (opaque parts like `x // 12` matched by structure), else None."""
    fa, fb = affine(a), affine(b)
    if fa is None or fb is None:
        return None
    coef: dict = {}
    for form, sign in ((fa, 1), (fb, -1)):
        for term, c in form.coef.items():
            k = structural_key(term)
            coef[k] = coef.get(k, 0) + sign * c
    return fa.offset - fb.offset if not any(coef.values()) else None


def union(intervals: list):
    """Union of (lo, width) intervals whose lower bounds differ by constants: (lo, width), or
    None when two lower bounds differ by a non-constant amount."""
    base, _ = intervals[0]
    rel_lo, rel_hi = None, None
    for lo, w in intervals:
        d = _constant_difference(lo, base)
        if d is None:
            return None
        rel_lo = d if rel_lo is None else min(rel_lo, d)
        rel_hi = d + w if rel_hi is None else max(rel_hi, d + w)
    return simplify(binary("add", base, const(rel_lo))), rel_hi - rel_lo
