"""Tests of the LLVM-IR thread pool (backends/llvm/thread_pool_ir.py, run by runtime.py).

Kernels are written with llvmlite.ir here, JIT-compiled with MCJIT, and only *declare*
``minitc_parallel_launch`` / ``minitc_num_threads``: that exercises the add_symbol linking the
code generator relies on. Correctness only; no timing assertions.
"""

import ctypes
import os
import subprocess
import sys
import threading
import time

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from minitc.backends.llvm import runtime

i64, f64 = ir.IntType(64), ir.DoubleType()
ptr = ir.IntType(8).as_pointer()
TASK = ir.FunctionType(ir.VoidType(), [ptr, i64, i64])
INNER = 5  # tasks per nested launch
PAIR_SPIN_LIMIT = 2_000_000_000  # bounded wait in pair_task (seconds, not forever)


def c64(v):
    return ir.Constant(i64, v)


def slot(b, base, index):
    """Pointer to ``((i64*)base)[index]``."""
    return b.gep(b.bitcast(base, i64.as_pointer()), [index])


def define(mod, name, fnty):
    fn = ir.Function(mod, fnty, name)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def build_kernels():
    """Test kernels. Closures are i64 arrays passed as numpy pointers."""
    mod = ir.Module(name="test_runtime_kernels")
    launch = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, i64]), "minitc_parallel_launch")
    nthreads = ir.Function(mod, ir.FunctionType(i64, []), "minitc_num_threads")

    # count_task: base[t] += 1 (atomically, so duplicates show), base[n + t] = n.
    count, b = define(mod, "count_task", TASK)
    base, t, n = count.args
    b.atomic_rmw("add", slot(b, base, t), c64(1), "seq_cst")
    b.store(n, slot(b, base, b.add(n, t)))
    b.ret_void()

    # nested_task: launch INNER count_tasks on base + t * 2 * INNER from inside a task.
    nested, b = define(mod, "nested_task", TASK)
    base, t, n = nested.args
    inner = b.bitcast(slot(b, base, b.mul(t, c64(2 * INNER))), ptr)
    b.call(launch, [b.bitcast(count, ptr), inner, c64(INNER)])
    b.ret_void()

    # sum_task: closure = [x_ptr, length, out_ptr]; out[t] = sum of chunk t of x (float64).
    sum_task, b = define(mod, "sum_task", TASK)
    base, t, n = sum_task.args
    x = b.inttoptr(b.load(slot(b, base, c64(0))), f64.as_pointer())
    length = b.load(slot(b, base, c64(1)))
    out = b.inttoptr(b.load(slot(b, base, c64(2))), f64.as_pointer())
    chunk = b.sdiv(b.add(length, b.sub(n, c64(1))), n)
    lo = b.mul(t, chunk)
    hi = b.add(lo, chunk)
    hi = b.select(b.icmp_signed("<", hi, length), hi, length)
    entry, loop, done = b.block, sum_task.append_basic_block("loop"), sum_task.append_basic_block("done")
    b.cbranch(b.icmp_signed("<", lo, hi), loop, done)
    b.position_at_end(loop)
    i, acc = b.phi(i64), b.phi(f64)
    i.add_incoming(lo, entry)
    acc.add_incoming(ir.Constant(f64, 0.0), entry)
    acc1 = b.fadd(acc, b.load(b.gep(x, [i])))
    i_next = b.add(i, c64(1))
    i.add_incoming(i_next, loop)
    acc.add_incoming(acc1, loop)
    b.cbranch(b.icmp_signed("<", i_next, hi), loop, done)
    b.position_at_end(done)
    total = b.phi(f64)
    total.add_incoming(ir.Constant(f64, 0.0), entry)
    total.add_incoming(acc1, loop)
    b.store(total, b.gep(out, [t]))
    b.ret_void()

    # pair_task: task 1 sets base[0]; task 0 waits (bounded) for it and stores what it saw
    # in base[1]. Only two threads running at once can make base[1] == 1.
    pair, b = define(mod, "pair_task", TASK)
    base, t, n = pair.args
    flag = slot(b, base, c64(0))
    setter, waiter, spin, exit_ = (pair.append_basic_block(k) for k in ("set", "wait", "spin", "exit"))
    sw = b.switch(t, exit_)
    sw.add_case(c64(1), setter)
    sw.add_case(c64(0), waiter)
    b.position_at_end(setter)
    b.store_atomic(c64(1), flag, "seq_cst", 8)
    b.branch(exit_)
    b.position_at_end(waiter)
    b.branch(spin)
    b.position_at_end(spin)
    k = b.phi(i64)
    k.add_incoming(c64(0), waiter)
    seen = b.load_atomic(flag, "seq_cst", 8)
    k1 = b.add(k, c64(1))
    k.add_incoming(k1, spin)
    stop = b.or_(b.icmp_signed("!=", seen, c64(0)), b.icmp_signed(">=", k1, c64(PAIR_SPIN_LIMIT)))
    record = pair.append_basic_block("record")
    b.cbranch(stop, record, spin)
    b.position_at_end(record)
    b.store(seen, slot(b, base, c64(1)))
    b.branch(exit_)
    b.position_at_end(exit_)
    b.ret_void()

    # run(task, closure, n, repeats): launch ``repeats`` times; threads(): the pool size.
    run, b = define(mod, "run", ir.FunctionType(ir.VoidType(), [ptr, ptr, i64, i64]))
    task, closure, n, repeats = run.args
    entry, loop, exit_ = b.block, run.append_basic_block("loop"), run.append_basic_block("exit")
    b.cbranch(b.icmp_signed(">", repeats, c64(0)), loop, exit_)
    b.position_at_end(loop)
    r = b.phi(i64)
    r.add_incoming(c64(0), entry)
    b.call(launch, [task, closure, n])
    r1 = b.add(r, c64(1))
    r.add_incoming(r1, loop)
    b.cbranch(b.icmp_signed("<", r1, repeats), loop, exit_)
    b.position_at_end(exit_)
    b.ret_void()
    threads, b = define(mod, "threads", ir.FunctionType(i64, []))
    b.ret(b.call(nthreads, []))
    return mod


