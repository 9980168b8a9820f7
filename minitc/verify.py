"""The IR verifier: checks that a kernel is well formed before anything consumes it.

`verify(kernel)` walks the kernel in printing order and raises `IRError` at the first problem,
with the path to it: `kernel matmul, in loop i_o > loop j: ...`. It checks

- scoping: every variable is bound by an enclosing loop, no loop rebinds a variable that an
  enclosing loop binds, every buffer read or written is a parameter or allocated by an
  enclosing `Allocate`, and no `Allocate` allocates a parameter;
- types: index count equals buffer rank, indices are integers, a store's value has the
  buffer's dtype, `if` conditions are bool, loop extents are positive ints;
- loop kinds: the kind is known; a `vectorized` loop has extent <= 64 and no loop or
  allocation inside; `parallel` loops do not nest; a store inside a parallel loop does not
  write a `local` buffer allocated outside that loop at an index that does not depend on the
  parallel loop (every thread would write the same elements: a race);
- prefetches: a `Prefetch` addresses a buffer in scope with int64 indices (it may point past
  the buffer's end: a prefetch never faults) at a locality 0-3; a loop's prefetch requests are
  `PrefetchRequest`s with a positive distance, on a serial or unrolled loop.
"""

from __future__ import annotations

import numbers

from minitc import dtypes
from minitc.errors import IRError
from minitc.expr import Var, walk
from minitc.ir import (
    LOOP_KINDS,
    Allocate,
    Barrier,
    For,
    IfThenElse,
    Kernel,
    Load,
    Prefetch,
    PrefetchRequest,
    Seq,
    ShuffleXor,
    Store,
    walk_stmts,
)

MAX_VECTOR_LANES = 64


def verify(kernel: Kernel) -> None:
    """Raise IRError describing the first malformed construct in `kernel`; return None if the
    kernel is well formed."""
    _Verifier(kernel).run()


class _Failure(Exception):
    """Internal: carries the message up to `run`, which adds the kernel name."""


