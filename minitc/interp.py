"""The reference interpreter: the definition of what a loop nest means.

`interpret(kernel, args)` runs a kernel on numpy arrays, writing its outputs in place. The rules
it implements are the IR's semantics, which every backend must reproduce:

- Values are numpy scalars of the exact dtype: float32 arithmetic stays float32, loop variables
  and indices are int64, int64/int32 arithmetic wraps on overflow. `//` and `%` round toward
  minus infinity (Python's rule); an integer division or modulo by zero gives 0, as numpy does
  (lowering refuses index arithmetic whose divisor can be 0, so this is data). Float `/` is true
  division; inf and nan are ordinary values (a max-reduction starts at -inf).
- `min`/`max` propagate nan. Comparisons give bool. `and`/`or` evaluate both operands (they are
  logical operators, not control flow); `select` evaluates only the chosen branch, so a
  branch may hold a load that would be out of bounds when the condition is false (padding).
- `Cast` converts like numpy's `.astype` (float to int truncates toward zero).
- Intrinsics: exp log sqrt tanh erf abs floor ceil, and sigmoid(x) = 1 / (1 + exp(-x)).
- Loops of every kind (serial, parallel, vectorized, unrolled, and GPU bindings) run as serial
  loops, in order: the kinds are performance hints and the compiler guarantees the serial order
  is a valid one. `Barrier` and `Prefetch` do nothing; shared and local buffers are ordinary allocations,
  except that a local buffer allocated inside loops bound to thread indices belongs to one
  thread: inside a loop rebinding such an index (a cooperative shared-memory fill) each index
  value reads and writes its own copy, as each GPU thread has its own registers.
- `Allocate` makes a fresh buffer each time it executes, filled with nan (floats), -999999
  (ints) or True (bools), so a read of uninitialised memory shows up in results.
- Any out-of-bounds index, negative ones included, raises `IRError`.

The kernel is compiled once into nested Python closures (one compile function per node type,
chosen from a table) over an environment list with one slot per loop variable and buffer, so
no tree is walked per iteration.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from minitc import dtypes
from minitc.errors import DTypeError, IRError, LayoutError, ShapeError
from minitc.expr import Binary, Call, Cast, Compare, Const, Not, Select, Var
from minitc.intrinsics import NUMPY_INTRINSICS
from minitc.ir import THREAD_TAGS, Allocate, Barrier, For, IfThenElse, Kernel, Load, Prefetch, Seq, Store

INT_SENTINEL = -999999
BOOL_SENTINEL = True


def fill_value(dtype: str):
    """What a fresh allocation holds: nan, or a sentinel, so uninitialised reads show."""
    return np.nan if dtypes.is_float(dtype) else BOOL_SENTINEL if dtype == dtypes.BOOL else INT_SENTINEL


def interpret(kernel: Kernel, args: list) -> None:
    """Execute `kernel` on numpy arrays, one per `kernel.params` in order; outputs are written
    in place. Raises ShapeError / DTypeError / LayoutError for arguments that do not match the
    parameters, and IRError for malformed IR or an out-of-bounds access."""
    _check_args(kernel, args)
    run, nslots = compile_kernel(kernel)
    env = [None] * nslots
    for slot, array in enumerate(args):  # parameters occupy the first slots
        env[slot] = array
    with np.errstate(all="ignore"):
        run(env)


def compile_kernel(kernel: Kernel):
    """Compile a kernel into `(run, nslots)`: `run(env)` executes the body with the parameter
    arrays in `env[0:len(params)]`."""
    ctx = _Context()
    for b in kernel.params:
        ctx.buffers[b] = ctx.new_slot(b.name)
    run = compile_stmt(kernel.body, ctx)
    return run, len(ctx.slot_names)


def _check_args(kernel: Kernel, args) -> None:
    if len(args) != len(kernel.params):
        names = ", ".join(b.name for b in kernel.params)
        raise ShapeError(f"kernel {kernel.name} takes {len(kernel.params)} arrays ({names}), got {len(args)}")
    for n, (b, a) in enumerate(zip(kernel.params, args)):
        if not isinstance(a, np.ndarray):
            raise LayoutError(f"argument {n} ({b.name}) of {kernel.name} must be a numpy array, got {type(a).__name__}")
        if tuple(a.shape) != b.shape:
            raise ShapeError(f"argument {n} ({b.name}) of {kernel.name} has shape {a.shape}, expected {b.shape}")
        if a.dtype != np.dtype(b.dtype):
            raise DTypeError(f"argument {n} ({b.name}) of {kernel.name} has dtype {a.dtype}, expected {b.dtype}")
        if n >= kernel.num_inputs and not a.flags.writeable:
            raise LayoutError(f"output argument {n} ({b.name}) of {kernel.name} is read-only")


class _Context:
    """Compile-time state: which slot holds each variable and buffer in scope."""

    def __init__(self):
        self.slot_names = []  # slot -> name, for error messages
        self.vars = {}  # Var -> slot, for loop variables in scope
        self.buffers = {}  # Buffer -> slot, for parameters and allocations in scope
        self.threads = {}  # thread tag -> slot of the innermost loop bound to it
        self.per_thread = {}  # local Buffer -> the thread tags bound where it is allocated

    def new_slot(self, name: str) -> int:
        self.slot_names.append(name)
        return len(self.slot_names) - 1

    def loop_slots(self) -> tuple:
        """(name, slot) of the loop variables in scope, outermost first."""
        return tuple((v.name, s) for v, s in self.vars.items())


# ---------------------------------------------------------------------------------------------
# statements: compile_stmt(stmt, ctx) -> fn(env)


def compile_stmt(s, ctx: _Context):
    compile_fn = STMT_COMPILERS.get(type(s))
    if compile_fn is None:
        raise IRError(f"the interpreter does not know the statement {type(s).__name__}")
    return compile_fn(s, ctx)


def loop_extent(s: For) -> int:
    """The loop's extent, which the IR requires to be a static integer."""
    if not isinstance(s.extent, (int, np.integer)) or isinstance(s.extent, bool):
        raise IRError(f"loop {s.var.name} has a non-integer extent {s.extent!r}")
    return int(s.extent)


