"""From a kernel lowered for a GPU to kernel launches, and the checks that make them race-free.

A lowered kernel is a sequence of root stage nests. On a GPU each one becomes its own launch:
a root stage may read what an earlier one wrote anywhere in memory, and only the end of a launch
orders that across blocks. Full-size intermediates become `temporaries`, global buffers that the
runtime allocates and passes to the launches as extra arguments.

Inside a launch, a loop bound to `blockIdx.x` or `threadIdx.y` is not a loop: every thread runs
the whole body with the variable set to its index (guarded when the loop is shorter than the
launch dimension). That reading is exact only if the schedule obeys three rules, checked here:

1. Every store into global memory is inside loops bound to every block and thread dimension of
   the launch, and every store into shared memory inside loops bound to every thread dimension;
   otherwise all those threads write the same elements.
2. A loop bound to an index nested inside another loop bound to the same index must not use the
   outer loop's variable (a shared-memory fill inside the compute's thread loops does not).
3. No barrier, and no warp shuffle of a cross-thread reduction, sits under a condition that
   differs between the threads of a block.

The simulator (backends/cuda/sim.py) then checks every access of a real run for races.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from minitc import ir
from minitc.errors import ScheduleError
from minitc.expr import Var, walk

DIMS = "xyz"


@dataclass(frozen=True)
class GpuLimits:
    """What a launch may use; the defaults are those of every NVIDIA GPU since Volta."""

    max_threads_per_block: int = 1024
    max_block: tuple = (1024, 1024, 64)
    max_grid: tuple = (2**31 - 1, 65535, 65535)
    max_shared_bytes: int = 48 * 1024  # static __shared__ memory per block
    max_local_bytes: int = 16 * 1024  # per thread; beyond this the "registers" spill anyway


@dataclass
class Launch:
    name: str
    params: list  # the buffers it touches: kernel params, then temporaries, in program order
    body: ir.Stmt
    grid: tuple  # (x, y, z) blocks
    block: tuple  # (x, y, z) threads per block
    shared_bytes: int = 0

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass
class GpuProgram:
    kernel: ir.Kernel  # the whole lowered computation (print it to read the loop nests)
    launches: list
    temporaries: list = field(default_factory=list)  # global buffers allocated by the runtime

    @property
    def buffers(self) -> list:
        return list(self.kernel.params) + list(self.temporaries)


def launch_parts(body: ir.Stmt) -> tuple:
    """(global temporaries, root parts) of a GPU-lowered body: lowering makes every root
    allocation global, and each root part of what they enclose is one launch."""
    temporaries = []
    while isinstance(body, ir.Allocate):
        temporaries.append(body.buffer)
        body = body.body
    return temporaries, list(body.stmts if isinstance(body, ir.Seq) else (body,))


def map_launches(body: ir.Stmt, fn) -> ir.Stmt:
    """The body with `fn` applied to each launch's part, the global temporaries kept around."""
    temporaries, parts = launch_parts(body)
    body = ir.seq(*(fn(p) for p in parts))
    for buf in reversed(temporaries):
        body = ir.Allocate(buf, body)
    return body


def launch_extents(part: ir.Stmt) -> dict:
    """{blockIdx/threadIdx tag: extent} of one launch: the largest loop bound to each."""
    extents = {}
    for s in ir.walk_stmts(part):
        if isinstance(s, ir.For) and s.kind in ir.BLOCK_TAGS + ir.THREAD_TAGS:
            extents[s.kind] = max(extents.get(s.kind, 1), s.extent)
    return extents


def plan_launches(kernel: ir.Kernel, limits: GpuLimits = GpuLimits()) -> GpuProgram:
    """Split a GPU-lowered kernel into launches and check each one (ScheduleError if illegal)."""
    temporaries, parts = launch_parts(kernel.body)
    parts = [p for p in parts if not (isinstance(p, ir.Seq) and not p.stmts)]
    order = list(kernel.params) + temporaries
    launches = []
    for n, part in enumerate(parts):
        name = kernel.name if len(parts) == 1 else f"{kernel.name}_{n}"
        launches.append(_launch(name, part, order, limits))
    return GpuProgram(kernel, launches, temporaries)