class _Verifier:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.path = []  # "loop i", "if", "else", "alloc T" from the root to the current node
        self.bound = set()  # loop variables in scope
        self.params = set(kernel.params)
        self.allocated = {}  # Buffer -> number of enclosing parallel loops at its Allocate
        self.parallel_depth = 0
        self.parallel_vars = []  # variables of the enclosing parallel loops
        self.handlers = {
            For: self._for,
            Store: self._store,
            Seq: self._seq,
            IfThenElse: self._if,
            Allocate: self._allocate,
            Barrier: lambda s: None,
            ShuffleXor: self._shuffle,
            Prefetch: self._prefetch,
        }

    def run(self) -> None:
        try:
            self._check_params()
            self.stmt(self.kernel.body)
        except _Failure as failure:
            where = f"in {' > '.join(self.path)}" if self.path else "at top level"
            raise IRError(f"kernel {self.kernel.name}, {where}: {failure}") from None

    def _check_params(self) -> None:
        names = set()
        if not 0 <= self.kernel.num_inputs <= len(self.kernel.params):
            raise _Failure(f"num_inputs is {self.kernel.num_inputs} but there are {len(self.kernel.params)} params")
        for b in self.kernel.params:
            if b.dtype not in dtypes.ALL:
                raise _Failure(f"parameter {b.name} has unknown dtype {b.dtype!r}")
            if b.name in names:
                raise _Failure(f"two parameters are named {b.name}")
            names.add(b.name)

    # -- statements ----------------------------------------------------------------------------

    def stmt(self, s) -> None:
        handler = self.handlers.get(type(s))
        if handler is None:
            raise _Failure(f"unknown statement {type(s).__name__} ({s!r:.60})")
        handler(s)

    def _for(self, s: For) -> None:
        name = s.var.name if isinstance(s.var, Var) else repr(s.var)
        if not isinstance(s.var, Var):
            raise _Failure(f"loop variable {s.var!r} is not a Var")
        if not dtypes.is_int(s.var.dtype):
            raise _Failure(f"loop variable {name} has dtype {s.var.dtype}; it must be an integer")
        if s.var in self.bound:
            raise _Failure(f"loop variable {name} is already bound by an enclosing loop (the same Var object)")
        if not isinstance(s.extent, numbers.Integral) or isinstance(s.extent, bool) or s.extent <= 0:
            raise _Failure(f"loop {name} has extent {s.extent!r}; extents must be positive ints")
        if s.kind not in LOOP_KINDS:
            raise _Failure(f"loop {name} has unknown kind {s.kind!r}; expected one of {', '.join(LOOP_KINDS)}")
        if s.kind == "vectorized":
            self._check_vectorized(s, name)
        if s.prefetch:
            self._check_requests(s, name)
        if s.kind == "parallel" and self.parallel_depth > 0:
            raise _Failure(f"parallel loop {name} is nested inside another parallel loop; parallelise one level only")
        self.path.append(f"loop {name}")
        self.bound.add(s.var)
        self.parallel_depth += s.kind == "parallel"
        if s.kind == "parallel":
            self.parallel_vars.append(s.var)
        self.stmt(s.body)
        if s.kind == "parallel":
            self.parallel_vars.pop()
        self.parallel_depth -= s.kind == "parallel"
        self.bound.discard(s.var)
        self.path.pop()

    def _check_vectorized(self, s: For, name: str) -> None:
        if s.extent > MAX_VECTOR_LANES:
            raise _Failure(f"vectorized loop {name} has extent {s.extent} > {MAX_VECTOR_LANES}; split it first")
        for inner in walk_stmts(s.body):
            if isinstance(inner, For):
                raise _Failure(
                    f"vectorized loop {name} contains loop {inner.var.name}; only the innermost loop can be vectorized"
                )
            if isinstance(inner, Allocate):
                raise _Failure(f"vectorized loop {name} contains an allocation of {inner.buffer.name}")

    def _check_requests(self, s: For, name: str) -> None:
        if s.kind not in ("serial", "unrolled"):
            raise _Failure(f"{s.kind} loop {name} carries prefetch requests; only serial and unrolled loops can")
        for r in s.prefetch:
            if not isinstance(r, PrefetchRequest):
                raise _Failure(f"loop {name} has prefetch request {r!r}; it must be an ir.PrefetchRequest")
            if isinstance(r.ahead, bool) or not isinstance(r.ahead, numbers.Integral) or r.ahead < 1:
                raise _Failure(f"loop {name} prefetches {r.buffer} {r.ahead!r} iterations ahead; it must be >= 1")

    def _prefetch(self, s: Prefetch) -> None:
        # no bounds: the last iterations prefetch past the buffer's end, which is harmless
        self._access(s.buffer, s.indices, "prefetch of")
        for n, index in enumerate(s.indices):
            self.expr(index)
            if index.dtype != dtypes.INDEX:
                raise _Failure(
                    f"index {n} of prefetch of {s.buffer.name} has dtype {index.dtype}; prefetch addresses are "
                    f"{dtypes.INDEX} (cast it)"
                )
        if isinstance(s.locality, bool) or s.locality not in (0, 1, 2, 3):
            raise _Failure(f"prefetch of {s.buffer.name} has locality {s.locality!r}; it must be 0, 1, 2 or 3")

    def _store(self, s: Store) -> None:
        self._access(s.buffer, s.indices, "store to")
        for index in s.indices:
            self.expr(index)
        self.expr(s.value)
        if s.value.dtype != s.buffer.dtype:
            raise _Failure(
                f"store to {s.buffer.name} of a {s.value.dtype} value; the buffer is {s.buffer.dtype} (cast the value)"
            )
        allocated_at = self.allocated.get(s.buffer)
        shared = allocated_at is not None and allocated_at < self.parallel_depth
        if shared and s.buffer.scope == "local" and not self._indexed_by(s.indices, self.parallel_vars[allocated_at:]):
            raise _Failure(
                f"store to local buffer {s.buffer.name} inside a parallel loop, but it is allocated outside that "
                f"loop, so all threads would share it (a data race); allocate it inside the parallel loop"
            )

    @staticmethod
    def _indexed_by(indices, loop_vars) -> bool:
        """Whether the indices mention one of the parallel loops' variables: threads then write
        different elements (full-size buffers written by a parallel stage)."""
        from minitc.expr import walk

        return any(n is v for i in indices for n in walk(i) for v in loop_vars)

    def _shuffle(self, s: ShuffleXor) -> None:
        if s.buffer not in self.allocated:
            raise _Failure(f"shuffle of {s.buffer.name}, which no enclosing Allocate allocates")
        if s.buffer.scope != "local" or s.buffer.shape != (1,):
            raise _Failure(f"shuffle of {s.buffer.name}: it must be a local scalar (shape (1,)), not {s.buffer!r}")
        if s.combiner not in ("sum", "max", "min") or not 0 < s.offset < s.width <= 32:
            raise _Failure(f"shuffle of {s.buffer.name}: bad combiner/offset/width {s.combiner, s.offset, s.width}")

    def _seq(self, s: Seq) -> None:
        for child in s.stmts:
            self.stmt(child)

    def _if(self, s: IfThenElse) -> None:
        self.expr(s.cond)
        if s.cond.dtype != dtypes.BOOL:
            raise _Failure(f"if condition has dtype {s.cond.dtype}; it must be bool (compare it)")
        self.path.append("if")
        self.stmt(s.then)
        self.path.pop()
        if s.orelse is not None:
            self.path.append("else")
            self.stmt(s.orelse)
            self.path.pop()

    def _allocate(self, s: Allocate) -> None:
        b = s.buffer
        if b in self.params:
            raise _Failure(f"Allocate of {b.name}, which is a kernel parameter (allocate a new Buffer)")
        if b in self.allocated:
            raise _Failure(f"Allocate of {b.name}, which an enclosing Allocate already allocates")
        if b.dtype not in dtypes.ALL:
            raise _Failure(f"allocated buffer {b.name} has unknown dtype {b.dtype!r}")
        self.path.append(f"alloc {b.name}")
        self.allocated[b] = self.parallel_depth
        self.stmt(s.body)
        del self.allocated[b]
        self.path.pop()

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e) -> None:
        for node in walk(e):
            if isinstance(node, Var):
                if node not in self.bound:
                    raise _Failure(f"variable {node.name} is used outside any loop that binds it")
            elif isinstance(node, Load):
                self._access(node.buffer, node.indices, "load from")

    def _access(self, buffer, indices, what: str) -> None:
        if buffer not in self.params and buffer not in self.allocated:
            raise _Failure(
                f"{what} buffer {buffer.name}, which is neither a kernel parameter "
                "nor allocated by an enclosing Allocate"
            )
        if len(indices) != len(buffer.shape):
            raise _Failure(
                f"{what} {buffer.name} with {len(indices)} indices, but the buffer has rank {len(buffer.shape)} "
                f"(shape {buffer.shape})"
            )
        for n, index in enumerate(indices):
            if not dtypes.is_int(index.dtype):
                raise _Failure(f"index {n} of {what} {buffer.name} has dtype {index.dtype}; indices must be integers")
