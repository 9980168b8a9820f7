"""Parallel runtime for JIT-compiled CPU kernels: a persistent thread pool written in LLVM IR.

The pool is generated with ``llvmlite.ir``, JIT-compiled once per process with MCJIT, and its
entry points are registered with ``llvmlite.binding.add_symbol`` so that kernel modules which
merely *declare* them link against it. No C extension, no Python in the hot path.

ABI (kernel modules declare these)::

    declare void @minitc_parallel_launch(ptr %task, ptr %closure, i64 %num_tasks)
        ; task: void (ptr closure, i64 task_id, i64 num_tasks), run once per task_id in
        ; [0, num_tasks); the caller takes part and returns when every task has finished.
    declare i64 @minitc_num_threads()

Protocol (all state lives in 64-byte aligned globals so hot words do not share cache lines):

* ``claim`` packs ``generation << 32 | next_task``. A thread claims a task with ``cmpxchg``
  that also checks the generation, so a worker that was descheduled while reading an old job
  can never claim a task of a newer job with stale ``task``/``closure``/``num_tasks``.
* The launcher publishes a job (fields, ``done = 0``, then ``claim``), bumps the futex word
  ``wake`` and issues ``FUTEX_WAKE`` only if some worker is asleep (``sleepers > 0``).
* Workers spin on ``wake`` for a bounded number of ``pause`` iterations, then sleep in
  ``FUTEX_WAIT``: an idle pool burns no CPU.
* Each finished task increments ``done``; the launcher spins, then futex-waits, until
  ``done == num_tasks``. The increment that completes the job wakes it if it went to sleep.
* Launches are serialised by a try-lock. A launch that finds the pool busy runs its tasks
  inline and serially on the calling thread: that is what makes a nested launch (from inside
  a task) safe, and it is also what a second Python thread launching concurrently gets.
* ``num_tasks == 1``, a one-thread pool, or more than 2**31 - 1 tasks also run inline.
"""

import ctypes
import os
import statistics
import threading
import time

import llvmlite.binding as llvm
import llvmlite.ir as ir

from minitc.errors import BuildError

MAX_THREADS = 256
MAX_POOLED_TASKS = 2**31 - 1  # task index must fit the low half of ``claim`` and i32 ``done``
# Spin length before sleeping on a futex. One pause is ~37 ns on Zen 2 (similar on recent
# Intel), so 4096 is ~150 us: long enough to catch back-to-back launches from Python, short
# enough that an idle pool goes quiet almost at once.
SPIN_ITERS = 4096

_LOW32 = 0xFFFFFFFF  # claim = gen << 32 | next task index; index all ones: job closed
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
_SIG_BLOCK = 0

_i1, _i32, _i64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
_ptr = ir.IntType(8).as_pointer()
_i32p = _i32.as_pointer()  # futex words
_void = ir.VoidType()
_TASK_TY = ir.FunctionType(_void, [_ptr, _i64, _i64])


def _c(ty, value):
    return ir.Constant(ty, value)