class Kernels:
    """The JIT-compiled test module and ctypes handles to it."""

    def __init__(self):
        runtime.ensure_runtime()  # registers the symbols the module declares
        mod = build_kernels()
        mod.triple = llvm.get_process_triple()
        tm = llvm.Target.from_triple(mod.triple).create_target_machine(opt=2)
        llmod = llvm.parse_assembly(str(mod))
        llmod.verify()
        self.engine = llvm.create_mcjit_compiler(llmod, tm)
        self.engine.finalize_object()
        addr = self.engine.get_function_address
        self.tasks = {k: addr(k) for k in ("count_task", "nested_task", "sum_task", "pair_task")}
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            addr("run")
        )
        self.threads = ctypes.CFUNCTYPE(ctypes.c_int64)(addr("threads"))

    def run(self, task, array, n, repeats=1):
        """Launch ``task`` on ``n`` tasks with the numpy ``array`` as closure (GIL released)."""
        self._run(self.tasks[task], array.ctypes.data, n, repeats)


@pytest.fixture(scope="module")
def kernels():
    return Kernels()


@pytest.fixture
def threads(request):
    """Run the test at a given pool size, restoring the previous one afterwards."""
    before = runtime.get_num_threads()
    runtime.set_num_threads(request.param)
    yield request.param
    runtime.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000])
def test_every_task_runs_once(kernels, threads, n):
    buf = np.zeros(2 * n, dtype=np.int64)
    kernels.run("count_task", buf, n)
    assert (buf[:n] == 1).all()
    assert (buf[n:] == n).all()  # every task saw num_tasks


