"""The parallel runtime's persistent thread pool, generated as LLVM IR with ``llvmlite.ir``.

``thread_pool_module(arch)`` builds it; ``runtime.py`` JIT-compiles it once per process with
MCJIT and registers its entry points with ``llvmlite.binding.add_symbol`` so that MCJIT kernel
modules which merely *declare* them link against it. No C extension, no Python in the hot path.

ABI (kernel modules declare these)::

    declare void @minitc_parallel_launch(ptr %task, ptr %closure, i64 %num_tasks)
        ; task: void (ptr closure, i64 task_id, i64 num_tasks), run once per task_id in
        ; [0, num_tasks); the caller takes part and returns when every task has finished.
    declare i64 @minitc_num_threads()   ; pool size, calling thread included (>= 1)
    declare ptr @minitc_workspace_alloc(i64), void @minitc_workspace_free(ptr)
        ; kernels' heap buffers, kept from call to call (workspace_ir.py)

Protocol (each global sits on its own 64-byte line, so hot words do not false-share):

* ``claim`` packs ``generation << 32 | next_task``. Threads claim tasks with a ``cmpxchg`` on
  the whole word. To publish a job the launcher first *closes* the word (next_task all ones),
  then writes ``task``/``closure``/``num_tasks`` and ``done = 0``, then opens it at
  ``(generation + 1) << 32``. A worker reads the job fields only after reading an *open*
  word, and then claims with that word's generation: fields it read are that job's or a newer
  one's, and a newer job has already moved the generation on, so its cmpxchg fails. A worker
  can never run a task with another job's fields. (A closed word already carries the new
  generation: a worker that took the fields after a closed word could read the previous job's
  task and closure, then claim a task of the new job with them once it opened. That ran the
  last kernel's task on a dead stack frame, issue 55; the worker now waits for the open word.)
* The launcher then bumps the futex word ``wake`` and calls ``FUTEX_WAKE`` only when some
  worker is asleep (``sleepers > 0``). Workers spin on ``wake`` for SPIN_ITERS ``pause``
  iterations, then sleep in ``FUTEX_WAIT``, so an idle pool burns no CPU.
* Each finished task increments ``done``. The launcher runs tasks too, then spins, then
  futex-waits until ``done == num_tasks``; the last increment wakes it if it is asleep.
  Every "announce sleep, re-check" / "publish, check sleepers" pair is seq_cst, so either
  the sleeper sees the update or the waker sees the sleeper: no lost wake-ups.
* Launches are serialised by a try-lock. A launch that finds the pool busy runs its tasks
  inline and serially on the calling thread: that makes a nested launch (from inside a task)
  safe, and it is also what a second Python thread launching concurrently gets.
* ``num_tasks == 1``, a one-thread pool and more than MAX_POOLED_TASKS tasks run inline too.

Known limit: a launch that has to wake a sleeping worker may see Linux place it on the
launcher's own (busy) CPU; that launch then runs mostly serially. Workers that are still
spinning (launches less than ~150 us apart, see ``runtime.set_spin_iterations``) avoid it.
"""

import llvmlite.ir as ir

from minitc.backends.llvm import workspace_ir

MAX_THREADS = 256
MAX_POOLED_TASKS = 2**31 - 1  # task index must fit the low half of ``claim`` and i32 ``done``
# Spin length before sleeping on a futex. One pause is ~37 ns on Zen 2 (similar on recent
# Intel), so 4096 is ~150 us: long enough to catch back-to-back launches from Python, short
# enough that an idle pool goes quiet almost at once.
SPIN_ITERS = 4096
SYMBOLS = ("minitc_parallel_launch", "minitc_num_threads") + workspace_ir.SYMBOLS  # the ABI kernel modules declare

# thread_pool_module(force_interleaving=True), for tests: the launcher and one worker meet at
# three points so that the worker reads the claim word while a job is being published (the
# interleaving of issue 55); each wait gives up after this many pauses (~50-300 ms: a loaded
# machine may not run the worker for a while), so a worker that misses a point only slows it
RENDEZVOUS_PAUSES = 2_000_000

_LOW32 = 0xFFFFFFFF  # generation range, and the "job closed" task index
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}
SUPPORTED_ARCHS = tuple(_SYS_FUTEX)  # Linux only
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_SIG_BLOCK = 0
# Workers block every signal but the ones a fault raises in the faulting thread (SIGILL,
# SIGABRT, SIGBUS, SIGFPE, SIGSEGV: 4, 6, 7, 8, 11 on x86_64 and aarch64 Linux; bit n - 1 of the
# set). Blocking those too made Linux kill the process without running any handler when a
# worker faulted: faulthandler and fault_ir.py's report printed nothing (issue 55).
_FAULT_SIGNALS = (4, 6, 7, 8, 11)
_BLOCKED_LOW = -1 & ~sum(1 << (n - 1) for n in _FAULT_SIGNALS)

