"""Host probes: the peak FMA rate and the STREAM-triad bandwidth of this machine, measured
with kernels that minitc itself generates (the benchmark runner's "% of peak" and the language
model's hardware tokens both come from here).

    measure_fma(threads, tasks) -> (best, median) GFLOP/s
    measure_triad(threads) -> (best, median) GB/s

* FMA peak: a loop-nest IR kernel written by hand with `minitc.ir`. Each parallel task keeps
  ACC_ROWS independent accumulators of the target's full vector width (`<16 x float>` with
  AVX-512, `<8 x float>` with AVX2; an unrolled x vectorized local tile that LLVM promotes to
  registers) and updates each with `acc = acc * x + y` ITERS times: ACC_ROWS independent FMA
  chains, enough to cover the FMA latency times its two pipes. The IR flops are
  2 * lanes * ACC_ROWS per iteration; no memory traffic in the loop. Where 512-bit ops are
  split in halves the wide kernel simply runs at the 256-bit rate.
* Bandwidth: STREAM triad `a[i] = b[i] + s * c[i]` over TRIAD_ELEMS floats per array (64 MiB
  each, several times any L3 of the machines we run on), parallel + vectorized. Bytes counted
  the STREAM way: 12 per element (read b and c, write a), without write-allocate traffic.

Peaks are the best sample of several (a peak is what the machine *can* do); the medians are
kept as well, since on a shared machine the clock drifts between runs.
"""

from __future__ import annotations

import ctypes
import statistics
import time

import numpy as np

from minitc.backends.llvm.jit import compile_kernel
from minitc.backends.llvm.runtime import set_num_threads
from minitc.expr import Var, const
from minitc.ir import Allocate, Buffer, For, Kernel, Load, Store, seq
from minitc.target import parse_target

ACC_ROWS = 10  # independent FMA chains per task
LANES = 8  # the triad's vectors (memory-bound: 256 bits are enough everywhere)
TRIAD_ELEMS = 16 * 2**20  # 64 MiB per float32 array
TRIAD_SCALAR = 3.0


def fma_kernel(tasks: int, iters: int, lanes: int = LANES) -> Kernel:
    """`out[t] = acc` after `iters` rounds of `acc = acc * x + y` on an ACC_ROWS x `lanes`
    register tile, one tile per parallel task. `xy` holds x (row 0) and y (row 1)."""
    XY = Buffer("xy", (2, lanes), "float32")
    out = Buffer("out", (tasks, ACC_ROWS, lanes), "float32")
    acc = Buffer("acc", (ACC_ROWS, lanes), "float32", scope="local")
    t, it = Var("t"), Var("it")
    u0, v0, u1, v1, u2, v2 = (Var(n) for n in ("u", "v", "u", "v", "u", "v"))

    def tile(u, v, stmt):
        return For(u, ACC_ROWS, "unrolled", For(v, lanes, "vectorized", stmt))

    init = tile(u0, v0, Store(acc, (u0, v0), Load(XY, (const(1), v0))))
    update = For(
        it,
        iters,
        "serial",
        tile(u1, v1, Store(acc, (u1, v1), Load(acc, (u1, v1)) * Load(XY, (const(0), v1)) + Load(XY, (const(1), v1)))),
    )
    copy = tile(u2, v2, Store(out, (t, u2, v2), Load(acc, (u2, v2))))
    body = For(t, tasks, "parallel", Allocate(acc, seq(init, update, copy)))
    return Kernel("peak_fma", [XY, out], 1, body)


def fma_flops(tasks: int, iters: int, lanes: int = LANES) -> int:
    return 2 * lanes * ACC_ROWS * iters * tasks


def triad_kernel(n: int = TRIAD_ELEMS, scalar: float = TRIAD_SCALAR, tasks: int = 64) -> Kernel:
    """STREAM triad `a[i] = b[i] + scalar * c[i]`: `tasks` parallel chunks, 8-wide vectors."""
    B, C, A = (Buffer(name, (n,), "float32") for name in "bca")
    chunk = n // tasks
    assert chunk * tasks == n and chunk % LANES == 0, (n, tasks)
    io, ib, iv = Var("i_o"), Var("i_b"), Var("i_v")
    i = io * chunk + ib * LANES + iv
    store = Store(A, (i,), Load(B, (i,)) + const(scalar, "float32") * Load(C, (i,)))
    body = For(io, tasks, "parallel", For(ib, chunk // LANES, "serial", For(iv, LANES, "vectorized", store)))
    return Kernel("stream_triad", [B, C, A], 2, body)


def _compile(kernel, target="llvm"):
    return compile_kernel(kernel, target).cfunc


def _ptr(a: np.ndarray):
    return ctypes.c_void_p(a.ctypes.data)


def _samples(call, repeats: int) -> list:
    call()  # warm-up: wakes the pool, faults pages in
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def measure_fma(threads: int, tasks: int, iters: int = 5_000_000, repeats: int = 7, target="llvm") -> tuple:
    """(best, median) GFLOP/s of the FMA kernel with `threads` threads and `tasks` tasks, in
    vectors of `target`'s full width (the host's by default)."""
    lanes = parse_target(target).lanes("float32")
    fn = _compile(fma_kernel(tasks, iters, lanes), target)
    xy = np.array([[0.999999] * lanes, [1e-6] * lanes], np.float32)  # stays near 1: no denormals
    out = np.empty((tasks, ACC_ROWS, lanes), np.float32)
    set_num_threads(threads)
    times = _samples(lambda: fn(_ptr(xy), _ptr(out)), repeats)
    flops = fma_flops(tasks, iters, lanes)
    return flops / min(times) / 1e9, flops / statistics.median(times) / 1e9


def measure_triad(threads: int, arrays=None, repeats: int = 7) -> tuple:
    """(best, median) GB/s of the STREAM triad with `threads` threads."""
    fn = _compile(triad_kernel())
    b, c, a = arrays if arrays is not None else triad_arrays()
    set_num_threads(threads)
    times = _samples(lambda: fn(_ptr(b), _ptr(c), _ptr(a)), repeats)
    nbytes = 3 * 4 * TRIAD_ELEMS
    return nbytes / min(times) / 1e9, nbytes / statistics.median(times) / 1e9


def triad_arrays():
    b = np.full(TRIAD_ELEMS, 1.0, np.float32)
    c = np.full(TRIAD_ELEMS, 2.0, np.float32)
    return b, c, np.zeros(TRIAD_ELEMS, np.float32)


def check_kernels() -> None:
    """Small runs of both kernels against numpy (a wrong peak kernel would mislead every %)."""
    lanes = parse_target("llvm").lanes("float32")
    fn = _compile(fma_kernel(2, 3, lanes))
    xy = np.array([[0.5] * lanes, [1.0] * lanes], np.float32)
    out = np.empty((2, ACC_ROWS, lanes), np.float32)
    set_num_threads(1)
    fn(_ptr(xy), _ptr(out))
    expect = 1.0
    for _ in range(3):
        expect = expect * 0.5 + 1.0
    assert np.allclose(out, expect), out
    n = 64 * LANES * 4
    fn = _compile(triad_kernel(n))
    b, c, a = (np.arange(n, dtype=np.float32) for _ in range(3))
    fn(_ptr(b), _ptr(c), _ptr(a))
    assert np.allclose(a, b + TRIAD_SCALAR * c)