@contextmanager
def binding(scope: dict, key, slot):
    """Bind `key` (a loop variable or buffer) to `slot` in `scope` while its body compiles,
    shadowing an outer binding of the same key and restoring it afterwards."""
    outer = scope.pop(key, None)
    scope[key] = slot
    try:
        yield
    finally:
        del scope[key]
        if outer is not None:
            scope[key] = outer


def _compile_for(s: For, ctx: _Context):
    extent = loop_extent(s)
    slot = ctx.new_slot(s.var.name)
    with binding(ctx.vars, s.var, slot):
        if s.kind in THREAD_TAGS:
            with binding(ctx.threads, s.kind, slot):
                body = compile_stmt(s.body, ctx)
        else:
            body = compile_stmt(s.body, ctx)
    values = [np.int64(v) for v in range(extent)]

    def run_for(env):
        for v in values:
            env[slot] = v
            body(env)

    return run_for


def _compile_seq(s: Seq, ctx: _Context):
    stmts = tuple(compile_stmt(c, ctx) for c in s.stmts)

    def run_seq(env):
        for stmt in stmts:
            stmt(env)

    return run_seq


def _compile_if(s: IfThenElse, ctx: _Context):
    cond = compile_expr(s.cond, ctx)
    then = compile_stmt(s.then, ctx)
    if s.orelse is None:

        def run_if(env):
            if cond(env):
                then(env)

        return run_if
    orelse = compile_stmt(s.orelse, ctx)

    def run_if_else(env):
        if cond(env):
            then(env)
        else:
            orelse(env)

    return run_if_else


