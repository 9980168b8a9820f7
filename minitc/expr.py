"""Scalar expressions, shared by tensor expressions (te.py) and the loop-nest IR (ir.py).

Nodes are small immutable objects compared by identity; a `Var` is a distinct variable even when
two of them share a name. Operators on expressions build new nodes, with light constant folding
so that index arithmetic stays readable.
"""

from __future__ import annotations

import math

import numpy as np

from minitc import dtypes
from minitc.errors import DTypeError

BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max", "and", "or")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
INTRINSICS = ("exp", "log", "sqrt", "tanh", "erf", "abs", "floor", "ceil", "sigmoid")


class Expr:
    __slots__ = ("dtype",)

    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binary("floordiv", other, self)

    def __mod__(self, other):
        return binary("mod", self, other)

    def __rmod__(self, other):
        return binary("mod", other, self)

    def __neg__(self):
        return binary("sub", const(0, self.dtype), self)

    def __lt__(self, other):
        return compare("lt", self, other)

    def __le__(self, other):
        return compare("le", self, other)

    def __gt__(self, other):
        return compare("gt", self, other)

    def __ge__(self, other):
        return compare("ge", self, other)

    def __eq__(self, other):
        if not isinstance(other, (Expr, int, float)):
            return NotImplemented
        return _equality("eq", self, other)

    def __ne__(self, other):
        if not isinstance(other, (Expr, int, float)):
            return NotImplemented
        return _equality("ne", self, other)

    def __and__(self, other):
        return logical("and", self, other)

    def __or__(self, other):
        return logical("or", self, other)

    def __invert__(self):
        return Not(self)

    def __bool__(self):
        raise TypeError(
            "a minitc expression has no truth value at definition time; "
            "use tc.select(cond, a, b) instead of `if`, and `&`/`|` instead of `and`/`or`"
        )

    __hash__ = object.__hash__

    def astype(self, dtype) -> Expr:
        return cast(self, dtype)


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype: str):
        self.dtype = dtype
        self.value = float(value) if dtypes.is_float(dtype) else int(value)
        if dtype in _NARROW:  # the value the dtype holds: rounded (16-bit floats) or wrapped (8-bit ints)
            self.value = _NARROW[dtype](self.value)

    def __repr__(self):
        return f"Const({self.value!r}, {self.dtype})"


def _wrap(bits: int, signed: bool):
    def wrap(v: int) -> int:
        v %= 1 << bits
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    return wrap


def _round_to(dtype: str):
    return lambda v: float(np.asarray(v, dtype=dtype))


_NARROW = {
    "bfloat16": _round_to("bfloat16"),
    "float16": _round_to("float16"),
    "int8": _wrap(8, True),
    "uint8": _wrap(8, False),
}


class Var(Expr):
    """A scalar variable: a loop variable or a compute axis."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = dtypes.INDEX):
        self.name = name
        self.dtype = dtype

    def __repr__(self):
        return f"Var({self.name})"


class IterVar(Var):
    """An axis of a computation: `spatial` (one per output dimension) or `reduce`."""

    __slots__ = ("extent", "kind")

    def __init__(self, name: str, extent: int, kind: str):
        super().__init__(name)
        self.extent = int(extent)
        self.kind = kind

    def __repr__(self):
        return f"IterVar({self.name}, {self.extent}, {self.kind})"


class Binary(Expr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr, dtype: str):
        self.op, self.a, self.b, self.dtype = op, a, b, dtype


class Compare(Expr):
    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b, self.dtype = op, a, b, dtypes.BOOL


class EqualityTest(Compare):
    """What `a == b` and `a != b` build: a comparison node that, used as a Python truth value
    (in `x in list`, `list.index`), tells whether the operands are the same object (as TVM's
    EqualOp does), so expressions still work as dict keys and list members."""

    __slots__ = ("pair",)

    def __init__(self, op: str, a: Expr, b: Expr, pair: tuple):
        super().__init__(op, a, b)
        self.pair = pair

    def __bool__(self):
        same = self.pair[0] is self.pair[1]
        return same if self.op == "eq" else not same


def _equality(op: str, a, b):
    try:
        x, y = _operands(a, b, op)
        dtype = dtypes.promote(x.dtype, y.dtype)
    except DTypeError:
        return NotImplemented
    return EqualityTest(op, cast(x, dtype), cast(y, dtype), (a, b))


class Not(Expr):
    __slots__ = ("a",)

    def __init__(self, a: Expr):
        if a.dtype != dtypes.BOOL:
            raise DTypeError(f"~ needs a boolean condition, got {a.dtype}")
        self.a, self.dtype = a, dtypes.BOOL


class Select(Expr):
    """`t if cond else f`; only the chosen branch is evaluated, so a branch may hold a load
    that would be out of bounds when the condition is false (padding)."""

    __slots__ = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr, dtype: str):
        self.cond, self.t, self.f, self.dtype = cond, t, f, dtype


class Cast(Expr):
    __slots__ = ("value",)

    def __init__(self, dtype: str, value: Expr):
        self.dtype, self.value = dtype, value


class Call(Expr):
    """A math intrinsic (`exp`, `log`, ...) applied elementwise."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, args: tuple, dtype: str):
        self.name, self.args, self.dtype = name, tuple(args), dtype


