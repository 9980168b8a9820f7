# %% [markdown]
# # 7. GPUs without a GPU
#
# A GPU runs one kernel as a *grid* of thread *blocks*. The threads of a block run on one
# streaming multiprocessor (SM), in groups of 32 (warps) that execute one instruction
# together; they share a small fast *shared memory* and can wait for each other at a
# *barrier*; each thread has its own registers. Blocks cannot wait for each other. A
# fast GPU kernel gives every thread a few outputs to keep in registers, and lets the
# threads of a block load each input tile from slow global memory once into shared memory,
# then reuse it many times.
#
# minitc expresses this with the same schedule primitives as on the CPU, plus `bind`, which
# maps a loop onto block or thread indices. It prints the loop nest, writes CUDA C, and runs
# the kernel either on an NVIDIA GPU (through CuPy) or on a numpy *simulator* that runs every
# thread of every block and checks for races. This tutorial needs no GPU: everything is
# checked in the simulator, and the real GPU is used only if one is there.
#
# docs/gpu.md describes the backend; `examples/gpu_matmul.py` is a shorter version of the
# matmul below.

# %%
import os

import numpy as np

import minitc as tc
from minitc.autotune.space import Space

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"

# The simulator runs every thread in numpy: exact, but slow, so the shapes are small.
N_VEC = 1000 if FAST else 100_000
M, N, K = (64, 64, 32) if FAST else (256, 256, 128)
TILE, REG, KSTEP = 32, 4, 8  # a block computes TILE x TILE of C, a thread REG x REG of it
rng = np.random.default_rng(0)

# %% [markdown]
# ## One thread per element: `bind`
#
# A vector add has one independent output per index. Split the loop into blocks of 256,
# bind the outer loop to `blockIdx.x` and the inner one to `threadIdx.x`: the loop nest
# prints them as `bind(...)` loops, and each thread runs the body once, for its own index.
# `N_VEC` is not a multiple of 256, so the last block has threads with nothing to do: the
# split adds a guard (`if`), as it does on the CPU.

# %%
X = tc.placeholder((N_VEC,), "float32", name="X")
Y = tc.placeholder((N_VEC,), "float32", name="Y")
Z = tc.compute((N_VEC,), lambda i: X[i] + Y[i], name="Z")

s = tc.Schedule(Z)
(i,) = s.loops(Z)
block, thread = s.split(i, factor=256)
s.bind(block, "blockIdx.x")
s.bind(thread, "threadIdx.x")
print(tc.lower(s))

# %% [markdown]
# `tc.codegen(s, "cuda")` writes the CUDA C that a GPU build would compile, without a GPU or
# CuPy: one `__global__` function per launch, the bound loop variables read from `blockIdx`
# and `threadIdx`, inputs marked `const ... __restrict__` so the compiler may cache them.

# %%
print(tc.codegen(s, "cuda"))

# %% [markdown]
# `target="cuda-sim"` builds the same launches for the simulator. It is called like any
# minitc function, with numpy arrays.

# %%
x = rng.random(N_VEC, dtype="float32")
y = rng.random(N_VEC, dtype="float32")
add = tc.build(s, target="cuda-sim")
np.testing.assert_allclose(add(x, y), x + y, rtol=1e-6)
print("simulated vector add agrees with numpy")

# %% [markdown]
# ## A matmul, one output per thread
#
# The first GPU matmul binds C's two loops the same way: blocks of `TILE` x `TILE` outputs,
# one thread per output. Each thread walks the whole k loop, reading a row of A and a
# column of B from global memory: two loads per multiply-add.


# %%
def operands(M=M, N=N, K=K):
    A = tc.placeholder((M, K), "float32", name="A")
    B = tc.placeholder((K, N), "float32", name="B")
    return A, B, tc.ops.matmul(A, B, name="C")


def one_per_thread(C):
    s = tc.Schedule(C)
    i, j = s.loops(C)[:2]
    bi, ti = s.split(i, factor=TILE)
    bj, tj = s.split(j, factor=TILE)
    s.reorder(bi, bj, ti, tj)
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(ti, "threadIdx.y")
    s.bind(tj, "threadIdx.x")
    return s


a = rng.random((M, K), dtype="float32")
b = rng.random((K, N), dtype="float32")
naive = one_per_thread(operands()[2])
print(tc.lower(naive))
np.testing.assert_allclose(tc.build(naive, target="cuda-sim")(a, b), a @ b, rtol=1e-4)
print("the simulator agrees with numpy")