class _RuntimeIR:
    """Builds the runtime module: one method per generated function."""

    def __init__(self, arch):
        if arch not in _SYS_FUTEX:
            raise BuildError(f"minitc parallel runtime: unsupported architecture {arch!r}")
        self.is_x86 = arch == "x86_64"
        self.sys_futex = _SYS_FUTEX[arch]
        self.mod = ir.Module(name="minitc_runtime")
        self._globals()
        self._externals()
        self.futex_wait = self._futex_fn("rt_futex_wait", _FUTEX_WAIT_PRIVATE)
        self.futex_wake = self._futex_fn("rt_futex_wake", _FUTEX_WAKE_PRIVATE)
        self.pause = self._pause_fn()
        self.run_serial = self._run_serial_fn()
        self.work = self._work_fn()
        self.worker = self._worker_fn()
        self.spawn = self._spawn_fn()
        self.run_pool = self._run_pool_fn()
        self._launch_fn()
        self._accessor_fns()

    # -- declarations ---------------------------------------------------------------------

    def _global(self, name, ty, init):
        gv = ir.GlobalVariable(self.mod, ty, name=f"minitc_rt_{name}")
        gv.initializer = _c(ty, init)
        gv.linkage = "internal"
        gv.align = 64  # one cache line each: no false sharing between hot words
        return gv

    def _globals(self):
        g = self._global
        self.lock = g("lock", _i32, 0)  # launch try-lock
        self.wake = g("wake", _i32, 0)  # futex word workers sleep on, bumped per job
        self.sleepers = g("sleepers", _i32, 0)  # workers in (or entering) FUTEX_WAIT
        self.claim = g("claim", _i64, 0)  # generation << 32 | next task index
        self.task = g("task", _ptr, None)
        self.closure = g("closure", _ptr, None)
        self.ntasks = g("ntasks", _i64, 0)
        self.job_workers = g("job_workers", _i64, 0)  # workers with id below may help
        self.done = g("done", _i32, 0)  # finished tasks of the current job
        self.caller_sleeping = g("caller_sleeping", _i32, 0)
        self.num_threads = g("num_threads", _i64, 1)  # requested pool size
        self.num_workers = g("num_workers", _i64, 0)  # worker threads created so far
        self.tids = g("tids", ir.ArrayType(_i64, MAX_THREADS), None)
        self.sigset = g("sigset", ir.ArrayType(_i64, 16), [-1] * 16)  # all signals

    def _externals(self):
        m = self.mod
        self.syscall = ir.Function(m, ir.FunctionType(_i64, [_i64], var_arg=True), "syscall")
        self.pthread_create = ir.Function(
            m, ir.FunctionType(_i32, [_ptr, _ptr, _ptr, _ptr]), "pthread_create"
        )
        self.pthread_sigmask = ir.Function(
            m, ir.FunctionType(_i32, [_i32, _ptr, _ptr]), "pthread_sigmask"
        )

    def _fn(self, name, ret, args, internal=True):
        fn = ir.Function(self.mod, ir.FunctionType(ret, args), name=name)
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    # -- helpers --------------------------------------------------------------------------

    def _futex_fn(self, name, op):
        fn, b = self._fn(name, _void, [_i32p, _i32])
        addr, val = fn.args
        val64 = b.zext(val, _i64)
        b.call(self.syscall, [_c(_i64, self.sys_futex), addr, _c(_i64, op), val64, _c(_ptr, None)])
        b.ret_void()
        return fn

    def _pause_fn(self):
        fn, b = self._fn("rt_pause", _void, [])
        if self.is_x86:  # tells the core we are spinning: saves power, frees the sibling
            b.call(ir.Function(self.mod, ir.FunctionType(_void, []), "llvm.x86.sse2.pause"), [])
        b.ret_void()
        return fn

    @staticmethod
    def _call_task(b, task, closure, t, n):
        b.call(b.bitcast(task, _TASK_TY.as_pointer()), [closure, t, n])

    def _run_serial_fn(self):
        """rt_run_serial(task, closure, n): task(closure, t, n) for t in [0, n) in order."""
        fn, b = self._fn("rt_run_serial", _void, [_ptr, _ptr, _i64])
        task, closure, n = fn.args
        loop, exit_ = fn.append_basic_block("loop"), fn.append_basic_block("exit")
        entry = b.block
        b.cbranch(b.icmp_signed(">", n, _c(_i64, 0)), loop, exit_)
        b.position_at_end(loop)
        t = b.phi(_i64)
        t.add_incoming(_c(_i64, 0), entry)
        self._call_task(b, task, closure, t, n)
        t1 = b.add(t, _c(_i64, 1))
        t.add_incoming(t1, b.block)
        b.cbranch(b.icmp_signed("<", t1, n), loop, exit_)
        b.position_at_end(exit_)
        b.ret_void()
        return fn

    def _spin_then_futex(self, fn, b, word, is_ready, sleep_flag, sleep_delta, done_bb,
                         spin_iters=None):
        """Wait until ``is_ready(b, value_of_word)``: spin ``spin_iters`` (an i64 value,
        default SPIN_ITERS) pauses, then announce
        ourselves in ``sleep_flag`` (seq_cst, so the waker sees it or we see its update) and
        FUTEX_WAIT on ``word``. ``sleep_delta`` is +1/-1 for a counter or None for a 0/1 flag.
        Branches to ``done_bb`` once ready."""
        head, spin = fn.append_basic_block("wait_head"), fn.append_basic_block("spin")
        sleep, do_wait = fn.append_basic_block("sleep"), fn.append_basic_block("futex")
        woke = fn.append_basic_block("woke")
        b.branch(head)
        b.position_at_end(head)
        b.branch(spin)
        b.position_at_end(spin)
        i = b.phi(_i64)
        i.add_incoming(_c(_i64, 0), head)
        cur = b.load_atomic(word, "acquire", 4)
        keep_spinning = fn.append_basic_block("keep_spinning")
        b.cbranch(is_ready(b, cur), done_bb, keep_spinning)
        b.position_at_end(keep_spinning)
        b.call(self.pause, [])
        i1 = b.add(i, _c(_i64, 1))
        i.add_incoming(i1, keep_spinning)
        limit = _c(_i64, SPIN_ITERS) if spin_iters is None else spin_iters
        b.cbranch(b.icmp_unsigned("<", i1, limit), spin, sleep)
        b.position_at_end(sleep)
        if sleep_delta is None:
            b.store_atomic(_c(_i32, 1), sleep_flag, "seq_cst", 4)
        else:
            b.atomic_rmw("add", sleep_flag, _c(_i32, 1), "seq_cst")
        cur2 = b.load_atomic(word, "seq_cst", 4)
        b.cbranch(is_ready(b, cur2), woke, do_wait)
        b.position_at_end(do_wait)
        b.call(self.futex_wait, [word, cur2])  # returns at once if *word != cur2
        b.branch(woke)
        b.position_at_end(woke)
        if sleep_delta is None:
            b.store_atomic(_c(_i32, 0), sleep_flag, "seq_cst", 4)
        else:
            b.atomic_rmw("sub", sleep_flag, _c(_i32, 1), "seq_cst")
        b.branch(head)

    # -- the pool -------------------------------------------------------------------------

    def _work_fn(self):
        """rt_work(gen, task, closure, n): claim and run tasks of job ``gen`` until none left."""
        fn, b = self._fn("rt_work", _void, [_i64, _ptr, _ptr, _i64])
        gen, task, closure, n = fn.args
        bb = {k: fn.append_basic_block(k) for k in ("head", "check", "try", "run", "notify", "exit")}
        b.branch(bb["head"])
        b.position_at_end(bb["head"])
        first = b.load_atomic(self.claim, "seq_cst", 8)
        b.branch(bb["check"])

        b.position_at_end(bb["check"])
        w = b.phi(_i64)
        w.add_incoming(first, bb["head"])
        same_gen = b.icmp_unsigned("==", b.lshr(w, _c(_i64, 32)), gen)
        idx = b.and_(w, _c(_i64, _LOW32))
        left = b.icmp_unsigned("<", idx, n)
        b.cbranch(b.and_(same_gen, left), bb["try"], bb["exit"])

        b.position_at_end(bb["try"])
        res = b.cmpxchg(self.claim, w, b.add(w, _c(_i64, 1)), "seq_cst", "seq_cst")
        w.add_incoming(b.extract_value(res, 0), bb["try"])
        b.cbranch(b.extract_value(res, 1), bb["run"], bb["check"])

        b.position_at_end(bb["run"])
        self._call_task(b, task, closure, idx, n)
        finished = b.add(b.atomic_rmw("add", self.done, _c(_i32, 1), "seq_cst"), _c(_i32, 1))
        b.cbranch(b.icmp_unsigned("==", finished, b.trunc(n, _i32)), bb["notify"], bb["head"])

        b.position_at_end(bb["notify"])  # we finished the job's last task
        asleep = b.load_atomic(self.caller_sleeping, "seq_cst", 4)
        wake = fn.append_basic_block("wake_caller")
        b.cbranch(b.icmp_unsigned("!=", asleep, _c(_i32, 0)), wake, bb["exit"])
        b.position_at_end(wake)
        b.call(self.futex_wake, [self.done, _c(_i32, 1)])
        b.branch(bb["exit"])

        b.position_at_end(bb["exit"])
        b.ret_void()
        return fn

    def _worker_fn(self):
        """rt_worker(id): thread body. Help with the current job, then wait for the next."""
        fn, b = self._fn("rt_worker", _ptr, [_ptr])
        wid = b.ptrtoint(fn.args[0], _i64)
        b.call(self.pthread_sigmask, [_c(_i32, _SIG_BLOCK), b.bitcast(self.sigset, _ptr), _c(_ptr, None)])
        seen0 = b.load_atomic(self.wake, "seq_cst", 4)
        entry = b.block
        work, wait = fn.append_basic_block("work"), fn.append_basic_block("wait")
        b.branch(work)  # a new worker first helps with whatever job is running

        b.position_at_end(work)
        seen = b.phi(_i32)
        seen.add_incoming(seen0, entry)
        word = b.load_atomic(self.claim, "seq_cst", 8)
        allowed = b.icmp_unsigned("<", wid, b.load_atomic(self.job_workers, "seq_cst", 8))
        help_ = fn.append_basic_block("help")
        b.cbranch(allowed, help_, wait)
        b.position_at_end(help_)
        # These reads may mix two jobs; rt_work's generation-checked cmpxchg rejects that.
        task = b.load_atomic(self.task, "seq_cst", 8)
        closure = b.load_atomic(self.closure, "seq_cst", 8)
        n = b.load_atomic(self.ntasks, "seq_cst", 8)
        b.call(self.work, [b.lshr(word, _c(_i64, 32)), task, closure, n])
        b.branch(wait)

        b.position_at_end(wait)
        ready = fn.append_basic_block("ready")
        # A surplus worker (the pool was shrunk) goes straight to sleep instead of spinning.
        spin_iters = b.select(allowed, _c(_i64, SPIN_ITERS), _c(_i64, 0))
        self._spin_then_futex(
            fn, b, self.wake, lambda bb, cur: bb.icmp_unsigned("!=", cur, seen),
            self.sleepers, +1, ready, spin_iters,
        )
        b.position_at_end(ready)
        seen.add_incoming(b.load_atomic(self.wake, "seq_cst", 4), ready)
        b.branch(work)
        return fn

    def _spawn_fn(self):
        """rt_spawn(want) -> available workers (<= want). Creates missing worker threads."""
        fn, b = self._fn("rt_spawn", _i64, [_i64])
        (want,) = fn.args
        head, create, ok, exit_ = (fn.append_basic_block(k) for k in ("head", "create", "ok", "exit"))
        b.branch(head)
        b.position_at_end(head)
        k = b.load(self.num_workers)  # only touched under the launch lock
        b.cbranch(b.icmp_signed("<", k, want), create, exit_)
        b.position_at_end(create)
        slot = b.gep(self.tids, [_c(_i32, 0), k])
        rc = b.call(
            self.pthread_create,
            [b.bitcast(slot, _ptr), _c(_ptr, None), b.bitcast(self.worker, _ptr), b.inttoptr(k, _ptr)],
        )
        b.cbranch(b.icmp_signed("==", rc, _c(_i32, 0)), ok, exit_)  # on failure use what we have
        b.position_at_end(ok)
        b.store(b.add(k, _c(_i64, 1)), self.num_workers)
        b.branch(head)
        b.position_at_end(exit_)
        have = b.load(self.num_workers)
        b.ret(b.select(b.icmp_signed("<", have, want), have, want))
        return fn

    def _run_pool_fn(self):
        """rt_run_pool(task, closure, n, threads): publish a job, take part, wait. Lock held."""
        fn, b = self._fn("rt_run_pool", _void, [_ptr, _ptr, _i64, _i64])
        task, closure, n, threads = fn.args
        want = b.sub(b.select(b.icmp_signed("<", threads, _c(_i64, MAX_THREADS)), threads,
                              _c(_i64, MAX_THREADS)), _c(_i64, 1))
        avail = b.call(self.spawn, [want])
        serial, publish = fn.append_basic_block("serial"), fn.append_basic_block("publish")
        b.cbranch(b.icmp_signed("<=", avail, _c(_i64, 0)), serial, publish)
        b.position_at_end(serial)
        b.call(self.run_serial, [task, closure, n])
        b.ret_void()

        b.position_at_end(publish)
        gen = b.and_(b.add(b.lshr(b.load(self.claim), _c(_i64, 32)), _c(_i64, 1)),
                     _c(_i64, _LOW32))
        # Close the claim word *before* overwriting the fields: a worker still holding the
        # previous job's word would otherwise pass its cmpxchg checked against the new
        # ``num_tasks`` (one task run twice, ``done`` overshooting, the launcher hanging).
        for gv, val in ((self.task, task), (self.closure, closure), (self.ntasks, n),
                        (self.job_workers, avail)):
            b.store_atomic(val, gv, "seq_cst", 8)
        b.store_atomic(_c(_i32, 0), self.done, "seq_cst", 4)
        for _ in range(64):
            b.call(self.pause, [])
        b.store_atomic(b.shl(gen, _c(_i64, 32)), self.claim, "seq_cst", 8)  # open: next task 0
        b.atomic_rmw("add", self.wake, _c(_i32, 1), "seq_cst")
        sleeping = b.load_atomic(self.sleepers, "seq_cst", 4)
        wake, work = fn.append_basic_block("wake"), fn.append_basic_block("work")
        b.cbranch(b.icmp_unsigned("!=", sleeping, _c(_i32, 0)), wake, work)
        b.position_at_end(wake)
        helpers = b.sub(n, _c(_i64, 1))  # no point waking more workers than spare tasks
        helpers = b.select(b.icmp_signed("<", helpers, avail), helpers, avail)
        # FUTEX_WAKE picks sleepers arbitrarily; after set_num_threads shrank the pool some
        # may be surplus workers, so wake that many more to be sure ``helpers`` can help.
        surplus = b.sub(b.load(self.num_workers), avail)
        b.call(self.futex_wake, [self.wake, b.trunc(b.add(helpers, surplus), _i32)])
        b.branch(work)

        b.position_at_end(work)
        b.call(self.work, [gen, task, closure, n])
        finished = fn.append_basic_block("finished")
        n32 = b.trunc(n, _i32)
        self._spin_then_futex(
            fn, b, self.done, lambda bb, cur: bb.icmp_unsigned("==", cur, n32),
            self.caller_sleeping, None, finished,
        )
        b.position_at_end(finished)
        b.ret_void()
        return fn

    def _launch_fn(self):
        """minitc_parallel_launch(task, closure, n): the public entry point."""
        fn, b = self._fn("minitc_parallel_launch", _void, [_ptr, _ptr, _i64], internal=False)
        task, closure, n = fn.args
        threads = b.load_atomic(self.num_threads, "monotonic", 8)
        inline = b.or_(b.icmp_signed("<=", n, _c(_i64, 1)), b.icmp_signed("<=", threads, _c(_i64, 1)))
        inline = b.or_(inline, b.icmp_signed(">", n, _c(_i64, MAX_POOLED_TASKS)))
        serial, try_lock = fn.append_basic_block("serial"), fn.append_basic_block("try_lock")
        b.cbranch(inline, serial, try_lock)
        b.position_at_end(serial)
        b.call(self.run_serial, [task, closure, n])
        b.ret_void()

        b.position_at_end(try_lock)
        got = b.extract_value(b.cmpxchg(self.lock, _c(_i32, 0), _c(_i32, 1), "acquire", "monotonic"), 1)
        pooled = fn.append_basic_block("pooled")
        b.cbranch(got, pooled, serial)  # busy: nested or concurrent launch, run inline
        b.position_at_end(pooled)
        b.call(self.run_pool, [task, closure, n, threads])
        b.store_atomic(_c(_i32, 0), self.lock, "release", 4)
        b.ret_void()

    def _accessor_fns(self):
        fn, b = self._fn("minitc_num_threads", _i64, [], internal=False)
        b.ret(b.load_atomic(self.num_threads, "monotonic", 8))
        fn, b = self._fn("minitc_rt_set_num_threads", _void, [_i64], internal=False)
        b.store_atomic(fn.args[0], self.num_threads, "monotonic", 8)
        b.ret_void()


