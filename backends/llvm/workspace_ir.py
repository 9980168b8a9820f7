"""The runtime's workspace cache: the heap buffers of kernels (stages computed at root, such as a
padded input or a Winograd transform), reused from call to call, generated as LLVM IR.

A kernel that called `aligned_alloc` and `free` per call paid for the whole buffer again
whenever glibc handed it fresh pages: blocks above its mmap threshold come from `mmap` and
go back on `free`, and a heap top above the trim threshold is returned too, so every call
faulted its pages in anew (docs/architecture.md). Kernels now call

    declare ptr @minitc_workspace_alloc(i64 %bytes)   ; a multiple of 64; 64-byte aligned
    declare void @minitc_workspace_free(ptr %p)

and the runtime keeps up to SLOTS buffers. An allocation takes the smallest idle buffer that
is large enough; if none is, it grows the largest idle one (freeing it and allocating the new
size), so the cache settles at the few largest buffers that are live at once; with every slot
in use it falls back to `aligned_alloc`, which `minitc_workspace_free` then frees. One
spin-lock guards the table: concurrent kernels (two Python threads, tasks of a parallel loop
that allocate) each get their own buffer. `minitc_workspace_release()` frees the idle buffers.
"""

import llvmlite.ir as ir

SLOTS = 16
ALIGN = 64
SYMBOLS = ("minitc_workspace_alloc", "minitc_workspace_free")

_i32, _i64 = ir.IntType(32), ir.IntType(64)
_ptr = ir.IntType(8).as_pointer()
_void = ir.VoidType()


def _c(ty, value):
    return ir.Constant(ty, value)