# %% [markdown]
# ## Registers and shared memory
#
# Two changes make a GPU matmul compute-bound:
#
# - **A register tile per thread.** `cache_write(C, "local")` gives C an accumulator stage
#   in each thread's registers; computed at the thread loop, it holds `REG` x `REG`
#   outputs. Each value a thread loads is then used `REG` times.
# - **Shared-memory tiles.** `cache_read(A, "shared", [CL])` makes a stage that copies A
#   into the block's shared memory; `compute_at(..., ko)` fills it once per k-step of
#   `KSTEP`, so each element of A's tile comes from global memory once per *block* instead
#   of once per thread. Its copy loops are fused, split and bound to the block's threads:
#   all threads fetch together (cooperative fetching).
#
# Lowering inserts the barriers: one after the fill, so no thread reads the tile before it
# is complete, and one before the next fill, so no thread overwrites it while another still
# reads the previous k-step. Look for `alloc("shared", ...)` and `barrier()` in the nest. The
# `A_shared` rows are one word longer than the tile (`KSTEP + 1`): the threads read that
# tile down a column, and the padding spreads those reads over the memory banks.


# %%
def tiled(A, B, C):
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")  # each thread's accumulators; C is copied out of them
    i, j = s.loops(C)
    bi, ii = s.split(i, factor=TILE)
    bj, jj = s.split(j, factor=TILE)
    ti, ri = s.split(ii, factor=REG)
    tj, rj = s.split(jj, factor=REG)
    s.reorder(bi, bj, ti, tj, ri, rj)
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(ti, "threadIdx.y")  # (TILE / REG)^2 threads per block
    s.bind(tj, "threadIdx.x")
    s.vectorize(rj)  # the copy-out stores REG floats at once (float4)

    s.compute_at(CL, tj)  # the register tile, per thread
    ci, cj, ck = s.loops(CL)
    ko, ki = s.split(ck, factor=KSTEP)
    s.reorder(ko, ki, ci, cj)  # k outermost: the whole tile stays in registers
    s.unroll(ci)
    s.unroll(cj)

    threads = TILE // REG
    for cache in (s.cache_read(A, "shared", [CL]), s.cache_read(B, "shared", [CL])):
        s.compute_at(cache, ko)  # one fill per k-step
        rest, tx = s.split(s.fuse(*s.loops(cache)), factor=threads)
        _, ty = s.split(rest, factor=threads)
        s.bind(tx, "threadIdx.x")
        s.bind(ty, "threadIdx.y")
    return s


fast = tiled(*operands())
print(tc.lower(fast))
np.testing.assert_allclose(tc.build(fast, target="cuda-sim")(a, b), a @ b, rtol=1e-4)
print("the simulator agrees with numpy")

# %% [markdown]
# How much global memory each version reads, counted from the loop nests: one output per
# thread loads 2K values for 2K flops; the register tile divides that by `REG`; the shared
# tiles load each block's A and B tiles once, dividing it by `TILE`. An H100 (SXM) is rated
# at about 67 float32 TFLOP/s and 3.35 TB/s of memory bandwidth, some 80 flops per float
# loaded, so a kernel needs tens of flops per load before the arithmetic, not the memory,
# limits it. (The GPU's caches catch some of the repeated loads, and reads from shared
# memory, which the register tile divides by `REG`, are the next limit.)

# %%
flops = 2 * M * N * K
loads = {
    "one output per thread": 2 * M * N * K,
    "register tiles (no shared)": 2 * M * N * K // REG,
    "shared tiles + register tiles": 2 * M * N * K // TILE,
}
print(f"{'version':>30} {'global loads':>13} {'flops per load':>15}")
for name, n in loads.items():
    print(f"{name:>30} {n:13,} {flops / n:15.1f}")

# %% [markdown]
# ## The CUDA C
#
# The same schedule as CUDA C (after the helper functions printed above): `__launch_bounds__`
# with the block's thread count, the shared arrays hoisted to the top, `__syncthreads()` for
# the barriers (two adjacent barriers of the nest become one), the accumulators as a local
# array (registers, once the loops over it are unrolled), and `float4` stores where the
# vectorized copy-out is contiguous and aligned.

# %%
cuda_c = tc.codegen(fast, "cuda")
print(cuda_c[cuda_c.index("#endif") + len("#endif") :].strip())

# %% [markdown]
# ## What the race checker catches
#
# Some schedules would compute garbage on a GPU without any error: two threads writing the
# same element, or reading a shared tile before another thread finished filling it. minitc
# refuses them before any code exists, with a `ScheduleError` that says what to bind.
#
# First, binding a reduction loop to threads: every thread would add into the same output.

# %%
A, B, C = operands()
s = tc.Schedule(C)
i, j, k = s.loops(C)
s.bind(i, "blockIdx.x")
try:
    s.bind(k, "threadIdx.x")
except tc.ScheduleError as e:
    print("ScheduleError:", e)

# %% [markdown]
# Second, a shared-memory fill whose loops are left unbound (we forget the cooperative
# fetch): every thread of the block would write the whole tile, all at once. The loop nest
# still prints (`tc.lower` does not check GPU rules), but code generation, building and the
# simulator all refuse it.

# %%
A, B, C = operands()
s = one_per_thread(C)
A_shared = s.cache_read(A, "shared", [C])
s.compute_at(A_shared, s.loops(C)[1])  # at blockIdx.x; its loops are not bound to threads
try:
    tc.build(s, target="cuda-sim")
