"""Integer index arithmetic: affine forms, simplification and interval bounds.

Index expressions after lowering are mostly affine in the loop variables (`io*32 + ii`), with
`//` and `%` from fused loops. Bound inference, guard elimination and the code generators ask
three questions of them: is it affine in these variables (and with what coefficients), what is
its range given the loop extents, and what is its simplest form.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.expr import Binary, Cast, Const, Expr, Var, binary, const, walk

INT = dtypes.INDEX


class Affine:
    """`sum(coef[v] * v) + offset` over variables, with integer coefficients."""

    __slots__ = ("coef", "offset")

    def __init__(self, coef: dict, offset: int):
        self.coef = {v: c for v, c in coef.items() if c != 0}
        self.offset = offset

    def __add__(self, other: Affine) -> Affine:
        coef = dict(self.coef)
        for v, c in other.coef.items():
            coef[v] = coef.get(v, 0) + c
        return Affine(coef, self.offset + other.offset)

    def scale(self, k: int) -> Affine:
        return Affine({v: c * k for v, c in self.coef.items()}, self.offset * k)

    def is_const(self) -> bool:
        return not self.coef

    def to_expr(self, order=None) -> Expr:
        """Rebuild an expression; `order` (a list of variables) fixes the term order."""
        terms = list(self.coef.items())
        if order is not None:
            rank = {v: n for n, v in enumerate(order)}
            terms.sort(key=lambda t: rank.get(t[0], len(rank)))
        e = None
        for v, c in terms:
            if e is not None and c < 0:  # print `x - 2*y`, not `x + y*-2`
                e = binary("sub", e, v if c == -1 else binary("mul", v, const(-c)))
                continue
            term = v if c == 1 else binary("mul", v, const(c))
            e = term if e is None else binary("add", e, term)
        if e is None:
            return const(self.offset)
        if self.offset < 0:
            return binary("sub", e, const(-self.offset))
        return binary("add", e, const(self.offset)) if self.offset else e


def affine(e: Expr, atoms: bool = True):
    """The affine form of an integer expression, or None if it is not affine. With `atoms`,
    non-affine integer subterms (`x // 8`) are treated as opaque variables."""
    if isinstance(e, Const):
        return Affine({}, int(e.value)) if dtypes.is_int(e.dtype) else None
    if isinstance(e, Var):
        return Affine({e: 1}, 0)
    if isinstance(e, Cast) and dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype):
        return affine(e.value, atoms)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = affine(e.a, atoms), affine(e.b, atoms)
        if a is None or b is None:
            return None
        if e.op == "add":
            return a + b
        if e.op == "sub":
            return a + b.scale(-1)
        if a.is_const():
            return b.scale(a.offset)
        if b.is_const():
            return a.scale(b.offset)
    if atoms and dtypes.is_int(e.dtype):
        return Affine({e: 1}, 0)
    return None


def coefficient(e: Expr, var: Var):
    """The coefficient of `var` in `e` if `e` is affine in `var` (other terms may be anything
    that does not mention `var`), else None."""
    form = affine(e)
    if form is None:
        return None
    for term in form.coef:
        if term is not var and not isinstance(term, Var) and _mentions(term, var):
            return None
    return form.coef.get(var, 0)


def _mentions(e: Expr, var: Var) -> bool:

    return any(n is var for n in walk(e))


def simplify(e: Expr) -> Expr:
    """Canonicalise affine integer expressions (merge like terms, fold constants) and simplify
    `//` and `%` by constants where the bounds allow; other expressions are left alone."""
    if not dtypes.is_int(e.dtype):
        return e
    form = affine(e, atoms=False)
    if form is not None:
        order = [n for n in _vars_in_order(e)]
        return form.to_expr(order)
    if isinstance(e, Binary):
        a, b = simplify(e.a), simplify(e.b)
        e = binary(e.op, a, b)
        if e.op in ("add", "sub"):  # `x*16 + y // 8 - x*16`: merge terms around opaque parts
            form = affine(e, atoms=True)
            if form is not None and len(form.coef) < _count_terms(e):
                return form.to_expr(_vars_in_order(e) + list(form.coef))
        return e
    return e


def _count_terms(e: Expr) -> int:
    """Summands of a sum (`a + b - c` has 3), the number of terms before merging."""
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        return _count_terms(e.a) + _count_terms(e.b)
    return 0 if isinstance(e, Const) else 1


def _vars_in_order(e: Expr) -> list:

    seen, out = set(), []
    for n in walk(e):
        if isinstance(n, Var) and n not in seen:
            seen.add(n)
            out.append(n)
    return out


def bounds(e: Expr, ranges: dict):
    """Conservative integer bounds (lo, hi), inclusive, of `e` when each variable `v` in
    `ranges` lies in `ranges[v] = (lo, hi)`. Returns None if unknown (an unbounded variable or
    an unsupported operation)."""
    if isinstance(e, Const):
        return (e.value, e.value) if dtypes.is_int(e.dtype) else None
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Cast) and dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype):
        return bounds(e.value, ranges)
    if not isinstance(e, Binary) or not dtypes.is_int(e.dtype):
        return None
    a, b = bounds(e.a, ranges), bounds(e.b, ranges)
    if e.op == "mod" and b is not None and b[0] == b[1] and b[0] > 0:
        if a is not None and a[0] >= 0 and a[1] < b[0]:
            return a
        return (0, b[0] - 1)
    if a is None or b is None:
        return None
    if e.op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if e.op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if e.op == "mul":
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if e.op == "floordiv" and b[0] == b[1] and b[0] > 0:
        return (a[0] // b[0], a[1] // b[0])
    if e.op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if e.op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    return None


def fold_divisions(e: Expr, ranges: dict) -> Expr:
    """`e` with each `a // c` and `a % c` (c a positive constant) folded where the ranges allow:
    `a` split into the terms whose coefficients `c` divides, `q * c`, and the rest `r`; when
    `r` lies in [0, c), `a // c` is `q` and `a % c` is `r` (`(jo*48 + jv*16 + lane) // 16` is
    `jo*3 + jv` for a lane in [0, 16)), as long as `a` cannot wrap around int64. Other
    subexpressions are left alone."""
    if not isinstance(e, Binary):
        return e
    a, b = fold_divisions(e.a, ranges), fold_divisions(e.b, ranges)
    if e.op not in ("floordiv", "mod") or not isinstance(b, Const) or not dtypes.is_int(e.dtype) or b.value <= 0:
        return binary(e.op, a, b) if (a is not e.a or b is not e.b) else e
    c = int(b.value)
    form = affine(a, atoms=True)
    span = bounds(a, ranges)
    if form is not None and span is not None and -(2**63) <= span[0] and span[1] < 2**63:  # int64 does not wrap
        whole = Affine({v: k // c for v, k in form.coef.items() if k % c == 0}, form.offset // c)
        rest = Affine({v: k for v, k in form.coef.items() if k % c}, form.offset % c)
        rest_expr = rest.to_expr(_vars_in_order(a) + list(rest.coef))
        span = bounds(rest_expr, ranges)
        if span is not None and 0 <= span[0] and span[1] < c:
            return whole.to_expr(_vars_in_order(a) + list(whole.coef)) if e.op == "floordiv" else rest_expr
    return binary(e.op, a, b) if (a is not e.a or b is not e.b) else e
