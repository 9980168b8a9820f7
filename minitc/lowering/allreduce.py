"""Cross-thread reductions on the GPU: a reduction loop bound to threadIdx.x (TVM's
lower_thread_allreduce and MetaSchedule's CrossThreadReduction, in minitc's terms).

Nest construction (nest.py, `cross_thread_reduction`) turns such a stage into

    for k_i in bind("threadIdx.x", T):          # the bound reduction loop, hoisted outermost
        with alloc("local", float32[1]) as acc:  # one partial result per thread
            acc[0] = identity
            for k_o in range(K / T): acc[0] = combine(acc[0], x[.., k_o * T + k_i])
            ThreadAllReduce(acc)                 # afterwards every thread holds the total
            y[..] = acc[0]                       # a local y: every thread; else `if k_i == 0`

and `lower_allreduce`, which runs once the launch's block shape is known, replaces each
ThreadAllReduce by warp shuffles, shared memory and barriers. The reduction runs over all
threadIdx.x of the block (T must be the block's x extent), independently for every (y, z):

- T a power of two up to 32: xor shuffles within segments of T lanes; nothing shared.
- T a multiple of 32 (W = T / 32 warps): each warp's xor shuffles; lane 0 writes its warp's
  result to scratch[group, warp]; barrier; each segment of P lanes (P the power of two >= W)
  reads the W values (identities past W) and shuffles them again, so every thread ends with
  the total.
- otherwise (7, 33, 100 threads: warps would straddle the groups): a tree in shared memory
  padded to the next power of two P, with identities in [T, P) and a barrier per level.

Every path gives every thread the same total, and the shared scratch is race-free between
barriers (the simulator checks it). Inside a loop, a last barrier keeps the next execution's
writes from overtaking slow readers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from minitc import ir
from minitc.errors import ScheduleError
from minitc.expr import Const, Var, const
from minitc.lowering.gpu import launch_extents, map_launches
from minitc.te import combine

WARP = 32  # threads per warp on every NVIDIA GPU (also the simulator's and the templates')


@dataclass(eq=False)
class ThreadAllReduce(ir.Stmt):
    """Placeholder until `lower_allreduce`: combine `buffer[0]` over the `extent` threads of
    threadIdx.x (`tx` is the bound loop's variable), leaving the total in every thread."""

    buffer: ir.Buffer
    combiner: str
    init: Const
    tx: Var
    extent: int
    stage: str


def lower_allreduce(body: ir.Stmt) -> ir.Stmt:
    """Replace every ThreadAllReduce of a GPU-lowered kernel body by shuffles, shared memory and
    barriers (module docstring). Each root part is one launch, whose block shape it reads."""
    if not any(isinstance(s, ThreadAllReduce) for s in ir.walk_stmts(body)):
        return body
    return map_launches(body, lambda part: _Lowerer(_block(part)).stmt(part, {}, False))


def _block(part: ir.Stmt) -> tuple:
    extents = launch_extents(part)
    return tuple(extents.get(t, 1) for t in ir.THREAD_TAGS)


class _Lowerer:
    def __init__(self, block: tuple):
        self.block = block

    def stmt(self, s, bound: dict, in_loop: bool):
        """`bound`: thread tag -> (Var, extent) of the enclosing bound loops; `in_loop`: whether
        an enclosing loop runs this statement more than once per thread."""
        if isinstance(s, ThreadAllReduce):
            return self.expand(s, bound, in_loop)
        if isinstance(s, ir.For):
            inner = dict(bound)
            if s.kind in ir.THREAD_TAGS:
                inner[s.kind] = (s.var, s.extent)
            looped = in_loop or (s.kind not in ir.GPU_TAGS or s.kind == "vthread") and s.extent > 1
            return replace(s, body=self.stmt(s.body, inner, looped))
        if isinstance(s, ir.Seq):
            return ir.seq(*(self.stmt(c, bound, in_loop) for c in s.stmts))
        if isinstance(s, ir.IfThenElse):
            orelse = None if s.orelse is None else self.stmt(s.orelse, bound, in_loop)
            return ir.IfThenElse(s.cond, self.stmt(s.then, bound, in_loop), orelse)
        if isinstance(s, ir.Allocate):
            return ir.Allocate(s.buffer, self.stmt(s.body, bound, in_loop))
        return s

    def expand(self, r: ThreadAllReduce, bound: dict, in_loop: bool) -> ir.Stmt:
        bx, by, bz = self.block
        if r.extent != bx:
            raise ScheduleError(
                f"the cross-thread reduction of {r.stage} runs over {r.extent} threads in x, but its kernel has "
                f"{bx}: the threads past {r.extent} would skip its shuffles and barriers. Bind loops of one "
                "extent to threadIdx.x in every stage of the kernel (the reduction loop's split factor)"
            )
        fresh = []  # thread loops to wrap around it, where no enclosing loop gives the index

        def index(tag: str, n: int):
            if n == 1:
                return const(0)
            if tag in bound:
                var, extent = bound[tag]
                if extent != n:
                    raise ScheduleError(
                        f"the cross-thread reduction of {r.stage} sits in a loop bound to {tag} of extent "
                        f"{extent}, but the block has {n} such threads, which would skip its barriers; "
                        f"bind loops of one extent to {tag}"
                    )
                return var
            var = Var(tag.replace("threadIdx.", "t"))
            fresh.append((var, n, tag))
            return var

        group = index("threadIdx.y", by) + index("threadIdx.z", bz) * by
        groups = by * bz
        t, acc = r.extent, r.buffer
        if t <= WARP and t & (t - 1) == 0:
            out = ir.seq(*_butterfly(acc, r.combiner, t, t))
        elif t % WARP == 0:
            out = self._warps(r, group, groups, in_loop)
        else:
            out = self._tree(r, group, groups, in_loop)
        for var, n, tag in reversed(fresh):
            out = ir.For(var, n, tag, out)
        return out

    def _warps(self, r: ThreadAllReduce, group, groups: int, in_loop: bool) -> ir.Stmt:
        acc, tx, n = r.buffer, r.tx, r.extent // WARP
        scratch = ir.Buffer(f"{acc.name}_warps", (groups * n,), acc.dtype, "shared")
        # every segment of p lanes reads all n warp totals (identities past n) and combines
        # them, so that every lane, not only the first p, ends with the total
        p = _pow2_at_least(n)
        lane, part = tx % WARP, tx % p
        body = _butterfly(acc, r.combiner, WARP, WARP) + [
            ir.IfThenElse(lane == 0, ir.Store(scratch, (group * n + tx // WARP,), _value(acc))),
            ir.Barrier(),
            ir.IfThenElse(part < n, _set(acc, ir.Load(scratch, (group * n + part,))), _set(acc, r.init))
            if p > n
            else _set(acc, ir.Load(scratch, (group * n + part,))),
        ]
        body += _butterfly(acc, r.combiner, p, WARP)
        if in_loop:
            body.append(ir.Barrier())
        return ir.Allocate(scratch, ir.seq(*body))

    def _tree(self, r: ThreadAllReduce, group, groups: int, in_loop: bool) -> ir.Stmt:
        acc, tx, t = r.buffer, r.tx, r.extent
        p = _pow2_at_least(t)
        scratch = ir.Buffer(f"{acc.name}_tree", (groups * p,), acc.dtype, "shared")
        base = group * p

        def at(i):
            return ir.Load(scratch, (base + i,))

        body = [ir.Store(scratch, (base + tx,), _value(acc))]
        if p > t:  # the padding holds identities: threads [0, p - t) write one each
            body.append(ir.IfThenElse(tx < p - t, ir.Store(scratch, (base + tx + t,), r.init)))
        body.append(ir.Barrier())
        step = p // 2
        while step >= 1:
            update = ir.Store(scratch, (base + tx,), combine(r.combiner, at(tx), at(tx + step)))
            body += [ir.IfThenElse(tx < step, update), ir.Barrier()]
            step //= 2
        body.append(_set(acc, at(const(0))))
        if in_loop:
            body.append(ir.Barrier())
        return ir.Allocate(scratch, ir.seq(*body))


def _butterfly(acc: ir.Buffer, combiner: str, span: int, width: int) -> list:
    """xor shuffles over `span` lanes (a power of two) within segments of `width` lanes."""
    steps, offset = [], span // 2
    while offset >= 1:
        steps.append(ir.ShuffleXor(acc, combiner, offset, width))
        offset //= 2
    return steps


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _value(acc: ir.Buffer):
    return ir.Load(acc, (const(0),))


def _set(acc: ir.Buffer, value) -> ir.Store:
    return ir.Store(acc, (const(0),), value)