except tc.ScheduleError as e:
    print("ScheduleError:", e)

# %% [markdown]
# Lowering also checks the block size against the target's limits (1024 threads and 48 KiB
# of shared memory per block on every GPU since Volta) and that no barrier sits under a
# condition that differs between the threads of a block. The simulator is a second, dynamic
# line of defence: it records every load and store of every thread between barriers and
# raises `tc.RaceError` naming the buffer, the element and the two threads when they
# conflict (tests/gpu/test_cuda_sim.py removes lowering's barriers from this matmul to show it).
# Every GPU kernel in the test suite runs in the simulator, which is how CI checks GPU code
# without a GPU.

# %%
s = tc.Schedule(C)
i, j = s.loops(C)[:2]
s.bind(i, "threadIdx.y")
s.bind(j, "threadIdx.x")
try:
    tc.build(s, target="cuda-sim")
except tc.ScheduleError as e:
    print("ScheduleError:", e)

# %% [markdown]
# ## The GPU template
#
# `tc.build(C, target="cuda")` on a tensor uses the operator's GPU template
# (minitc/templates/gpu/): for GEMMs, the schedule above with parameters `bm` x `bn` block
# tiles, `tm` x `tn` register tiles and `bk`-deep shared k-steps chosen from the shape and
# the number of SMs; for convolutions a direct convolution with shared tiles; for every
# other operator one thread per output element. `db=False` skips the records database, so
# this is the template itself.

# %%
A, B, C = operands()
print(tc.lower(C, target="cuda", db=False))
template = tc.build(C, target="cuda-sim", db=False)
np.testing.assert_allclose(template(a, b), a @ b, rtol=1e-4)
print("the template agrees with numpy in the simulator")

# %% [markdown]
# The tuner's GPU design space (`Space(C, "cuda")`) makes each template parameter a
# decision, and every combination is made legal (tiles rounded to whole thread tiles, at
# most 1024 threads), so any sample is a program that runs. A few random ones, each checked
# in the simulator:

# %%
space = Space(C, "cuda")
print("the template's own parameters:", space.default_values())
for n in range(2 if FAST else 4):
    candidate = space.sample(rng, sketch="template")
    f = tc.build(candidate.schedule, target="cuda-sim")
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4)
    print(f"  {candidate.values}: agrees with numpy")

# %% [markdown]
# Softmax has no template of its own: each of its stages gets one thread per output. The
# row reductions (max and sum) run serially in one thread per row, and the intermediates
# become global temporaries, one launch per stage. (Cross-thread reductions are not done
# yet, which is why softmax is far from the GPU's bandwidth: docs/gpu.md.)

# %%
S = tc.placeholder((16, 64), "float32", name="S")
softmax = tc.ops.softmax(S)
print(tc.lower(softmax, target="cuda", db=False))
v = rng.random((16, 64), dtype="float32")
e = np.exp(v - v.max(axis=1, keepdims=True))
np.testing.assert_allclose(tc.build(softmax, target="cuda-sim", db=False)(v), e / e.sum(1, keepdims=True), rtol=1e-5)
print("simulated softmax agrees with numpy")

# %% [markdown]
# ## On a real GPU
#
# With an NVIDIA GPU and CuPy (`pip install -e '.[cuda]'`), `target="cuda"` compiles the
# same CUDA C with NVRTC and launches it; `f.time_ms` times it with CUDA events. The
# simulator's timings mean nothing, so the comparison with cuBLAS (`cupy.matmul`) is only
# made on a GPU. Without one, `tc.build` raises a `BuildError` saying what is missing, and
# this part is skipped.

# %%
try:
    tc.build(fast, target="cuda")
except tc.BuildError as e:
    print(f"skipped the real GPU: {e}")
else:
    import cupy

    size = 1024 if FAST else 4096
    a = rng.random((size, size), dtype="float32")
    b = rng.random((size, size), dtype="float32")
    ag, bg = cupy.asarray(a), cupy.asarray(b)  # copied to the GPU once, not per call
    kernels = {
        "hand schedule": tc.build(tiled(*operands(size, size, size)), target="cuda"),
        "template": tc.build(operands(size, size, size)[2], target="cuda", db=False),
    }
    gflop = 2 * size**3 / 1e9
    for name, f in kernels.items():
        np.testing.assert_allclose(cupy.asnumpy(f(ag, bg)), a @ b, rtol=1e-3)
        ms = float(np.median(f.time_ms(ag, bg, number=10, repeat=5)))
        print(f"{name:>14}: {ms:.3f} ms, {gflop / ms * 1e3:.0f} GFLOP/s; agrees with numpy")
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.matmul(ag, bg)  # warm-up
    start.record()
    for _ in range(10):
        cupy.matmul(ag, bg)
    stop.record()
    stop.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, stop) / 10
    print(f"{'cuBLAS':>14}: {ms:.3f} ms, {gflop / ms * 1e3:.0f} GFLOP/s (cupy.matmul)")