# -- Python side ------------------------------------------------------------------------------

_build_lock = threading.Lock()
_rt = None  # _Runtime once built; never freed (worker threads execute its code)


class _Runtime:
    """The JIT-compiled runtime: its engine and ctypes handles to the accessors."""

    def __init__(self):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        tm = llvm.Target.from_triple(triple).create_target_machine(opt=2)
        module = _RuntimeIR(triple.split("-")[0]).mod
        module.triple = triple
        module.data_layout = str(tm.target_data)
        try:
            llmod = llvm.parse_assembly(str(module))
            llmod.verify()
        except RuntimeError as err:  # a bug in this file, not a user error
            raise BuildError(f"minitc parallel runtime IR is invalid: {err}") from err
        self.engine = llvm.create_mcjit_compiler(llmod, tm)
        self.engine.finalize_object()
        self.addresses = {
            name: self.engine.get_function_address(name)
            for name in ("minitc_parallel_launch", "minitc_num_threads", "minitc_rt_set_num_threads")
        }
        for name in ("minitc_parallel_launch", "minitc_num_threads"):
            llvm.add_symbol(name, self.addresses[name])
        self.get_threads = ctypes.CFUNCTYPE(ctypes.c_int64)(self.addresses["minitc_num_threads"])
        self.set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int64)(
            self.addresses["minitc_rt_set_num_threads"]
        )
        self.bench = None  # built on first launch_overhead_us()