def _compile_allocate(s: Allocate, ctx: _Context):
    b = s.buffer
    slot = ctx.new_slot(b.name)
    tags = tuple(sorted(ctx.threads)) if b.scope == "local" else ()
    with binding(ctx.buffers, b, slot), binding(ctx.per_thread, b, tags):
        body = compile_stmt(s.body, ctx)
    fill, shape, dtype = fill_value(b.dtype), b.shape, np.dtype(b.dtype)

    def run_allocate(env):
        env[slot] = {} if tags else np.full(shape, fill, dtype=dtype)  # per thread: made at first use
        body(env)
        env[slot] = None

    return run_allocate


def _compile_store(s: Store, ctx: _Context):
    array = _compile_array(s.buffer, ctx, "store to")
    index = _compile_index(s.buffer, s.indices, ctx, "store to")
    value = compile_expr(s.value, ctx)

    def run_store(env):
        array(env)[index(env)] = value(env)

    return run_store


def _compile_barrier(s: Barrier, ctx: _Context):
    return lambda env: None  # one thread at a time: nothing to wait for


def _compile_prefetch(s: Prefetch, ctx: _Context):
    return lambda env: None  # a cache hint: no effect on results


STMT_COMPILERS = {
    Barrier: _compile_barrier,
    Prefetch: _compile_prefetch,
    For: _compile_for,
    Seq: _compile_seq,
    IfThenElse: _compile_if,
    Allocate: _compile_allocate,
    Store: _compile_store,
}


# ---------------------------------------------------------------------------------------------
# buffer access


def _buffer_slot(buffer, ctx: _Context, what: str) -> int:
    slot = ctx.buffers.get(buffer)
    if slot is None:
        raise IRError(f"{what} buffer {buffer.name}, which is neither a kernel parameter nor allocated here")
    return slot


def _compile_array(buffer, ctx: _Context, what: str):
    """fn(env) -> the buffer's array; for a per-thread local buffer, that of the thread whose
    indices the innermost loops bound to its tags hold."""
    slot = _buffer_slot(buffer, ctx, what)
    tags = ctx.per_thread.get(buffer, ())
    if not tags:
        return lambda env: env[slot]
    slots = tuple(ctx.threads[t] for t in tags)
    fill, shape, dtype = fill_value(buffer.dtype), buffer.shape, np.dtype(buffer.dtype)

    def per_thread(env):
        copies, key = env[slot], tuple(env[s] for s in slots)
        array = copies.get(key)
        if array is None:
            array = copies[key] = np.full(shape, fill, dtype=dtype)
        return array

    return per_thread


def _compile_index(buffer, indices, ctx: _Context, what: str):
    """fn(env) -> the index tuple, bounds-checked (numpy would wrap negative indices)."""
    shape = buffer.shape
    if len(indices) != len(shape):
        raise IRError(f"{what} {buffer.name} with {len(indices)} indices; the buffer has shape {shape}")
    fns = tuple(compile_expr(i, ctx) for i in indices)
    loop_slots = ctx.loop_slots()

    def fail(env, idx):
        loops = ", ".join(f"{name}={env[s]}" for name, s in loop_slots)
        text = ", ".join(str(int(i)) for i in idx)
        where = f" (at {loops})" if loops else ""
        raise IRError(f"out-of-bounds {what} {buffer.name}[{text}]: shape is {shape}{where}")

    if len(fns) == 1:  # the common ranks get unrolled checks: this is the interpreter's hot path
        (f0,), (s0,) = fns, shape

        def index1(env):
            i0 = f0(env)
            if 0 <= i0 < s0:
                return i0
            fail(env, (i0,))

        return index1
    if len(fns) == 2:
        (f0, f1), (s0, s1) = fns, shape

        def index2(env):
            i0, i1 = f0(env), f1(env)
            if 0 <= i0 < s0 and 0 <= i1 < s1:
                return i0, i1
            fail(env, (i0, i1))

        return index2
    pairs = tuple(zip(fns, shape))

    def index_n(env):
        idx = tuple(f(env) for f in fns)
        for i, (_, extent) in zip(idx, pairs):
            if not 0 <= i < extent:
                fail(env, idx)
        return idx

    return index_n


