"""Parallel runtime for JIT-compiled CPU kernels: the Python side of a persistent thread pool.

The pool itself is LLVM IR built by ``thread_pool_ir.py``, whose docstring gives the ABI kernel
modules declare and the synchronisation protocol. This module JIT-compiles it once per process
with MCJIT, registers its entry points with ``llvmlite.binding.add_symbol`` (so that MCJIT kernel
modules which merely *declare* them link against it), sets the thread count, spin length and
worker pinning through the pool's exported setters, and measures launch overhead.
"""

import ctypes
import os
import statistics
import threading
import time

import llvmlite.binding as llvm

from minitc.backends.llvm.fault_ir import ACTION_BYTES, FAULT_SIGNALS, HANDLER, NOTE, OLD_ACTIONS, add_fault_report
from minitc.backends.llvm.thread_pool_ir import (
    MAX_THREADS,
    SPIN_ITERS,
    SUPPORTED_ARCHS,
    SYMBOLS,
    bench_module,
    thread_pool_module,
)
from minitc.errors import BuildError, ConfigError

_SA_SIGINFO, _SA_ONSTACK = 4, 0x08000000  # Linux's sigaction flags (x86_64 and aarch64)
_build_lock = threading.Lock()
_rt = None  # the _Runtime once built; never freed (worker threads execute its code)


def _jit(module):
    """MCJIT-compile an ``ir.Module`` for this process; returns the ExecutionEngine."""
    module.triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(module.triple).create_target_machine(opt=2)
    module.data_layout = str(tm.target_data)
    llmod = llvm.parse_assembly(str(module))
    llmod.verify()
    engine = llvm.create_mcjit_compiler(llmod, tm)
    engine.finalize_object()
    return engine


class _Runtime:
    """The JIT-compiled runtime: its engine, symbol addresses and ctypes accessors."""

    def __init__(self):
        llvm.initialize_native_target()  # llvm.initialize() raises in llvmlite >= 0.45
        llvm.initialize_native_asmprinter()
        arch, _, rest = llvm.get_process_triple().partition("-")
        if arch not in SUPPORTED_ARCHS or "linux" not in rest:
            raise BuildError(
                f"the minitc parallel runtime needs Linux on x86_64 or aarch64, "
                f"not {llvm.get_process_triple()}; use a serial schedule instead"
            )
        module = thread_pool_module(arch)
        add_fault_report(module)
        try:
            self.engine = _jit(module)
        except RuntimeError as err:  # a bug in this file, not a user error
            raise BuildError(f"minitc parallel runtime failed to compile: {err}") from err
        address = self.engine.get_function_address
        self.symbols = {name: address(name) for name in SYMBOLS}
        for name, addr in self.symbols.items():
            llvm.add_symbol(name, addr)
        self.get_threads = ctypes.CFUNCTYPE(ctypes.c_int64)(self.symbols["minitc_num_threads"])
        setter = ctypes.CFUNCTYPE(None, ctypes.c_int64)
        self.set_threads = setter(address("minitc_rt_set_num_threads"))
        self.set_spin = setter(address("minitc_rt_set_spin"))
        self.release_workspace = ctypes.CFUNCTYPE(None)(address("minitc_workspace_release"))
        self._pin_workers(address)
        self.note = ctypes.c_void_p.from_address(self.engine.get_global_value_address(NOTE))
        self._install_fault_report(address(HANDLER))
        self.bench = None  # built by the first launch_overhead_us()

    def _install_fault_report(self, handler: int) -> None:
        """fault_ir.py's handler for FAULT_SIGNALS, ahead of the actions it replaces (kept in
        the module for the handler to put back); MINITC_FAULT_REPORT=0 leaves them alone."""
        if os.environ.get("MINITC_FAULT_REPORT", "1") == "0":
            return
        libc = ctypes.CDLL(None, use_errno=True)
        action = (ctypes.c_uint8 * ACTION_BYTES)()
        ctypes.c_uint64.from_buffer(action, 0).value = handler  # sa_sigaction
        ctypes.c_int32.from_buffer(action, 136).value = _SA_SIGINFO | _SA_ONSTACK  # sa_flags, after the sigset
        old = self.engine.get_global_value_address(OLD_ACTIONS)
        for k, signal in enumerate(FAULT_SIGNALS):
            libc.sigaction(signal, action, ctypes.c_void_p(old + k * ACTION_BYTES))

    def _pin_workers(self, address) -> None:
        cpus = _pinning_cpus()
        set_cpu = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(address("minitc_rt_set_cpu"))
        for k, cpu in enumerate(cpus):
            set_cpu(k, cpu)
        ctypes.CFUNCTYPE(None, ctypes.c_int64)(address("minitc_rt_set_ncpus"))(len(cpus))