def _check_count(n, source):
    """Validate a thread count, naming where it came from in the error."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ValueError(f"{source}: thread count must be an integer in [1, {MAX_THREADS}], got {n!r}")
    return n


def _default_num_threads():
    env = os.environ.get("MINITC_NUM_THREADS")
    if env is None:
        return min(len(os.sched_getaffinity(0)), MAX_THREADS)
    try:
        n = int(env.strip())
    except ValueError:
        raise ValueError(f"MINITC_NUM_THREADS={env!r} is not an integer") from None
    return _check_count(n, f"MINITC_NUM_THREADS={env!r}")


def ensure_runtime():
    """Build, JIT and register the parallel runtime once per process (idempotent, thread-safe).

    Afterwards any MCJIT module that declares ``minitc_parallel_launch`` or
    ``minitc_num_threads`` resolves them. The thread count starts at ``MINITC_NUM_THREADS``
    or, if unset, the number of CPUs this process may run on."""
    global _rt
    if _rt is not None:
        return
    with _build_lock:
        if _rt is not None:
            return
        threads = _default_num_threads()  # validate before building anything
        rt = _Runtime()
        rt.set_threads(threads)
        # Leak one reference on purpose: freeing the engine would unmap code that idle
        # worker threads are executing.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(rt))
        _rt = rt


def set_num_threads(n):
    """Set the pool size (calling thread included) used from the next launch on.

    Workers are created lazily on the next launch; surplus workers stay asleep."""
    _check_count(n, "set_num_threads")
    ensure_runtime()
    _rt.set_threads(n)


def get_num_threads():
    """The current pool size, calling thread included (>= 1)."""
    ensure_runtime()
    return _rt.get_threads()


def _counted_loop(b, count, body):
    """Emit ``for _ in range(count): body(b)`` at ``b``; ``b`` ends after the loop."""
    fn = b.function
    entry = b.block
    loop, exit_ = fn.append_basic_block("loop"), fn.append_basic_block("loop_exit")
    b.cbranch(b.icmp_signed(">", count, _c(_i64, 0)), loop, exit_)
    b.position_at_end(loop)
    i = b.phi(_i64)
    i.add_incoming(_c(_i64, 0), entry)
    body(b)
    i1 = b.add(i, _c(_i64, 1))
    i.add_incoming(i1, b.block)
    b.cbranch(b.icmp_signed("<", i1, count), loop, exit_)
    b.position_at_end(exit_)


def _bench_fn():
    """JIT ``bench(iters, num_tasks, delay)``: ``iters`` launches of a task that spins
    ``delay`` volatile loads (0: an empty task). Cached."""
    if _rt.bench is None:
        mod = ir.Module(name="minitc_runtime_bench")
        launch = ir.Function(mod, ir.FunctionType(_void, [_ptr, _ptr, _i64]), "minitc_parallel_launch")
        sink = ir.GlobalVariable(mod, _i64, "bench_sink")
        sink.initializer = _c(_i64, 0)
        task = ir.Function(mod, _TASK_TY, "bench_task")
        delay = task.args[0]  # the closure pointer carries the delay as an integer
        b = ir.IRBuilder(task.append_basic_block())
        # An atomic load is never deleted, so the loop really spins ``delay`` times.
        _counted_loop(b, b.ptrtoint(delay, _i64), lambda bb: bb.load_atomic(sink, "monotonic", 8))
        b.ret_void()
        bench = ir.Function(mod, ir.FunctionType(_void, [_i64, _i64, _i64]), "bench")
        iters, ntasks, delay = bench.args
        b = ir.IRBuilder(bench.append_basic_block())
        closure = b.inttoptr(delay, _ptr)
        _counted_loop(b, iters, lambda bb: bb.call(launch, [bb.bitcast(task, _ptr), closure, ntasks]))
        b.ret_void()
        mod.triple = llvm.get_process_triple()
        tm = llvm.Target.from_triple(mod.triple).create_target_machine(opt=2)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), tm)
        engine.finalize_object()
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
            engine.get_function_address("bench")
        )
        _rt.bench = (engine, fn)
    return _rt.bench[1]


def launch_overhead_us(repeats=51, launches=200, num_tasks=None, task_spin=0):
    """Median wall time in microseconds of one ``minitc_parallel_launch``, measured from JIT
    code: each of ``repeats`` samples times ``launches`` back-to-back launches and divides.

    ``num_tasks`` defaults to one task per thread. With ``task_spin == 0`` the tasks are
    empty; the launching thread may then finish them all before a worker even wakes. With
    ``task_spin > 0`` each task spins that many atomic loads and the time of one such task run
    inline is subtracted (EPCC syncbench style), which measures the full fork/join round trip.
    """
    ensure_runtime()
    bench = _bench_fn()
    ntasks = get_num_threads() if num_tasks is None else num_tasks

    def median_us(n):
        bench(launches, n, task_spin)  # warm up: create workers, fault in code
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            bench(launches, n, task_spin)
            samples.append((time.perf_counter_ns() - t0) / launches / 1000.0)
        return statistics.median(samples)

    overhead = median_us(ntasks)
    if task_spin > 0:
        overhead -= median_us(1)  # one task inline: the ideal parallel time
    return overhead