_i32, _i64 = ir.IntType(32), ir.IntType(64)
_ptr = ir.IntType(8).as_pointer()  # prints as "i8*" or "ptr"; LLVM 22 reads both as ptr
_i32p = _i32.as_pointer()  # futex words
_void = ir.VoidType()
_TASK_TY = ir.FunctionType(_void, [_ptr, _i64, _i64])


def _c(ty, value):
    return ir.Constant(ty, value)


def _counted_loop(b, count, body):
    """Emit ``for i in range(count): body(b, i)`` at ``b``; ``b`` ends after the loop."""
    entry = b.block
    loop, exit_ = b.function.append_basic_block("loop"), b.function.append_basic_block("loop_end")
    b.cbranch(b.icmp_signed(">", count, _c(_i64, 0)), loop, exit_)
    b.position_at_end(loop)
    i = b.phi(_i64)
    i.add_incoming(_c(_i64, 0), entry)
    body(b, i)
    i1 = b.add(i, _c(_i64, 1))
    i.add_incoming(i1, b.block)
    b.cbranch(b.icmp_signed("<", i1, count), loop, exit_)
    b.position_at_end(exit_)


def _call_task(b, task, closure, t, n):
    b.call(b.bitcast(task, _TASK_TY.as_pointer()), [closure, t, n])