def _launch(name: str, body: ir.Stmt, order: list, limits: GpuLimits) -> Launch:
    extents = launch_extents(body)
    grid = tuple(extents.get(f"blockIdx.{d}", 1) for d in DIMS)
    block = tuple(extents.get(f"threadIdx.{d}", 1) for d in DIMS)
    _check_dims(name, grid, block, limits)
    body = _merge_barriers(body)
    checker = _RaceRules(name, extents)
    checker.stmt(body, {}, False)
    shared = sum(b.nbytes for b in checker.allocated if b.scope == "shared")
    if shared > limits.max_shared_bytes:
        raise ScheduleError(
            f"kernel {name} uses {shared} bytes of shared memory, over the {limits.max_shared_bytes} a block "
            "may have; use smaller tiles for the shared-memory caches"
        )
    for b in checker.allocated:
        if b.scope == "local" and b.nbytes > limits.max_local_bytes:
            raise ScheduleError(
                f"kernel {name}: the per-thread buffer {b.name} takes {b.nbytes} bytes, over {limits.max_local_bytes}; "
                "compute it at a loop further inside"
            )
    used = set(checker.used)
    params = [b for b in order if b in used]
    return Launch(name, params, body, grid, block, shared)


def _check_dims(name: str, grid: tuple, block: tuple, limits: GpuLimits) -> None:
    threads = block[0] * block[1] * block[2]
    if threads > limits.max_threads_per_block:
        raise ScheduleError(
            f"kernel {name} has {threads} threads per block ({' x '.join(map(str, block))}), over the limit of "
            f"{limits.max_threads_per_block}; split the thread-bound loops further"
        )
    for d, (b, g) in enumerate(zip(block, grid)):
        if b > limits.max_block[d]:
            raise ScheduleError(
                f"kernel {name}: threadIdx.{DIMS[d]} extent {b} is over the limit of {limits.max_block[d]}"
            )
        if g > limits.max_grid[d]:
            raise ScheduleError(
                f"kernel {name}: blockIdx.{DIMS[d]} extent {g} is over the limit of {limits.max_grid[d]}"
            )


class _RaceRules:
    """Walks one launch checking rules 1-3 of the module docstring."""

    def __init__(self, name: str, extents: dict):
        self.name = name
        self.extents = extents  # tag -> launch extent
        self.allocated = []
        self.used = []  # buffers loaded or stored, in first-use order
        self.local_tags = {}  # local buffer -> the thread tags bound where it is allocated

    def stmt(self, s, bound: dict, divergent: bool) -> None:
        """`bound`: tag -> (Var, loop extent) of the enclosing bound loops; `divergent`: whether
        the threads of a block may disagree about reaching this statement."""
        if isinstance(s, ir.For):
            inner = dict(bound)
            if s.kind in self.extents:
                self._check_rebinding(s, bound.get(s.kind))
                inner[s.kind] = (s.var, s.extent)
                if s.kind in ir.THREAD_TAGS and s.extent < self.extents[s.kind]:
                    divergent = True
            self.stmt(s.body, inner, divergent)
        elif isinstance(s, ir.Seq):
            for c in s.stmts:
                self.stmt(c, bound, divergent)
        elif isinstance(s, ir.IfThenElse):
            self._note_exprs((s.cond,))
            thread_vars = {v for tag, (v, _) in bound.items() if tag in ir.THREAD_TAGS}
            divergent = divergent or bool(_vars(s.cond) & thread_vars)
            self.stmt(s.then, bound, divergent)
            if s.orelse is not None:
                self.stmt(s.orelse, bound, divergent)
        elif isinstance(s, ir.Allocate):
            self.allocated.append(s.buffer)
            if s.buffer.scope == "local":
                self.local_tags[s.buffer] = {t for t in bound if t in ir.THREAD_TAGS}
            self.stmt(s.body, bound, divergent)
        elif isinstance(s, ir.ShuffleXor):
            if divergent:
                raise ScheduleError(
                    f"kernel {self.name}: a cross-thread reduction sits under a condition that differs between the "
                    "threads of a block (a thread loop shorter than the block, or a guard on the thread index); "
                    "every thread of the block must take part: bind loops of one extent to each thread index"
                )
        elif isinstance(s, ir.Barrier):
            if divergent:
                raise ScheduleError(
                    f"kernel {self.name}: a shared-memory fill (and its barrier) sits under a condition that differs "
                    "between the threads of a block (a partial tile or a thread loop shorter than the block); "
                    "use tile sizes that divide the shape, or move the fill outside that condition"
                )
        elif isinstance(s, ir.Store):
            self._check_store(s, bound)
            self._use(s.buffer)
            self._note_exprs(ir.stmt_exprs(s))

    def _check_rebinding(self, s: ir.For, outer) -> None:
        if outer is None:
            return
        outer_var = outer[0]
        if any(outer_var in _vars(e) for st in ir.walk_stmts(s.body) for e in ir.stmt_exprs(st)):
            raise ScheduleError(
                f"kernel {self.name}: loop {s.var.name} is bound to {s.kind} inside loop {outer_var.name}, "
                "also bound to "
                f"{s.kind}, and uses it; both would take the same thread index, so most of their iterations never run. "
                "Bind the inner stage's loops to other indices, or make it a shared-memory stage"
            )

    def _check_store(self, s: ir.Store, bound: dict) -> None:
        if s.buffer.scope == "local":
            inside = {t for t in bound if t in ir.THREAD_TAGS and self.extents.get(t, 1) > 1}
            extra = inside - self.local_tags.get(s.buffer, inside)
            # a store that does not depend on those threads' indices writes the same value in
            # each thread's copy (the total of a cross-thread reduction): that is the whole tile
            uniform = not ({bound[t][0] for t in extra} & {v for e in ir.stmt_exprs(s) for v in _vars(e)})
            if extra and not uniform:
                raise ScheduleError(
                    f"kernel {self.name}: local buffer {s.buffer.name} is allocated outside the loops bound to "
                    f"{', '.join(sorted(extra))} but written inside them, so every thread would get its own copy "
                    "of the whole tile; compute it at a loop inside the thread loops, or use scope 'shared'"
                )
            return
        tags = ir.THREAD_TAGS if s.buffer.scope == "shared" else ir.BLOCK_TAGS + ir.THREAD_TAGS
        for tag in tags:
            if self.extents.get(tag, 1) > 1 and tag not in bound:
                raise ScheduleError(
                    f"kernel {self.name}: the store to {s.buffer.name} is not inside a loop bound to {tag}, so all "
                    f"{self.extents[tag]} {tag} indices write the same elements (a race); bind a loop of "
                    f"{s.buffer.name}'s stage to {tag}"
                )

    def _note_exprs(self, exprs) -> None:
        for e in exprs:
            for node in walk(e):
                if isinstance(node, ir.Load):
                    self._use(node.buffer)

    def _use(self, buffer) -> None:
        if buffer not in self.used:
            self.used.append(buffer)


