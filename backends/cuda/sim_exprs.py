"""Expressions for the GPU simulator (sim.py). `compile_expr(e, ctx)` gives `fn(env)`, whose
value is a numpy scalar when it is the same on every active lane (constants, serial loop
variables and what is computed from them only) or an array with one value per active lane.
The arithmetic is the reference interpreter's (minitc/interp.py) on whole arrays: exact dtypes,
`//` and `%` toward minus infinity, nan-propagating min/max, and `select` evaluating each branch
only on the lanes that take it.
"""

from __future__ import annotations

import numpy as np

from minitc.backends.cuda.sim_memory import compile_flat
from minitc.errors import IRError
from minitc.expr import Binary, Call, Cast, Compare, Const, Not, Select, Var
from minitc.interp import compare_fn, intrinsic_fn
from minitc.ir import Load


class Context:
    """Compile-time state: which slot holds each loop variable and buffer in scope."""

    def __init__(self, name: str):
        self.name = name  # the launch, for error messages
        self.slot_names = []
        self.vars = {}  # Var -> (slot, per_lane)
        self.buffers = {}  # Buffer -> slot

    def new_slot(self, name: str) -> int:
        self.slot_names.append(name)
        return len(self.slot_names) - 1

    def loops(self) -> tuple:
        """(name, slot, per_lane) of the loop variables in scope, outermost first."""
        return tuple((v.name, s, per_lane) for v, (s, per_lane) in self.vars.items())

    def buffer_slot(self, buffer, what: str) -> int:
        slot = self.buffers.get(buffer)
        if slot is None:
            raise IRError(
                f"kernel {self.name}: {what} buffer {buffer.name}, which is neither a parameter nor allocated here"
            )
        return slot


def compile_expr(e, ctx: Context):
    for cls in type(e).__mro__:  # IterVar compiles as a Var
        compile_fn = EXPR_COMPILERS.get(cls)
        if compile_fn is not None:
            return compile_fn(e, ctx)
    raise IRError(f"the GPU simulator does not know the expression {type(e).__name__}")


def compile_access(buffer, indices, ctx: Context, what: str):
    """(slot, fn(env) -> bounds-checked flat index) of a load or store."""
    slot = ctx.buffer_slot(buffer, what)
    fns = tuple(compile_expr(i, ctx) for i in indices)
    return slot, compile_flat(buffer, fns, ctx.loops(), ctx.name, what)


def _compile_const(e: Const, ctx: Context):
    value = np.dtype(e.dtype).type(e.value)
    return lambda env: value


def _compile_var(e: Var, ctx: Context):
    if e not in ctx.vars:
        raise IRError(f"kernel {ctx.name}: variable {e.name} is used outside any loop that binds it")
    slot, per_lane = ctx.vars[e]
    if not per_lane:
        return lambda env: env.slots[slot]

    def lane_var(env):
        values = env.slots[slot]  # one per lane of the chunk
        return values if env.lanes is None else values[env.lanes]

    return lane_var


def _compile_load(e: Load, ctx: Context):
    slot, flat = compile_access(e.buffer, e.indices, ctx, "load from")

    def load(env):
        mem = env.slots[slot]
        key = mem.keys(env, flat(env))
        if mem.tracker is not None:
            mem.tracker.read(env, key)
        return mem.data[key]

    return load


def _int_divide(fn):
    """Integer `//` or `%` where a divisor of 0 gives 0, as numpy gives (without its warning)."""

    def divide(a, b):
        with np.errstate(divide="ignore"):
            return fn(a, b)

    return divide


def _binary_fn(op: str):
    return {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "floordiv": _int_divide(np.floor_divide),
        "mod": _int_divide(np.mod),
        "min": np.minimum,
        "max": np.maximum,
        "and": np.logical_and,
        "or": np.logical_or,
    }.get(op)


def _compile_binary(e: Binary, ctx: Context):
    fn = _binary_fn(e.op)
    if fn is None:
        raise IRError(f"unknown binary operator {e.op!r}")
    a, b = compile_expr(e.a, ctx), compile_expr(e.b, ctx)
    if e.op == "add":  # the hot index arithmetic, inlined
        return lambda env: a(env) + b(env)
    if e.op == "mul":
        return lambda env: a(env) * b(env)
    return lambda env: fn(a(env), b(env))


def _compile_compare(e: Compare, ctx: Context):
    fn = compare_fn(e)
    a, b = compile_expr(e.a, ctx), compile_expr(e.b, ctx)
    return lambda env: fn(a(env), b(env))


def _compile_not(e: Not, ctx: Context):
    a = compile_expr(e.a, ctx)
    return lambda env: np.logical_not(a(env))


def _compile_select(e: Select, ctx: Context):
    cond, t, f = compile_expr(e.cond, ctx), compile_expr(e.t, ctx), compile_expr(e.f, ctx)
    dtype = np.dtype(e.dtype)

    def select(env):
        c = cond(env)
        if np.ndim(c) == 0:
            return t(env) if c else f(env)
        if c.all():
            return t(env)
        if not c.any():
            return f(env)
        out = np.empty(env.n, dtype)
        for mask, branch in ((c, t), (~c, f)):  # each branch only on its own lanes
            saved = env.narrow(mask)
            try:
                out[mask] = branch(env)
            finally:
                env.restore(saved)
        return out

    return select


def _compile_cast(e: Cast, ctx: Context):
    value = compile_expr(e.value, ctx)
    dtype = np.dtype(e.dtype)

    def cast(env):
        v = value(env)
        return v.astype(dtype) if isinstance(v, np.ndarray) else dtype.type(v)

    return cast


def _compile_call(e: Call, ctx: Context):
    fn = intrinsic_fn(e)
    x = compile_expr(e.args[0], ctx)
    return lambda env: fn(x(env))


EXPR_COMPILERS = {
    Const: _compile_const,
    Var: _compile_var,
    Load: _compile_load,
    Binary: _compile_binary,
    Compare: _compile_compare,
    Not: _compile_not,
    Select: _compile_select,
    Cast: _compile_cast,
    Call: _compile_call,
}