class _RuntimeIR:
    """Builds the runtime module: one method per generated function."""

    def __init__(self, arch, force_interleaving=False):
        self.force_interleaving = force_interleaving
        self.is_x86 = arch == "x86_64"
        self.sys_futex = _SYS_FUTEX[arch]
        self.mod = ir.Module(name="minitc_runtime")
        self._globals()
        m = self.mod
        self.syscall = ir.Function(m, ir.FunctionType(_i64, [_i64], var_arg=True), "syscall")
        self.pthread_create = ir.Function(m, ir.FunctionType(_i32, [_ptr] * 4), "pthread_create")
        self.pthread_sigmask = ir.Function(m, ir.FunctionType(_i32, [_i32, _ptr, _ptr]), "pthread_sigmask")
        self.sched_setaffinity = ir.Function(m, ir.FunctionType(_i32, [_i32, _i64, _ptr]), "sched_setaffinity")
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
        workspace_ir.add_workspace(self.mod, self.pause)

    def _globals(self):
        def g(name, ty, init):
            gv = ir.GlobalVariable(self.mod, ty, name=f"minitc_rt_{name}")
            gv.initializer, gv.linkage, gv.align = _c(ty, init), "internal", 64
            return gv

        self.lock = g("lock", _i32, 0)  # launch try-lock
        self.wake = g("wake", _i32, 0)  # futex word workers sleep on, bumped per job
        self.sleepers = g("sleepers", _i32, 0)  # workers in (or entering) FUTEX_WAIT
        self.claim = g("claim", _i64, 0)  # generation << 32 | next task index
        self.task = g("task", _ptr, None)
        self.closure = g("closure", _ptr, None)
        self.ntasks = g("ntasks", _i64, 0)
        self.job_workers = g("job_workers", _i64, 0)  # workers with a smaller id may help
        self.done = g("done", _i32, 0)  # finished tasks of the current job (futex word)
        self.caller_sleeping = g("caller_sleeping", _i32, 0)
        self.num_threads = g("num_threads", _i64, 1)  # requested pool size
        self.spin_iters = g("spin_iters", _i64, SPIN_ITERS)  # pauses before a futex sleep
        self.num_workers = g("num_workers", _i64, 0)  # worker threads created so far
        self.tids = g("tids", ir.ArrayType(_i64, MAX_THREADS), None)
        self.sigset = g("sigset", ir.ArrayType(_i64, 16), [_BLOCKED_LOW] + [-1] * 15)  # a sigset_t
        # CPU for worker k (0-based) when pinning: cpus[k % ncpus]; ncpus = 0 disables pinning
        self.cpus = g("cpus", ir.ArrayType(_i32, MAX_THREADS), None)
        self.ncpus = g("ncpus", _i64, 0)
        if self.force_interleaving:
            self.probe = g("probe", _i32, 0)  # the handshake of _rendezvous

    def _fn(self, name, ret, args, internal=True):
        fn = ir.Function(self.mod, ir.FunctionType(ret, args), name=name)
        if internal:
            fn.linkage = "internal"
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    # -- helpers --------------------------------------------------------------------------

    def _futex_fn(self, name, op):
        fn, b = self._fn(name, _void, [_i32p, _i32])
        addr, val = fn.args
        args = [_c(_i64, self.sys_futex), addr, _c(_i64, op), b.zext(val, _i64), _c(_ptr, None)]
        b.call(self.syscall, args)  # EINTR/EAGAIN are fine: every caller re-checks in a loop
        b.ret_void()
        return fn

    def _pause_fn(self):
        fn, b = self._fn("rt_pause", _void, [])
        if self.is_x86:  # tells the core we are spinning: saves power, frees the SMT sibling
            b.call(ir.Function(self.mod, ir.FunctionType(_void, []), "llvm.x86.sse2.pause"), [])
        b.ret_void()
        return fn

    def _run_serial_fn(self):
        """rt_run_serial(task, closure, n): task(closure, t, n) for t in [0, n) in order."""
        fn, b = self._fn("rt_run_serial", _void, [_ptr, _ptr, _i64])
        task, closure, n = fn.args
        _counted_loop(b, n, lambda b, t: _call_task(b, task, closure, t, n))
        b.ret_void()
        return fn

    def _spin_then_futex(self, b, word, is_ready, sleep_count, ready_bb, spin_iters):
        """Wait until ``is_ready(b, *word)``, then branch to ``ready_bb``: spin ``spin_iters``
        pauses; then count ourselves in ``sleep_count`` and FUTEX_WAIT on ``word``."""
        fn, entry = b.function, b.block
        spin, more, sleep, wait, woke = (
            fn.append_basic_block(k) for k in ("spin", "spin_more", "sleep", "futex_wait", "woke")
        )
        b.branch(spin)
        b.position_at_end(spin)
        i = b.phi(_i64)
        i.add_incoming(_c(_i64, 0), entry)
        i.add_incoming(_c(_i64, 0), woke)
        b.cbranch(is_ready(b, b.load_atomic(word, "acquire", 4)), ready_bb, more)
        b.position_at_end(more)
        b.call(self.pause, [])
        i1 = b.add(i, _c(_i64, 1))
        i.add_incoming(i1, more)
        b.cbranch(b.icmp_unsigned("<", i1, spin_iters), spin, sleep)
        b.position_at_end(sleep)
        b.atomic_rmw("add", sleep_count, _c(_i32, 1), "seq_cst")
        cur = b.load_atomic(word, "seq_cst", 4)  # re-check after announcing ourselves
        b.cbranch(is_ready(b, cur), woke, wait)
        b.position_at_end(wait)
        b.call(self.futex_wait, [word, cur])  # returns at once if *word != cur
        b.branch(woke)
        b.position_at_end(woke)
        b.atomic_rmw("sub", sleep_count, _c(_i32, 1), "seq_cst")
        b.branch(spin)

    def _rendezvous(self, b, point):
        """With force_interleaving (tests only), the handshake at `point`: "claim" (worker,
        before reading the claim word) waits until a job is being published; "fields" (worker,
        after reading the job's fields) tells the launcher, then waits until the job is open;
        "skip" (worker, not helping with the word it read) tells the launcher; "publish"
        (launcher, after closing the claim word) waits to be told."""
        if not self.force_interleaving:
            return
        closed = lambda b: b.icmp_unsigned("==", self._claim_index(b), _c(_i64, _LOW32))  # noqa: E731
        if point == "claim":
            self._wait_until(b, closed)
        elif point in ("fields", "skip"):
            b.store_atomic(_c(_i32, 1), self.probe, "seq_cst", 4)
            if point == "fields":
                self._wait_until(b, lambda b: b.not_(closed(b)))
        else:
            self._wait_until(b, lambda b: b.icmp_unsigned("!=", b.load_atomic(self.probe, "seq_cst", 4), _c(_i32, 0)))
            b.store_atomic(_c(_i32, 0), self.probe, "seq_cst", 4)

    def _claim_index(self, b):
        return b.and_(b.load_atomic(self.claim, "seq_cst", 8), _c(_i64, _LOW32))

    def _wait_until(self, b, condition):
        """Pause until `condition(b)` holds or RENDEZVOUS_PAUSES pauses have passed."""
        fn, entry = b.function, b.block
        loop, again, done = (fn.append_basic_block(k) for k in ("rendezvous", "rendezvous_pause", "rendezvous_done"))
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(_i64)
        i.add_incoming(_c(_i64, 0), entry)
        b.cbranch(condition(b), done, again)
        b.position_at_end(again)
        b.call(self.pause, [])
        i1 = b.add(i, _c(_i64, 1))
        i.add_incoming(i1, again)
        b.cbranch(b.icmp_unsigned("<", i1, _c(_i64, RENDEZVOUS_PAUSES)), loop, done)
        b.position_at_end(done)

    # -- the pool -------------------------------------------------------------------------

    def _work_fn(self):
        """rt_work(gen, task, closure, n): claim and run tasks of job ``gen`` until none left."""
        fn, b = self._fn("rt_work", _void, [_i64, _ptr, _ptr, _i64])
        gen, task, closure, n = fn.args
        head, check, try_, run, notify, wake, exit_ = (
            fn.append_basic_block(k) for k in ("head", "check", "try", "run", "notify", "wake", "exit")
        )
        b.branch(head)
        b.position_at_end(head)
        first = b.load_atomic(self.claim, "seq_cst", 8)
        b.branch(check)

        b.position_at_end(check)
        w = b.phi(_i64)
        w.add_incoming(first, head)
        idx = b.and_(w, _c(_i64, _LOW32))
        same_job = b.icmp_unsigned("==", b.lshr(w, _c(_i64, 32)), gen)
        b.cbranch(b.and_(same_job, b.icmp_unsigned("<", idx, n)), try_, exit_)

        b.position_at_end(try_)
        res = b.cmpxchg(self.claim, w, b.add(w, _c(_i64, 1)), "seq_cst", "seq_cst")
        w.add_incoming(b.extract_value(res, 0), try_)
        b.cbranch(b.extract_value(res, 1), run, check)

        b.position_at_end(run)
        _call_task(b, task, closure, idx, n)
        finished = b.add(b.atomic_rmw("add", self.done, _c(_i32, 1), "seq_cst"), _c(_i32, 1))
        b.cbranch(b.icmp_unsigned("==", finished, b.trunc(n, _i32)), notify, head)

        b.position_at_end(notify)  # we finished the job's last task
        asleep = b.load_atomic(self.caller_sleeping, "seq_cst", 4)
        b.cbranch(b.icmp_unsigned("!=", asleep, _c(_i32, 0)), wake, exit_)
        b.position_at_end(wake)
        b.call(self.futex_wake, [self.done, _c(_i32, 1)])
        b.branch(exit_)
        b.position_at_end(exit_)
        b.ret_void()
        return fn

    def _worker_fn(self):
        """rt_worker(id): thread body. Help with the current job, then wait for the next."""
        fn, b = self._fn("rt_worker", _ptr, [_ptr])
        wid = b.ptrtoint(fn.args[0], _i64)
        # Signals belong to the Python main thread, not to pool threads (but for their faults).
        b.call(self.pthread_sigmask, [_c(_i32, _SIG_BLOCK), b.bitcast(self.sigset, _ptr), _c(_ptr, None)])
        self._pin(fn, b, wid)
        seen0 = b.load_atomic(self.wake, "seq_cst", 4)
        entry = b.block
        work, help_, wait, ready = (fn.append_basic_block(k) for k in ("work", "help", "wait", "ready"))
        b.branch(work)  # a new worker first helps with whatever job is running

        b.position_at_end(work)
        seen = b.phi(_i32)
        seen.add_incoming(seen0, entry)
        self._rendezvous(b, "claim")
        word = b.load_atomic(self.claim, "seq_cst", 8)
        allowed = b.icmp_unsigned("<", wid, b.load_atomic(self.job_workers, "seq_cst", 8))
        # A closed word is a job being published: its fields may still be the last job's. Wait
        # for the wake-up that follows the opening (the module docstring's protocol).
        is_open = b.icmp_unsigned("!=", b.and_(word, _c(_i64, _LOW32)), _c(_i64, _LOW32))
        if self.force_interleaving:
            skip = fn.append_basic_block("skip")
            b.cbranch(b.and_(allowed, is_open), help_, skip)
            b.position_at_end(skip)
            self._rendezvous(b, "skip")
            b.branch(wait)
        else:
            b.cbranch(b.and_(allowed, is_open), help_, wait)
        b.position_at_end(help_)
        # These reads may belong to a newer job than ``word``: rt_work's cmpxchg rejects that.
        fields = [b.load_atomic(gv, "seq_cst", 8) for gv in (self.task, self.closure, self.ntasks)]
        self._rendezvous(b, "fields")
        b.call(self.work, [b.lshr(word, _c(_i64, 32)), *fields])
        b.branch(wait)

        b.position_at_end(wait)
        # A surplus worker (the pool was shrunk) goes straight to sleep instead of spinning.
        spin_iters = b.select(allowed, b.load_atomic(self.spin_iters, "monotonic", 8), _c(_i64, 0))
        changed = lambda b, cur: b.icmp_unsigned("!=", cur, seen)  # noqa: E731
        self._spin_then_futex(b, self.wake, changed, self.sleepers, ready, spin_iters)
        b.position_at_end(ready)
        seen.add_incoming(b.load_atomic(self.wake, "seq_cst", 4), ready)
        b.branch(work)
        return fn

    def _pin(self, fn, b, wid):
        """Pin worker `wid` to its own CPU. Without it, Linux often wakes a sleeping worker on
        the launching thread's CPU, and the whole launch then runs serially."""
        ncpus = b.load(self.ncpus)
        pin, go = fn.append_basic_block("pin"), fn.append_basic_block("pinned")
        b.cbranch(b.icmp_signed(">", ncpus, _c(_i64, 0)), pin, go)
        b.position_at_end(pin)
        cpu = b.zext(b.load(b.gep(self.cpus, [_c(_i32, 0), b.urem(wid, ncpus)])), _i64)
        mask = b.alloca(ir.ArrayType(_i64, 16))  # a cpu_set_t of 1024 CPUs
        b.store(ir.Constant(ir.ArrayType(_i64, 16), [0] * 16), mask)
        word = b.gep(mask, [_c(_i32, 0), b.lshr(cpu, _c(_i64, 6))])
        b.store(b.shl(_c(_i64, 1), b.and_(cpu, _c(_i64, 63))), word)
        b.call(self.sched_setaffinity, [_c(_i32, 0), _c(_i64, 128), b.bitcast(mask, _ptr)])
        b.branch(go)
        b.position_at_end(go)

    def _spawn_fn(self):
        """rt_spawn(want) -> usable workers (<= want), creating missing ones. Lock held."""
        fn, b = self._fn("rt_spawn", _i64, [_i64])
        (want,) = fn.args
        head, create, ok, exit_ = (fn.append_basic_block(k) for k in ("head", "create", "ok", "exit"))
        b.branch(head)
        b.position_at_end(head)
        k = b.load(self.num_workers)  # only touched under the launch lock
        b.cbranch(b.icmp_signed("<", k, want), create, exit_)
        b.position_at_end(create)
        slot = b.bitcast(b.gep(self.tids, [_c(_i32, 0), k]), _ptr)
        worker = b.bitcast(self.worker, _ptr)
        rc = b.call(self.pthread_create, [slot, _c(_ptr, None), worker, b.inttoptr(k, _ptr)])
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
        capped = b.select(b.icmp_signed("<", threads, _c(_i64, MAX_THREADS)), threads, _c(_i64, MAX_THREADS))
        avail = b.call(self.spawn, [b.sub(capped, _c(_i64, 1))])
        serial, publish, wake, work, finished = (
            fn.append_basic_block(k) for k in ("serial", "publish", "wake", "work", "finished")
        )
        b.cbranch(b.icmp_signed("<=", avail, _c(_i64, 0)), serial, publish)
        b.position_at_end(serial)
        b.call(self.run_serial, [task, closure, n])
        b.ret_void()

        b.position_at_end(publish)
        gen = b.and_(b.add(b.lshr(b.load(self.claim), _c(_i64, 32)), _c(_i64, 1)), _c(_i64, _LOW32))
        opened = b.shl(gen, _c(_i64, 32))
        b.store_atomic(b.or_(opened, _c(_i64, _LOW32)), self.claim, "seq_cst", 8)  # closed
        self._rendezvous(b, "publish")
        job = {self.task: task, self.closure: closure, self.ntasks: n, self.job_workers: avail}
        for gv, val in job.items():
            b.store_atomic(val, gv, "seq_cst", 8)
        b.store_atomic(_c(_i32, 0), self.done, "seq_cst", 4)
        b.store_atomic(opened, self.claim, "seq_cst", 8)  # next task 0: the job is live
        b.atomic_rmw("add", self.wake, _c(_i32, 1), "seq_cst")
        sleeping = b.load_atomic(self.sleepers, "seq_cst", 4)
        b.cbranch(b.icmp_unsigned("!=", sleeping, _c(_i32, 0)), wake, work)
        b.position_at_end(wake)
        helpers = b.sub(n, _c(_i64, 1))  # no point waking more workers than spare tasks
        helpers = b.select(b.icmp_signed("<", helpers, avail), helpers, avail)
        # FUTEX_WAKE picks sleepers arbitrarily and some may be surplus workers (the pool was
        # shrunk): wake that many more so that ``helpers`` usable ones are among them.
        surplus = b.sub(b.load(self.num_workers), avail)
        b.call(self.futex_wake, [self.wake, b.trunc(b.add(helpers, surplus), _i32)])
        b.branch(work)

        b.position_at_end(work)
        b.call(self.work, [gen, task, closure, n])
        n32 = b.trunc(n, _i32)
        all_done = lambda b, cur: b.icmp_unsigned("==", cur, n32)  # noqa: E731
        spin_iters = b.load_atomic(self.spin_iters, "monotonic", 8)
        self._spin_then_futex(b, self.done, all_done, self.caller_sleeping, finished, spin_iters)
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
        serial, try_lock, pooled = (fn.append_basic_block(k) for k in ("serial", "try_lock", "pooled"))
        b.cbranch(inline, serial, try_lock)
        b.position_at_end(serial)
        b.call(self.run_serial, [task, closure, n])
        b.ret_void()

        b.position_at_end(try_lock)
        res = b.cmpxchg(self.lock, _c(_i32, 0), _c(_i32, 1), "acquire", "monotonic")
        b.cbranch(b.extract_value(res, 1), pooled, serial)  # busy: nested or concurrent launch
        b.position_at_end(pooled)
        b.call(self.run_pool, [task, closure, n, threads])
        b.store_atomic(_c(_i32, 0), self.lock, "release", 4)
        b.ret_void()

    def _accessor_fns(self):
        fn, b = self._fn("minitc_num_threads", _i64, [], internal=False)
        b.ret(b.load_atomic(self.num_threads, "monotonic", 8))
        for name, gv in (
            ("set_num_threads", self.num_threads),
            ("set_spin", self.spin_iters),
            ("set_ncpus", self.ncpus),
        ):
            fn, b = self._fn(f"minitc_rt_{name}", _void, [_i64], internal=False)
            b.store_atomic(fn.args[0], gv, "monotonic", 8)
            b.ret_void()
        fn, b = self._fn("minitc_rt_set_cpu", _void, [_i64, _i64], internal=False)
        b.store(b.trunc(fn.args[1], _i32), b.gep(self.cpus, [_c(_i32, 0), fn.args[0]]))
        b.ret_void()