# ---------------------------------------------------------------------------------------------
# construction helpers (the public `tc.*` functions call these)


def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, bool):
            dtype = dtypes.BOOL
        elif isinstance(value, int):
            dtype = dtypes.INDEX
        else:
            dtype = "float32"
    return Const(value, dtype)


def as_expr(value, like: str | None = None) -> Expr:
    """Turn a Python number into a constant; `like` is the dtype of the other operand, which a
    Python scalar adopts (as in numpy's scalar rules)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float)):
        if like is not None:
            if isinstance(value, float) and dtypes.is_int(like) and not float(value).is_integer():
                raise DTypeError(f"cannot combine the float {value} with an {like} expression; cast it")
            if like == dtypes.BOOL and not isinstance(value, bool):
                like = None
            else:
                return Const(value, like)
        return const(value)
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        return Const(value.item(), dtypes.check(value.dtype))
    raise DTypeError(f"cannot use {value!r} ({type(value).__name__}) in a minitc expression")


def _operands(a, b, what: str):
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise DTypeError(f"{what}: at least one operand must be a minitc expression")
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    else:
        a = as_expr(a, b.dtype)
    return a, b


def _fold(op: str, x, y):
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div":
        return x / y if y != 0 else None
    if op == "floordiv":
        return x // y if y != 0 else None
    if op == "mod":
        return x % y if y != 0 else None
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    return None


def binary(op: str, a, b) -> Expr:
    a, b = _operands(a, b, op)
    dtype = dtypes.promote(a.dtype, b.dtype, f"operands of {op}")
    if dtype == dtypes.BOOL:
        raise DTypeError(f"{op} is not defined on booleans; use & and |")
    if op == "div" and dtypes.is_int(dtype):
        raise DTypeError("`/` on integers is ambiguous; use `//` (floor division) or cast to float")
    if op in ("floordiv", "mod") and dtypes.is_float(dtype):
        raise DTypeError(f"{op} is defined on integers only; use tc.floor(a / b) for floats")
    if isinstance(a, Const) and isinstance(b, Const):
        folded = _fold(op, a.value, b.value)
        if folded is not None:
            return Const(folded, dtype)
    if dtypes.is_int(dtype):  # algebraic identities, exact only for integers
        if op in ("add", "sub") and _is_const(b, 0):
            return cast(a, dtype)
        if op == "add" and _is_const(a, 0):
            return cast(b, dtype)
        if op in ("mul", "floordiv") and _is_const(b, 1):
            return cast(a, dtype)
        if op == "mul" and _is_const(a, 1):
            return cast(b, dtype)
        if op == "mul" and (_is_const(a, 0) or _is_const(b, 0)):
            return Const(0, dtype)
        if op == "mod" and _is_const(b, 1):
            return Const(0, dtype)
    return Binary(op, cast(a, dtype), cast(b, dtype), dtype)


def _is_const(e: Expr, value) -> bool:
    return isinstance(e, Const) and e.value == value


def compare(op: str, a, b) -> Expr:
    a, b = _operands(a, b, op)
    dtypes.promote(a.dtype, b.dtype, f"operands of {op}")
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = a.value, b.value
        result = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}
        return Const(result[op], dtypes.BOOL)
    dtype = dtypes.promote(a.dtype, b.dtype)
    return Compare(op, cast(a, dtype), cast(b, dtype))


def logical(op: str, a, b) -> Expr:
    a, b = as_expr(a, dtypes.BOOL), as_expr(b, dtypes.BOOL)
    if a.dtype != dtypes.BOOL or b.dtype != dtypes.BOOL:
        raise DTypeError(f"`{'&' if op == 'and' else '|'}` combines boolean conditions, got {a.dtype} and {b.dtype}")
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if op == "and":
                return y if x.value else x
            return x if x.value else y
    return Binary(op, a, b, dtypes.BOOL)


def select(cond, t, f) -> Expr:
    """`t` where `cond` holds, else `f`. Only the selected branch is evaluated."""
    cond = as_expr(cond)
    if cond.dtype != dtypes.BOOL:
        raise DTypeError(f"select needs a boolean condition, got {cond.dtype}")
    t, f = _operands(t, f, "select")
    dtype = dtypes.promote(t.dtype, f.dtype, "branches of select")
    if isinstance(cond, Const):
        return cast(t if cond.value else f, dtype)
    return Select(cond, cast(t, dtype), cast(f, dtype), dtype)


def cast(x, dtype) -> Expr:
    dtype = dtypes.check(dtype)
    x = as_expr(x, dtype if not isinstance(x, Expr) else None)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const):
        value = x.value
        if dtypes.is_int(dtype) and isinstance(value, float):
            if not math.isfinite(value):
                return Cast(dtype, x)
            value = math.trunc(value)
        return Const(value, dtype)
    return Cast(dtype, x)


def call(name: str, x) -> Expr:
    x = as_expr(x)
    if name in ("abs",):
        if x.dtype == dtypes.BOOL:
            raise DTypeError("abs is not defined on booleans")
        return Call(name, (x,), x.dtype)
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"{name} needs a float argument, got {x.dtype}; cast it with tc.cast(x, 'float32')")
    return Call(name, (x,), x.dtype)


def minimum(a, b) -> Expr:
    return binary("min", a, b)


def maximum(a, b) -> Expr:
    return binary("max", a, b)


# ---------------------------------------------------------------------------------------------
# generic traversal: every node lists its children and rebuilds itself from new ones


def _leaf_children(self):
    return ()


def _leaf_rebuild(self, kids):
    return self


Const.children = Var.children = _leaf_children
Const.rebuild = Var.rebuild = _leaf_rebuild
Binary.children = Compare.children = lambda self: (self.a, self.b)
Binary.rebuild = lambda self, k: binary(self.op, *k) if self.op not in ("and", "or") else logical(self.op, *k)
Compare.rebuild = lambda self, k: compare(self.op, *k)
Not.children = lambda self: (self.a,)
Not.rebuild = lambda self, k: Not(k[0]) if not isinstance(k[0], Const) else Const(not k[0].value, dtypes.BOOL)
Select.children = lambda self: (self.cond, self.t, self.f)
Select.rebuild = lambda self, k: select(*k)
Cast.children = lambda self: (self.value,)
Cast.rebuild = lambda self, k: cast(k[0], self.dtype)
Call.children = lambda self: self.args
Call.rebuild = lambda self, k: Call(self.name, k, self.dtype)


def walk(e: Expr):
    """Yield every node of an expression tree, parents before children."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def structural_key(e: Expr):
    """Equal for two separately built copies of the same expression (variables and buffers by
    identity), e.g. two `x // 12` built apart."""
    if isinstance(e, Var):
        return ("var", id(e))
    if isinstance(e, Const):
        return ("const", e.value, e.dtype)
    tag = getattr(e, "op", None) or getattr(e, "name", None)
    buffer = getattr(e, "buffer", None)
    return (type(e).__name__, tag, e.dtype, id(buffer), tuple(structural_key(c) for c in e.children()))


def transform(e: Expr, fn) -> Expr:
    """Rebuild `e` bottom-up; `fn(node)` may return a replacement for a node (or None to keep
    it, after its children were transformed). Unchanged subtrees are shared, not copied."""
    replaced = fn(e)
    if replaced is not None:
        return replaced
    kids = e.children()
    if not kids:
        return e
    new_kids = tuple(transform(k, fn) for k in kids)
    if all(n is o for n, o in zip(new_kids, kids)):
        return e
    return e.rebuild(new_kids)


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables by expressions."""
    if not mapping:
        return e
    return transform(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def free_vars(e: Expr) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}