def _pinning_cpus() -> list:
    """CPUs to pin workers to, worker k on cpus[k % len]: the usable CPUs, starting after the
    first (where the launching thread most likely runs). Empty (no pinning) for a single CPU or
    with MINITC_PIN_THREADS=0."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or os.environ.get("MINITC_PIN_THREADS", "1") == "0":
        return []
    return (cpus[1:] + cpus[:1])[:MAX_THREADS]


def _check_count(n, source):
    """Validate a thread count, naming where it came from in the error."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ConfigError(f"{source}: thread count must be an integer in [1, {MAX_THREADS}], got {n!r}")
    return n


def _default_num_threads():
    env = os.environ.get("MINITC_NUM_THREADS")
    if env is None:
        return min(len(os.sched_getaffinity(0)), MAX_THREADS)
    fix = f"set it to an integer from 1 to {MAX_THREADS}, or unset it to use every CPU"
    try:
        n = int(env.strip())
    except ValueError:
        raise ConfigError(f"MINITC_NUM_THREADS={env!r} is not an integer: {fix}") from None
    if not 1 <= n <= MAX_THREADS:
        raise ConfigError(f"MINITC_NUM_THREADS={env!r} is out of range: {fix}")
    return n


def default_num_threads() -> int:
    """The pool size a process starts with: MINITC_NUM_THREADS, else the CPUs it may run on.
    Raises ConfigError (a MinitcError and a ValueError) for a malformed MINITC_NUM_THREADS, so
    callers such as the command line can check it before doing any work."""
    return _default_num_threads()


def ensure_runtime():
    """Build, JIT and register the parallel runtime once per process (idempotent, thread-safe).

    Afterwards MCJIT modules that declare ``minitc_parallel_launch`` / ``minitc_num_threads``
    resolve them (LLJIT modules need ``runtime_symbols()``). The thread count starts at
    ``MINITC_NUM_THREADS`` or, if unset, the number of CPUs this process may run on."""
    global _rt
    if _rt is not None:
        return
    with _build_lock:
        if _rt is not None:
            return
        threads = _default_num_threads()  # validate before building anything
        rt = _Runtime()
        rt.set_threads(threads)
        # Leak one reference on purpose: freeing the engine would unmap the code that idle
        # worker threads are sleeping in.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(rt))
        _rt = rt


def running_note():
    """The runtime's note of what is running (a ctypes c_void_p: set `.value` to the address of
    a NUL-terminated string, or None), which a fault's report prints (fault_ir.py); None where
    the runtime cannot be built."""
    try:
        ensure_runtime()
    except BuildError:
        return None
    return _rt.note


def runtime_symbols():
    """``{name: address}`` of the ABI functions, e.g. for ``JITLibraryBuilder.import_symbol``."""
    ensure_runtime()
    return dict(_rt.symbols)


def set_num_threads(n):
    """Set the pool size (calling thread included) used from the next launch on.

    Missing workers are created by the next launch; surplus workers stay asleep."""
    _check_count(n, "set_num_threads")
    ensure_runtime()
    _rt.set_threads(n)


def get_num_threads():
    """The current pool size, calling thread included (>= 1)."""
    ensure_runtime()
    return _rt.get_threads()


def set_spin_iterations(n=SPIN_ITERS):
    """How many ``pause`` iterations (~37 ns each on Zen 2) idle workers and a waiting
    launcher spin before sleeping on a futex; 0 sleeps at once. Longer spinning keeps workers
    hot across gaps between launches (a launch after a sleep may find its worker woken onto
    the launcher's own CPU and run nearly serially) at the price of burning CPU while idle."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"set_spin_iterations: expected an integer >= 0, got {n!r}")
    ensure_runtime()
    _rt.set_spin(n)


def release_workspace():
    """Free the kernels' cached heap buffers that no running kernel holds (workspace_ir.py);
    the next kernel that needs one allocates it again."""
    ensure_runtime()
    _rt.release_workspace()


def _bench_fn():
    """JIT ``bench_module()`` once; returns its ``bench(iters, num_tasks, spin)``."""
    with _build_lock:
        if _rt.bench is None:
            engine = _jit(bench_module())
            signature = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
            _rt.bench = (engine, signature(engine.get_function_address("bench")))
    return _rt.bench[1]


def launch_overhead_us(repeats=51, launches=200, num_tasks=None, task_spin=0):
    """Median wall time in microseconds of one ``minitc_parallel_launch``, measured from JIT
    code: each of ``repeats`` samples times ``launches`` back-to-back launches and divides.

    ``num_tasks`` defaults to one task per thread. With ``task_spin == 0`` the tasks are
    empty; the launching thread may then finish them all before a worker even looks. With
    ``task_spin > 0`` each task does that many atomic loads and the time of one such task run
    inline is subtracted (EPCC syncbench style): that measures the full fork/join round trip.
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
        overhead -= median_us(1)  # one task run inline: the ideal parallel time
    return overhead