def thread_pool_module(arch, force_interleaving=False):
    """The runtime ``ir.Module`` for ``arch`` (one of SUPPORTED_ARCHS): the pool, ABI functions
    and the ``minitc_rt_set_*`` setters the Python side calls through ctypes.
    ``force_interleaving`` (tests only) makes a worker meet the launcher at the points of
    ``_RuntimeIR._rendezvous``: the worker then reads every job while it is being published."""
    return _RuntimeIR(arch, force_interleaving).mod


def bench_module():
    """An ``ir.Module`` with ``bench(iters, num_tasks, spin)``: ``iters`` launches of a task that
    does ``spin`` atomic loads (0: an empty task). It declares the launch entry point only."""
    mod = ir.Module(name="minitc_runtime_bench")
    launch = ir.Function(mod, ir.FunctionType(_void, [_ptr, _ptr, _i64]), SYMBOLS[0])
    sink = ir.GlobalVariable(mod, _i64, "bench_sink")
    sink.initializer = _c(_i64, 0)
    task = ir.Function(mod, _TASK_TY, "bench_task")
    b = ir.IRBuilder(task.append_basic_block())
    spin = b.ptrtoint(task.args[0], _i64)  # the closure pointer carries ``spin``
    _counted_loop(b, spin, lambda b, i: b.load_atomic(sink, "monotonic", 8))
    b.ret_void()
    bench = ir.Function(mod, ir.FunctionType(_void, [_i64] * 3), "bench")
    iters, ntasks, spin = bench.args
    b = ir.IRBuilder(bench.append_basic_block())
    args = [b.bitcast(task, _ptr), b.inttoptr(spin, _ptr), ntasks]
    _counted_loop(b, iters, lambda b, i: b.call(launch, args))
    b.ret_void()
    return mod
