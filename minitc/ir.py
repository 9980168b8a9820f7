"""The loop-nest IR: what lowering produces and what backends, the printer, the verifier and the
reference interpreter consume.

A `Kernel` has parameter buffers (inputs then outputs) and a body statement built from

    For(var, extent, kind, body,     0 <= var < extent; kind: serial|parallel|vectorized|unrolled,
        prefetch=())                 or a GPU binding (blockIdx.x, threadIdx.y, vthread, ...)
    Store(buffer, indices, value)    buffer[indices] = value
    Seq(stmts)                       statements in order
    IfThenElse(cond, then, orelse)   guards (non-divisible splits, partial tiles)
    Allocate(buffer, body)           a temporary buffer live within body
    Barrier()                        GPU: every thread of the block waits here (__syncthreads)
    ShuffleXor(buffer, combiner,     GPU: buffer[0] = combine(buffer[0], buffer[0] of the thread
               offset, width)        whose lane is lane ^ offset), a warp shuffle step of a
                                     cross-thread reduction (lowering/allreduce.py)
    Prefetch(buffer, indices,        a hint: bring the line of buffer[indices] into the cache
             locality)               (LLVM: llvm.prefetch); no effect on results, and the index
                                     may lie past the buffer (a prefetch never faults)

and expressions from expr.py plus `Load(buffer, indices)`. Buffers are dense, row-major and have
static shapes; indices are int64.

A `For` may carry prefetch requests (`For.prefetch`, `PrefetchRequest`s from the schedule's
`prefetch` step): the LLVM backend expands them into `Prefetch` statements
(backends/llvm/prefetch.py), the other backends and the interpreter ignore them. A pass that
rebuilds a loop keeps them (`dataclasses.replace`, or `prefetch=loop.prefetch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from minitc import dtypes
from minitc.expr import Expr, Var

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
# A bound loop is not a loop on the GPU: every thread runs the whole body with the loop variable
# set to its block or thread index. "vthread" (a virtual thread) runs as an unrolled loop.
GPU_TAGS = BLOCK_TAGS + THREAD_TAGS + ("vthread",)
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled") + GPU_TAGS
SCOPES = ("global", "shared", "local")


class Buffer:
    """A named, dense, row-major array. `scope` is `global` for kernel arguments and full-size
    intermediates, `local` for tiles that live inside a loop nest (one per GPU thread), `shared`
    for GPU tiles shared by the threads of a block."""

    def __init__(self, name: str, shape: tuple, dtype: str, scope: str = "global"):
        assert scope in SCOPES, scope
        self.name, self.shape, self.dtype, self.scope = name, tuple(int(s) for s in shape), dtype, scope

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * max(1, dtypes.bits(self.dtype) // 8)

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"

    __hash__ = object.__hash__


class Load(Expr):
    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: Buffer, indices: tuple):
        self.buffer, self.indices, self.dtype = buffer, tuple(indices), buffer.dtype

    def children(self):
        return self.indices

    def rebuild(self, kids):
        return Load(self.buffer, kids)


class Stmt:
    __hash__ = object.__hash__


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: int
    kind: str
    body: Stmt
    prefetch: tuple = ()  # PrefetchRequests: what to prefetch in each iteration (LLVM only)


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr


@dataclass(eq=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class Barrier(Stmt):
    """GPU: wait until every thread of the block gets here; shared-memory writes made before it
    are visible after it. Lowering puts one before and after each shared-memory fill."""


@dataclass(eq=False)
class ShuffleXor(Stmt):
    """GPU: one butterfly step of a warp reduction: every thread combines its `buffer[0]` (a
    local scalar) with that of the thread whose lane is its own xor `offset`, within segments of
    `width` lanes (`__shfl_xor_sync`). Like a barrier, every thread of the warp must reach it."""

    buffer: Buffer
    combiner: str  # sum, max or min
    offset: int
    width: int


@dataclass(eq=False)
class Prefetch(Stmt):
    """Bring the cache line of `buffer[indices]` closer to the core ahead of its use: a read
    prefetch into every level (`locality` 3) or into L2 and outward (2), as `llvm.prefetch`
    says. Backends without prefetches (CUDA, the interpreter, the simulator) skip it."""

    buffer: Buffer
    indices: tuple
    locality: int = 3


@dataclass(frozen=True)
class PrefetchRequest:
    """Prefetch, in each iteration of the loop that carries the request, what the iteration
    `ahead` iterations later reads of the buffer named `buffer` (the loop variable shifted by
    `ahead` in the read's indices), at `locality` (3: L1, 2: L2)."""

    buffer: str
    ahead: int
    locality: int = 3


@dataclass(eq=False)
class Kernel:
    """A lowered computation. `params` are the argument buffers: `num_inputs` inputs first,
    then the outputs."""

    name: str
    params: list
    num_inputs: int
    body: Stmt
    meta: dict = field(default_factory=dict)

    @property
    def inputs(self) -> list:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> list:
        return self.params[self.num_inputs :]


def seq(*stmts) -> Stmt:
    """A statement sequence, flattened, with empty parts dropped."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def stmt_children(s: Stmt) -> tuple:
    if isinstance(s, (For, Allocate)):
        return (s.body,)
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, IfThenElse):
        return (s.then,) if s.orelse is None else (s.then, s.orelse)
    return ()


def walk_stmts(s: Stmt):
    """Every statement, parents before children."""
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(stmt_children(node)))


def stmt_exprs(s: Stmt) -> tuple:
    """The expressions held directly by a statement."""
    if isinstance(s, Store):
        return tuple(s.indices) + (s.value,)
    if isinstance(s, Prefetch):
        return tuple(s.indices)
    if isinstance(s, IfThenElse):
        return (s.cond,)
    return ()


def map_stmt(s: Stmt, fn) -> Stmt:
    """Rebuild a statement tree bottom-up; `fn(stmt)` returns a replacement or None."""
    if isinstance(s, For):
        s = replace(s, body=map_stmt(s.body, fn))
    elif isinstance(s, Allocate):
        s = Allocate(s.buffer, map_stmt(s.body, fn))
    elif isinstance(s, Seq):
        s = seq(*(map_stmt(c, fn) for c in s.stmts))
    elif isinstance(s, IfThenElse):
        s = IfThenElse(s.cond, map_stmt(s.then, fn), None if s.orelse is None else map_stmt(s.orelse, fn))
    replaced = fn(s)
    return s if replaced is None else replaced
