"""Index checks: before any code exists, prove that every load and store of a lowered kernel is
in bounds and that every integer `//` and `%` of index arithmetic divides by a non-zero value.
What cannot be proved raises `ShapeError` naming the tensor, the expression and its range.

The proof is interval arithmetic over the loop box (each loop variable, GPU block and thread
indices included, in [0, extent - 1]), sharpened by the conditions known to hold where the
access runs: the `if` guards around it and the conditions of the `select` branches that hold it
(only the chosen branch runs, so padding reads `select(h >= 1 and h < 10, X[h - 1], 0)` are
fine). Expressions are taken as linear forms over atoms (loop variables, and `x // 8`, `x % 8`,
`min`, ... matched by structure, so `x // 8 * 2 + h - x // 8 * 2` is `h`). A condition becomes
a fact `F >= 0` (`g < c` gives `c - 1 - g >= 0`), and since F >= 0 where the access runs,

    idx <= max(idx + k*F)    and    idx >= min(idx - k*F)    over the box, for any k >= 0,

with k = 1 or a k that cancels a term: for split tails (`if i_o*4 + i_i < 10: B[i_o*4 + i_i]`)
and padding this is exact. The tightest of these and the plain box bound is taken. Two floor
divisions by the same k, `x // k - y // k` (a tile's index relative to its origin), are bounded
by the range of `x - y`.

A divisor that reads memory is data, not index arithmetic: it is left alone (the backends give
numpy's answer, 0, for a division of data by 0).
"""

from __future__ import annotations

from fractions import Fraction

from minitc import dtypes, ir
from minitc.errors import ShapeError
from minitc.expr import Binary, Cast, Compare, Const, Expr, Not, Select, Var, structural_key, walk
from minitc.printer import format_expr

FLIP = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


def check_indices(kernel: ir.Kernel) -> None:
    """Raise ShapeError unless every access of `kernel` is provably in bounds and every index
    divisor provably non-zero (see the module docstring)."""
    _Checker().stmt(kernel.body, Ranges({}))


# -- linear forms -------------------------------------------------------------------------------
# A linear form is (terms, offset): terms maps an atom's structural key to (atom, coefficient).