def test_zero_tasks_is_a_no_op(kernels):
    buf = np.zeros(4, dtype=np.int64)
    kernels.run("count_task", buf, 0)
    assert (buf == 0).all()


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_repeated_launches(kernels, threads):
    n, repeats = 5, 2000
    buf = np.zeros(2 * n, dtype=np.int64)
    kernels.run("count_task", buf, n, repeats)
    assert (buf[:n] == repeats).all()


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
def test_nested_launch_runs_inline(kernels, threads):
    n = 7
    buf = np.zeros(n * 2 * INNER, dtype=np.int64).reshape(n, 2, INNER)
    kernels.run("nested_task", buf, n, repeats=3)
    assert (buf[:, 0, :] == 3).all()
    assert (buf[:, 1, :] == INNER).all()


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_tasks_run_concurrently(kernels, threads):
    # Task 0 blocks until task 1 has run, so this only passes if a worker takes task 1.
    buf = np.zeros(2, dtype=np.int64)
    kernels.run("pair_task", buf, 2)
    assert buf[1] == 1


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
@pytest.mark.parametrize("n", [1, 2, 13])
def test_parallel_sum(kernels, threads, n):
    x = np.arange(1_000_003, dtype=np.float64) % 1000  # integers: sums are exact
    out = np.zeros(n, dtype=np.float64)
    closure = np.array([x.ctypes.data, x.size, out.ctypes.data], dtype=np.int64)
    kernels.run("sum_task", closure, n)
    assert out.sum() == x.sum()


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_concurrent_launchers(kernels, threads):
    n, repeats = 9, 300
    bufs = [np.zeros(2 * n, dtype=np.int64) for _ in range(4)]
    workers = [threading.Thread(target=kernels.run, args=("count_task", buf, n, repeats)) for buf in bufs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for buf in bufs:
        assert (buf[:n] == repeats).all()
        assert (buf[n:] == n).all()


@pytest.mark.parametrize("threads", [2, 3], indirect=True)
def test_futex_paths(kernels, threads):
    # With no spinning every wait goes through FUTEX_WAIT/FUTEX_WAKE, for workers and launcher.
    runtime.set_spin_iterations(0)
    try:
        for n in (2, 3, 64):
            buf = np.zeros(2 * n, dtype=np.int64)
            kernels.run("count_task", buf, n, 300)
            assert (buf[:n] == 300).all()
        for _ in range(5):
            buf = np.zeros(2, dtype=np.int64)
            kernels.run("pair_task", buf, 2)  # the launcher waits until a worker wakes up
            assert buf[1] == 1
    finally:
        runtime.set_spin_iterations()
    with pytest.raises(ValueError, match="set_spin_iterations"):
        runtime.set_spin_iterations(-1)


def test_thread_count_api(kernels):
    before = runtime.get_num_threads()
    try:
        runtime.set_num_threads(3)
        assert runtime.get_num_threads() == kernels.threads() == 3
        buf = np.zeros(2 * 50, dtype=np.int64)
        kernels.run("count_task", buf, 50)
        runtime.set_num_threads(2)  # fewer threads than workers: surplus stay idle
        kernels.run("count_task", buf, 50)
        assert (buf[:50] == 2).all()
        for bad in (0, -1, 10_000, 2.0, "2", True, None):
            with pytest.raises(ValueError, match="thread count"):
                runtime.set_num_threads(bad)
        assert runtime.get_num_threads() == 2
    finally:
        runtime.set_num_threads(before)


def test_default_thread_count(monkeypatch):
    monkeypatch.delenv("MINITC_NUM_THREADS", raising=False)
    assert runtime._default_num_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("MINITC_NUM_THREADS", "3")
    assert runtime._default_num_threads() == 3
    for bad in ("zero", "0", "-2", ""):
        monkeypatch.setenv("MINITC_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="MINITC_NUM_THREADS"):
            runtime._default_num_threads()


def test_ensure_runtime_is_idempotent_and_thread_safe():
    callers = [threading.Thread(target=runtime.ensure_runtime) for _ in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    runtime.ensure_runtime()
    assert llvm.address_of_symbol("minitc_parallel_launch")
    assert llvm.address_of_symbol("minitc_num_threads")


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_launch_overhead_reports_a_number(threads):
    """Microseconds per launch: the wall time of an empty launch (more than nothing), and the
    fork/join round trip net of one task run inline (a difference, so about zero or more);
    either far below the 50 ms that only a pool waiting on timeouts would take."""
    empty = runtime.launch_overhead_us(repeats=3, launches=20, task_spin=0)
    spinning = runtime.launch_overhead_us(repeats=3, launches=20, task_spin=100)
    assert np.isfinite(empty) and 0 < empty < 50_000, empty
    assert np.isfinite(spinning) and -50 < spinning < 50_000, spinning


def _thread_states():
    """Scheduler state letter of every other thread of this process (Linux /proc)."""
    me = threading.get_native_id()
    states = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != me:
            with open(f"/proc/self/task/{tid}/stat") as f:
                states[tid] = f.read().rsplit(")", 1)[1].split()[0]
    return states


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize("threads", [2], indirect=True)
def test_idle_pool_sleeps(kernels, threads):
    kernels.run("count_task", np.zeros(8, dtype=np.int64), 4, repeats=10)
    # Workers spin ~150 us, then sleep in FUTEX_WAIT; allow a loaded machine plenty of time.
    deadline = time.monotonic() + 5.0
    while any(s == "R" for s in _thread_states().values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(s == "R" for s in _thread_states().values()), _thread_states()


LLJIT_SRC = """
declare i64 @minitc_num_threads()
define i64 @f() {
  %n = call i64 @minitc_num_threads()
  ret i64 %n
}
"""


def test_lljit_modules_import_the_symbols():
    # LLJIT does not search add_symbol's table: the symbols must be imported explicitly.
    builder = llvm.JITLibraryBuilder().add_ir(LLJIT_SRC).export_symbol("f")
    for name, address in runtime.runtime_symbols().items():
        builder.import_symbol(name, address)
    lib = builder.link(llvm.create_lljit_compiler(), "test_runtime_lljit")
    assert ctypes.CFUNCTYPE(ctypes.c_int64)(lib["f"])() == runtime.get_num_threads()


EXIT_SCRIPT = """
import sys
import numpy as np
sys.path[:0] = [{root!r}, {tests!r}]
from test_runtime import Kernels
from minitc.backends.llvm import runtime
runtime.set_num_threads(2)
buf = np.zeros(20, dtype=np.int64)
Kernels().run("count_task", buf, 10, 50)
assert (buf[:10] == 50).all()
print("done")
"""


def test_process_exits_with_live_workers():
    # Worker threads, spinning or asleep in FUTEX_WAIT, must not keep the process alive.
    tests = os.path.dirname(os.path.abspath(__file__))
    script = EXIT_SCRIPT.format(root=os.path.dirname(tests), tests=tests)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