# ---------------------------------------------------------------------------------------------
# expressions: compile_expr(expr, ctx) -> fn(env) -> numpy scalar


def compile_expr(e, ctx: _Context):
    for cls in type(e).__mro__:  # IterVar compiles as a Var
        compile_fn = EXPR_COMPILERS.get(cls)
        if compile_fn is not None:
            return compile_fn(e, ctx)
    raise IRError(f"the interpreter does not know the expression {type(e).__name__}")


def _scalar(value, dtype: str):
    return np.dtype(dtype).type(value)


def _compile_const(e: Const, ctx: _Context):
    value = _scalar(e.value, e.dtype)
    return lambda env: value


def _compile_var(e: Var, ctx: _Context):
    slot = ctx.vars.get(e)
    if slot is None:
        raise IRError(f"variable {e.name} is used outside any loop that binds it")
    return lambda env: env[slot]


def _compile_load(e: Load, ctx: _Context):
    array = _compile_array(e.buffer, ctx, "load from")
    index = _compile_index(e.buffer, e.indices, ctx, "load from")
    return lambda env: array(env)[index(env)]


def _idiv(a, b):
    return a // b if b != 0 else type(a)(0)


def _imod(a, b):
    return a % b if b != 0 else type(a)(0)


def _min(a, b):
    return a if (a <= b or a != a) else b  # a != a: a is nan, which propagates


def _max(a, b):
    return a if (a >= b or a != a) else b


BINARY_FNS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "floordiv": _idiv,
    "mod": _imod,
    "min": _min,
    "max": _max,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
}

COMPARE_FNS = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


def _compile_binary(e: Binary, ctx: _Context):
    fn = BINARY_FNS.get(e.op)
    if fn is None:
        raise IRError(f"unknown binary operator {e.op!r}")
    a, b = compile_expr(e.a, ctx), compile_expr(e.b, ctx)
    if e.op in ("floordiv", "mod") and dtypes.is_float(e.dtype):
        raise IRError(f"{e.op} on {e.dtype} operands; it is defined on integers only")
    if e.op in ("add", "sub", "mul"):  # the hot arithmetic, inlined
        if e.op == "add":
            return lambda env: a(env) + b(env)
        if e.op == "sub":
            return lambda env: a(env) - b(env)
        return lambda env: a(env) * b(env)
    return lambda env: fn(a(env), b(env))


def compare_fn(e: Compare):
    """The comparison's implementation; it works on scalars and on arrays alike."""
    fn = COMPARE_FNS.get(e.op)
    if fn is None:
        raise IRError(f"unknown comparison {e.op!r}")
    return fn


def _compile_compare(e: Compare, ctx: _Context):
    fn = compare_fn(e)
    a, b = compile_expr(e.a, ctx), compile_expr(e.b, ctx)
    return lambda env: fn(a(env), b(env))


def _compile_not(e: Not, ctx: _Context):
    a = compile_expr(e.a, ctx)
    return lambda env: np.False_ if a(env) else np.True_


def _compile_select(e: Select, ctx: _Context):
    cond, t, f = compile_expr(e.cond, ctx), compile_expr(e.t, ctx), compile_expr(e.f, ctx)
    return lambda env: t(env) if cond(env) else f(env)


def _compile_cast(e: Cast, ctx: _Context):
    value = compile_expr(e.value, ctx)
    to = np.dtype(e.dtype).type  # numpy scalar conversion: the same rules as .astype
    return lambda env: to(value(env))


def intrinsic_fn(e: Call):
    """The intrinsic's implementation, after checking its one argument; it works on scalars
    and on arrays alike."""
    fn = NUMPY_INTRINSICS.get(e.name)
    if fn is None:
        raise IRError(f"unknown intrinsic {e.name!r}")
    if len(e.args) != 1:
        raise IRError(f"intrinsic {e.name} takes one argument, got {len(e.args)}")
    return fn


def _compile_call(e: Call, ctx: _Context):
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