def sink_guards(s: ir.Stmt) -> ir.Stmt:
    """Move each guard that encloses a barrier down to the statements it protects, so every
    thread of the block reaches the barrier (and takes its share of the shared-memory fill).
    A guard's condition mentions only loops outside it and reads no memory, so testing it
    again further in is equivalent."""

    def push(cond, body):
        if not _has_barrier(body):
            return ir.IfThenElse(cond, body)
        if isinstance(body, (ir.Barrier, ir.ShuffleXor)):
            return body
        if isinstance(body, ir.For):
            return replace(body, body=push(cond, body.body))
        if isinstance(body, ir.Allocate):
            return ir.Allocate(body.buffer, push(cond, body.body))
        if isinstance(body, ir.Seq):
            return ir.seq(*(push(cond, c) for c in body.stmts))
        if isinstance(body, ir.IfThenElse) and body.orelse is None:
            from minitc.expr import logical

            return push(logical("and", cond, body.cond), body.then)
        return ir.IfThenElse(cond, body)

    def fn(node):
        if isinstance(node, ir.IfThenElse) and node.orelse is None and _has_barrier(node.then):
            return push(node.cond, node.then)
        return None

    return ir.map_stmt(s, fn)


def _has_barrier(s: ir.Stmt) -> bool:
    return any(isinstance(n, (ir.Barrier, ir.ShuffleXor)) for n in ir.walk_stmts(s))


def _vars(e) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}


def _merge_barriers(s: ir.Stmt) -> ir.Stmt:
    """Two shared fills at the same loop give `barrier; barrier`: one is enough."""

    def fn(node):
        if not isinstance(node, ir.Seq):
            return None
        out = []
        for c in node.stmts:
            if not (isinstance(c, ir.Barrier) and out and isinstance(out[-1], ir.Barrier)):
                out.append(c)
        return ir.seq(*out) if len(out) != len(node.stmts) else None

    return ir.map_stmt(s, fn)