class _Workspace:
    def __init__(self, mod: ir.Module, pause: ir.Function):
        self.mod, self.pause = mod, pause
        self.aligned_alloc = ir.Function(mod, ir.FunctionType(_ptr, [_i64, _i64]), "aligned_alloc")
        self.free = ir.Function(mod, ir.FunctionType(_void, [_ptr]), "free")

        def g(name, ty, init):
            gv = ir.GlobalVariable(mod, ty, name=f"minitc_ws_{name}")
            gv.initializer, gv.linkage, gv.align = _c(ty, init), "internal", 64
            return gv

        self.lock = g("lock", _i32, 0)
        self.ptrs = g("ptrs", ir.ArrayType(_ptr, SLOTS), None)
        self.sizes = g("sizes", ir.ArrayType(_i64, SLOTS), None)  # bytes of each slot's buffer
        self.busy = g("busy", ir.ArrayType(_i64, SLOTS), None)  # 1 while a kernel holds it
        self._alloc_fn()
        self._free_fn()
        self._release_fn()

    # -- helpers ------------------------------------------------------------------------------

    def _function(self, name, ret, args):
        fn = ir.Function(self.mod, ir.FunctionType(ret, args), name=name)
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    def _acquire(self, b):
        retry, locked = (b.function.append_basic_block(k) for k in ("acquire", "locked"))
        b.branch(retry)
        b.position_at_end(retry)
        res = b.cmpxchg(self.lock, _c(_i32, 0), _c(_i32, 1), "acquire", "monotonic")
        wait = b.function.append_basic_block("wait")
        b.cbranch(b.extract_value(res, 1), locked, wait)
        b.position_at_end(wait)
        b.call(self.pause, [])
        b.branch(retry)
        b.position_at_end(locked)

    def _release_lock(self, b):
        b.store_atomic(_c(_i32, 0), self.lock, "release", 4)

    def _slot(self, b, table, i):
        return b.gep(table, [_c(_i32, 0), i])

    def _each_slot(self, b, body):
        """for i in range(SLOTS): body(b, i), with the loop variable in a stack slot."""
        counter = b.alloca(_i64)
        b.store(_c(_i64, 0), counter)
        head, step, done = (b.function.append_basic_block(k) for k in ("slot", "next_slot", "slots_done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(counter)
        body(b, i)
        b.branch(step)
        b.position_at_end(step)
        nxt = b.add(b.load(counter), _c(_i64, 1))
        b.store(nxt, counter)
        b.cbranch(b.icmp_signed("<", nxt, _c(_i64, SLOTS)), head, done)
        b.position_at_end(done)

    def _variable(self, b, value):
        slot = b.alloca(_i64)
        b.store(_c(_i64, value), slot)
        return slot

    # -- entry points -------------------------------------------------------------------------

    def _alloc_fn(self):
        fn, b = self._function(SYMBOLS[0], _ptr, [_i64])
        (size,) = fn.args
        best, best_size = self._variable(b, -1), self._variable(b, -1)  # smallest idle one that fits
        grow, grow_size = self._variable(b, -1), self._variable(b, -1)  # largest idle one
        self._acquire(b)

        def scan(b, i):
            idle = b.icmp_signed("==", b.load(self._slot(b, self.busy, i)), _c(_i64, 0))
            have = b.load(self._slot(b, self.sizes, i))
            smaller = b.icmp_unsigned("<", have, b.load(best_size))  # -1: no candidate yet
            fits = b.and_(idle, b.and_(b.icmp_signed(">=", have, size), smaller))
            b.store(b.select(fits, i, b.load(best)), best)
            b.store(b.select(fits, have, b.load(best_size)), best_size)
            larger = b.and_(idle, b.icmp_signed(">", have, b.load(grow_size)))
            b.store(b.select(larger, i, b.load(grow)), grow)
            b.store(b.select(larger, have, b.load(grow_size)), grow_size)

        self._each_slot(b, scan)
        found = b.load(best)
        reuse, try_grow, grown, fallback = (fn.append_basic_block(k) for k in ("reuse", "try_grow", "grow", "fallback"))
        b.cbranch(b.icmp_signed(">=", found, _c(_i64, 0)), reuse, try_grow)

        b.position_at_end(reuse)
        b.store(_c(_i64, 1), self._slot(b, self.busy, found))
        p = b.load(self._slot(b, self.ptrs, found))
        self._release_lock(b)
        b.ret(p)

        b.position_at_end(try_grow)
        victim = b.load(grow)
        b.cbranch(b.icmp_signed(">=", victim, _c(_i64, 0)), grown, fallback)

        b.position_at_end(grown)
        b.call(self.free, [b.load(self._slot(b, self.ptrs, victim))])
        p = b.call(self.aligned_alloc, [_c(_i64, ALIGN), size])
        b.store(p, self._slot(b, self.ptrs, victim))
        ok = b.icmp_unsigned("!=", p, _c(_ptr, None))
        b.store(b.select(ok, size, _c(_i64, 0)), self._slot(b, self.sizes, victim))
        b.store(b.zext(ok, _i64), self._slot(b, self.busy, victim))  # a failed one stays idle
        self._release_lock(b)
        b.ret(p)

        b.position_at_end(fallback)
        self._release_lock(b)
        b.ret(b.call(self.aligned_alloc, [_c(_i64, ALIGN), size]))

    def _free_fn(self):
        fn, b = self._function(SYMBOLS[1], _void, [_ptr])
        (p,) = fn.args
        owned = self._variable(b, 0)
        self._acquire(b)

        def scan(b, i):
            busy = self._slot(b, self.busy, i)
            mine = b.icmp_unsigned("==", b.load(self._slot(b, self.ptrs, i)), p)
            hit = b.and_(mine, b.icmp_signed("==", b.load(busy), _c(_i64, 1)))
            hit = b.and_(hit, b.icmp_signed("==", b.load(owned), _c(_i64, 0)))
            b.store(b.select(hit, _c(_i64, 0), b.load(busy)), busy)
            b.store(b.select(hit, _c(_i64, 1), b.load(owned)), owned)

        self._each_slot(b, scan)
        self._release_lock(b)
        outside, done = fn.append_basic_block("outside"), fn.append_basic_block("done")
        b.cbranch(b.icmp_signed("==", b.load(owned), _c(_i64, 0)), outside, done)
        b.position_at_end(outside)
        b.call(self.free, [p])  # a fallback allocation
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()

    def _release_fn(self):
        fn, b = self._function("minitc_workspace_release", _void, [])
        self._acquire(b)

        def scan(b, i):
            idle = b.icmp_signed("==", b.load(self._slot(b, self.busy, i)), _c(_i64, 0))
            drop, keep = b.function.append_basic_block("drop"), b.function.append_basic_block("keep")
            b.cbranch(idle, drop, keep)
            b.position_at_end(drop)
            b.call(self.free, [b.load(self._slot(b, self.ptrs, i))])
            b.store(_c(_ptr, None), self._slot(b, self.ptrs, i))
            b.store(_c(_i64, 0), self._slot(b, self.sizes, i))
            b.branch(keep)
            b.position_at_end(keep)

        self._each_slot(b, scan)
        self._release_lock(b)
        b.ret_void()


def add_workspace(mod: ir.Module, pause: ir.Function) -> None:
    """Add the workspace cache's entry points (SYMBOLS and `minitc_workspace_release`) to the
    runtime module; `pause` is the runtime's spin-wait hint."""
    _Workspace(mod, pause)