def linear(e: Expr):
    """The linear form of an integer expression, or None for a non-integer one. `+`, `-` and `*`
    wrap like arithmetic modulo 2**bits, so a form's value is exact wherever it fits its dtype;
    operations that do not commute with wrapping (`//`, `%`, min, max, comparisons, narrowing
    casts) are atoms whose operands must fit their dtypes."""
    if not dtypes.is_int(e.dtype):
        return None
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, Cast) and dtypes.is_int(e.value.dtype) and dtypes.bits(e.dtype) >= dtypes.bits(e.value.dtype):
        return linear(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = linear(e.a), linear(e.b)
        if e.op == "add":
            return _combine(a, b, 1)
        if e.op == "sub":
            return _combine(a, b, -1)
        if not a[0]:
            return _scale(b, a[1])
        if not b[0]:
            return _scale(a, b[1])
    return {structural_key(e): (e, 1)}, 0


def _combine(a, b, sign: int):
    terms = dict(a[0])
    for key, (atom, c) in b[0].items():
        total = terms.get(key, (atom, 0))[1] + sign * c
        if total:
            terms[key] = (atom, total)
        else:
            terms.pop(key, None)
    return terms, a[1] + sign * b[1]


def _scale(a, k: int):
    if k == 0:
        return {}, 0
    return {key: (atom, c * k) for key, (atom, c) in a[0].items()}, a[1] * k


# -- facts from conditions -------------------------------------------------------------------------


def facts(cond: Expr, holds: bool, exact) -> tuple:
    """What `cond` (if `holds`, else its negation) tells about integers: pairs ("ge0", form),
    form >= 0, and ("ne0", form), form != 0. Comparisons of operands for which `exact(e)` is
    false (they may wrap) tell nothing."""
    if isinstance(cond, Not):
        return facts(cond.a, not holds, exact)
    if isinstance(cond, Binary) and cond.op in ("and", "or"):
        if (cond.op == "and") == holds:  # a conjunction of known parts
            return facts(cond.a, holds, exact) + facts(cond.b, holds, exact)
        return ()
    if not isinstance(cond, Compare) or not dtypes.is_int(cond.a.dtype):
        return ()
    if not (exact(cond.a) and exact(cond.b)):
        return ()
    op = cond.op if holds else FLIP[cond.op]
    diff = _combine(linear(cond.a), linear(cond.b), -1)  # a - b
    below = _scale(diff, -1)  # b - a
    minus_one = ({}, -1)
    return {
        "lt": (("ge0", _combine(below, minus_one, 1)),),
        "le": (("ge0", below),),
        "gt": (("ge0", _combine(diff, minus_one, 1)),),
        "ge": (("ge0", diff),),
        "eq": (("ge0", diff), ("ge0", below)),
        "ne": (("ne0", diff),),
    }[op]


# -- ranges ------------------------------------------------------------------------------------------


class Ranges:
    """Bounds of integer expressions with each loop variable `v` in env[v] = (lo, hi) and the
    facts `known` holding."""

    def __init__(self, env: dict, known: tuple = ()):
        self.env, self.known = env, known
        self.cache = {}  # id(atom) -> range; atoms stay alive in the forms being bounded
        self.busy = set()  # atoms being bounded: a fact that mentions one again is a cycle

    def of(self, e: Expr):
        """The tightest (lo, hi) of `e`, or None when an end is unbounded."""
        form = linear(e)
        return None if form is None else self.tight(form)

    def tight(self, form):
        """The tightest (lo, hi) of a linear form from the box and the known facts, or None."""
        hi, lo = self._bound(form, 1), self._bound(form, -1)
        return None if lo is None or hi is None else (lo, hi)

    def _bound(self, form, sign: int):
        """The upper (sign 1) or lower (sign -1) end of a linear form. For each known fact F >= 0,
        form <= max(form + k*F) and form >= min(form - k*F), for any k >= 0; the k tried are 1
        and those that cancel a term of the form (`i_o*4 + i_i*2` under `i_o*2 + i_i < 3`: 2).
        Facts are added one at a time while the bound improves, so a fused index
        `3*(o_o*2 + o_i) + (i_o*2 + i_i)` under a guard on each of o and i is bounded by both."""
        best = _end(self.box(form), sign, 1)
        scaled, scale, unused = form, 1, [f for kind, f in self.known if kind == "ge0"]
        while True:
            step = None
            for fact in unused:
                if not scaled[0].keys() & fact[0].keys():
                    continue  # a fact about other terms does not narrow this form
                for side, k in _multipliers(scaled, fact):
                    if side != sign:
                        continue
                    # q*form + sign*p*F bounds q*form, for k = p/q
                    candidate = _combine(_scale(scaled, k.denominator), _scale(fact, k.numerator), sign)
                    end = _end(self.box(candidate), sign, scale * k.denominator)
                    if end is not None and (best is None or (end - best) * sign < 0):
                        best, step = end, (candidate, scale * k.denominator, fact)
            if step is None:
                return best
            scaled, scale, used = step
            unused = [f for f in unused if f is not used]

    def box(self, form):
        """(lo, hi) of a linear form, each atom over its own range, or None."""
        lo = hi = form[1]
        terms = {key: [atom, c] for key, (atom, c) in form[0].items()}
        parts = self._division_pairs(terms) + [(self.atom(atom), c) for atom, c in terms.values() if c]
        for r, c in parts:
            if r is None:
                return None
            lo += c * (r[0] if c > 0 else r[1])
            hi += c * (r[1] if c > 0 else r[0])
        return lo, hi

    def _division_pairs(self, terms: dict) -> list:
        """Take pairs `c*(x // k) - c*(y // k)` out of `terms` (key -> [atom, coef]) as
        (range, c): with y = q*k + r, the pair is c*((x - y + r) // k) for r in [0, k - 1], so
        the range of x - y bounds it, where the two atoms apart are each as wide as x."""
        divs = [t for t in terms.values() if _divides_by_const(t[0])]
        pairs = []
        for plus in divs:
            for minus in divs:
                k = plus[0].b.value
                if plus[1] <= 0 or minus[1] >= 0 or minus[0].b.value != k:
                    continue
                if not (self.exact(plus[0].a) and self.exact(minus[0].a)):
                    continue
                d = self.tight(_combine(linear(plus[0].a), linear(minus[0].a), -1))
                if d is None:
                    continue
                c = min(plus[1], -minus[1])
                pairs.append(((d[0] // k, (d[1] + k - 1) // k), c))
                plus[1] -= c
                minus[1] += c
        return pairs

    def atom(self, e: Expr):
        if isinstance(e, Var):
            return self.env.get(e)
        if id(e) in self.busy:  # reached again through a fact: bound it without the facts
            return Ranges(self.env).atom(e)
        if id(e) not in self.cache:
            self.busy.add(id(e))
            self.cache[id(e)] = self.operation(e)
            self.busy.discard(id(e))
        return self.cache[id(e)]

    def operation(self, e: Expr):
        """The range of an operation linear forms do not cover, from its operands' ranges."""
        if isinstance(e, Select) and dtypes.is_int(e.dtype):
            t, f = self.assuming(e.cond, True).of(e.t), self.assuming(e.cond, False).of(e.f)
            return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        if isinstance(e, Cast) and dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype):  # narrowing
            r = self.of(e.value)
            return r if _fits(r, e.dtype) else None
        if not isinstance(e, Binary) or not dtypes.is_int(e.dtype):
            return None  # loaded data, casts from floats, ...
        if e.op == "max" and isinstance(e.a, Binary) and e.a.op == "min":  # a clamp, of loaded data too
            high, low = self.of(e.a.b), self.of(e.b)
            if high is not None and low is not None:
                return low[0], max(high[1], low[1])
        a, b = self.of(e.a), self.of(e.b)
        if not (_fits(a, e.dtype) and _fits(b, e.dtype)):
            return None
        if e.op == "mul":
            return _corners(a, b, lambda x, y: x * y)
        if e.op == "min":
            return min(a[0], b[0]), min(a[1], b[1])
        if e.op == "max":
            return max(a[0], b[0]), max(a[1], b[1])
        if e.op not in ("floordiv", "mod"):
            return None
        # a divisor that can be 0 is refused by its own check, so its range may leave 0 out
        signs = [p for p in ((b[0], min(b[1], -1)), (max(b[0], 1), b[1])) if p[0] <= p[1]]
        if not signs:
            return None
        if e.op == "floordiv":  # monotone in each operand while the divisor keeps its sign
            parts = [_corners(a, p, lambda x, y: x // y) for p in signs]
            return min(p[0] for p in parts), max(p[1] for p in parts)
        if b[0] > 0 and 0 <= a[0] and a[1] < b[0]:
            return a
        return min(b[0] + 1, 0), max(b[1] - 1, 0)  # Python's `%` takes the divisor's sign

    def assuming(self, cond: Expr, holds: bool) -> Ranges:
        """These ranges where `cond` is known to hold (or, with holds=False, not to hold)."""
        more = facts(cond, holds, self.exact)
        return Ranges(self.env, self.known + more) if more else self

    def exact(self, e: Expr) -> bool:
        """Whether the value of `e` is that of its linear form, not wrapped around: it is one
        atom (a loaded value, ...) or its range fits its dtype."""
        terms, offset = linear(e)
        if offset == 0 and len(terms) == 1 and next(iter(terms.values()))[1] == 1:
            return True
        return _fits(self.tight((terms, offset)), e.dtype)

    def nonzero(self, e: Expr) -> bool:
        """Whether `e` is provably never 0: by its range, or by a fact `e != 0`."""
        r = self.of(e)
        if _fits(r, e.dtype) and (r[0] > 0 or r[1] < 0):
            return True
        form = linear(e)
        return any(kind == "ne0" and (_same(form, f) or _same(form, _scale(f, -1))) for kind, f in self.known)


def _multipliers(form, fact) -> set:
    """(sign, k): sign +1 bounds the form from above by form + k*fact, -1 from below by
    form - k*fact; k = 1 and each positive k that cancels a term common to both."""
    out = {(1, Fraction(1)), (-1, Fraction(1))}
    for key, (_, f) in fact[0].items():
        x = form[0].get(key, (None, 0))[1]
        if x:
            k = Fraction(x, f)
            out.add((-1, k) if k > 0 else (1, -k))
    return out


def _end(r, sign: int, scale: int):
    """The upper (sign 1) or lower (sign -1) end of range `r` of scale times a value, as an
    integer bound of the value; None for no range."""
    if r is None:
        return None
    return r[1] // scale if sign > 0 else -(-r[0] // scale)


def _fits(r, dtype: str) -> bool:
    return r is not None and dtypes.min_value(dtype) <= r[0] and r[1] <= dtypes.max_value(dtype)


def _divides_by_const(e: Expr) -> bool:
    return isinstance(e, Binary) and e.op == "floordiv" and isinstance(e.b, Const) and e.b.value > 0


def _corners(a, b, fn):
    values = [fn(x, y) for x in a for y in b]
    return min(values), max(values)


def _same(a, b) -> bool:
    diff = _combine(a, b, -1)
    return not diff[0] and diff[1] == 0


# -- the walk ---------------------------------------------------------------------------------------


class _Checker:
    """Walks the kernel with a `Ranges` of what holds at each point: the enclosing loops' ranges
    and the facts of the guards and select branches around it."""

    def stmt(self, s: ir.Stmt, where: Ranges) -> None:
        if isinstance(s, ir.For):
            self.stmt(s.body, Ranges({**where.env, s.var: (0, s.extent - 1)}, where.known))
        elif isinstance(s, ir.IfThenElse):
            self.expr(s.cond, "a condition", where)
            self.stmt(s.then, where.assuming(s.cond, True))
            if s.orelse is not None:
                self.stmt(s.orelse, where.assuming(s.cond, False))
        elif isinstance(s, ir.Store):
            writer = s.buffer.name
            for index in s.indices:
                self.expr(index, writer, where)
            self.access(s.buffer, s.indices, f"{writer} writes", where)
            self.expr(s.value, writer, where)
        else:
            for child in ir.stmt_children(s):
                self.stmt(child, where)

    def expr(self, e: Expr, writer: str, where: Ranges) -> None:
        """Check the loads and divisions in `e`, a part of what `writer` computes."""
        if isinstance(e, Select):
            self.expr(e.cond, writer, where)
            self.expr(e.t, writer, where.assuming(e.cond, True))
            self.expr(e.f, writer, where.assuming(e.cond, False))
            return
        for child in e.children():  # inner first: a bad divisor in an index is the cause
            self.expr(child, writer, where)
        if isinstance(e, ir.Load):
            self.access(e.buffer, e.indices, f"{writer} reads", where)
        if isinstance(e, Binary) and e.op in ("floordiv", "mod") and dtypes.is_int(e.dtype):
            self.divisor(e, writer, where)

    def access(self, buffer: ir.Buffer, indices: tuple, what: str, where: Ranges) -> None:
        for axis, (index, extent) in enumerate(zip(indices, buffer.shape)):
            r = where.of(index)
            if r is not None and 0 <= r[0] and r[1] < extent:
                continue
            text = f"{buffer.name}[{', '.join(format_expr(i) for i in indices)}]"
            if r is None:
                reason = f"index {axis} ({format_expr(index)}) cannot be bounded over the loop ranges"
                if _reads_memory(index):
                    reason += " (it depends on loaded data)"
            else:
                reason = f"index {axis} ranges over [{r[0]}, {r[1]}]"
            raise ShapeError(
                f"{what} {text}: {reason} but {buffer.name} has extent {extent} on axis {axis}; fix the index, "
                "or guard the access with tc.select(in_bounds, ..., pad_value)"
            )

    def divisor(self, e: Binary, writer: str, where: Ranges) -> None:
        if _reads_memory(e.b) or where.nonzero(e.b):
            return
        r = where.of(e.b)
        if r == (0, 0):
            why = "it divides by 0"
        elif r is None:
            why = f"the divisor {format_expr(e.b)} cannot be bounded over the loop ranges, so it may be 0"
        elif not _fits(r, e.b.dtype):
            why = (
                f"the divisor {format_expr(e.b)} takes values in [{r[0]}, {r[1]}], beyond {e.b.dtype}, "
                "so it may wrap around to 0"
            )
        else:
            why = f"the divisor {format_expr(e.b)} takes values in [{r[0]}, {r[1]}] over the loop ranges, including 0"
        raise ShapeError(
            f"{writer} computes {format_expr(e)}: {why}; use a divisor that is never 0, "
            "or guard it with tc.select(divisor != 0, ..., ...)"
        )


def _reads_memory(e: Expr) -> bool:
    return any(isinstance(n, ir.Load) for n in walk(e))
