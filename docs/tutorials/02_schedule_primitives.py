# %% [markdown]
# # 2. Schedule primitives, one at a time
#
# Tutorial 1 wrote *what* to compute. A schedule says *how*: in which order the loops run, how
# they are tiled, which loop becomes vector lanes or threads, where intermediate results
# live. Each primitive below rewrites the loop nest and nothing else: the values computed stay
# those of the tensor expression, and every kernel here is built and checked against numpy to
# show it. For each primitive you see the loop nest before and after, and why one would want
# it. Then come the trace a schedule records, replaying it, an illegal schedule, and a small
# timing table.
#
# The numbers depend on the CPU: the vector width is read from the target, and the timings
# are of whatever machine runs this.

# %%
import os

import numpy as np

import minitc as tc
from minitc.benchmarks.machine import host_cpu
from minitc.timing import measure

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(0)

target = tc.target.parse_target("llvm")
LANES = target.lanes("float32")  # float32 elements per vector register: 8 (AVX2), 16 (AVX-512)
print(f"host: {host_cpu()['cpu']} ({host_cpu()['llvm_cpu']}), {LANES} float32 lanes per vector")


def matmul(n):
    """C = A @ B for n x n float32 matrices, as a tensor expression."""
    A = tc.placeholder((n, n), "float32", name="A")
    B = tc.placeholder((n, n), "float32", name="B")
    k = tc.reduce_axis(n, name="k")
    return tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")


def check(s, reference=lambda a, b: a @ b):
    """Build a schedule and compare it with numpy on random inputs."""
    f = tc.build(s)
    inputs, _ = s.arguments()
    arrays = [rng.standard_normal(s.tensor(name).shape).astype("float32") for name in inputs]
    np.testing.assert_allclose(f(*arrays), reference(*arrays), rtol=1e-4, atol=1e-4)
    print("built, and matches numpy")


# %% [markdown]
# The running example is a 64 x 64 matmul. `s.loops(C)` returns handles to C's loops,
# outermost first: the spatial loops `i`, `j`, then the reduction loop `k`. A primitive takes
# these handles and returns new ones for the loops it creates.

# %%
C = matmul(64)
print(tc.Schedule(C).loops(C))

# %% [markdown]
# ## split
#
# `s.split(loop, factor=f)` cuts a loop of extent n into an outer loop of extent n / f and an
# inner loop of extent f; `i` becomes `i_o` and `i_i`, and the index `i` becomes
# `i_o * f + i_i`. On its own it changes nothing about the order of the work; it creates the
# loops that the other primitives need: a tile of fixed size to keep in registers or cache,
# an inner loop as wide as a vector register, an outer loop to hand out to threads.
# `nparts=p` fixes the outer extent instead (p parts, e.g. one per core).

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
print("before:")
print(tc.lower(s))
io, ii = s.split(i, nparts=4)
jo, ji = s.split(j, factor=LANES)
print("after split(i, nparts=4), split(j, factor=LANES):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ### A split that does not divide
#
# 64 is not a multiple of 10: `split(j, factor=10)` gives 7 outer iterations of 10, i.e. 70
# iterations for 64 elements. Lowering adds a **guard** (`if j_o * 10 + j_i < 64`) so the last
# six never run. The printed IR keeps the guard to say what the kernel computes; the CPU
# backend then peels the last outer iteration off, so the first six run without any test.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
jo, ji = s.split(j, factor=10)
print("after split(j, factor=10) of the naive nest:")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## reorder
#
# `s.reorder(*loops)` puts a stage's loops in the given order. The naive order `i, j, k`
# has the innermost loop walk `B[k, j]` down a column: each step jumps a whole row of `B`
# (256 bytes here), one cache line per multiply. In the order `i, k, j` the innermost loop
# walks a row of `B` and a row of `C` contiguously, and `A[i, k]` is a constant in it: this
# is the loop LLVM can vectorize on its own.
#
# Note what happens to the reduction: `C[i, j] = 0.0` must run before the first update of
# `C[i, j]`, and with `k` outside `j` that is no longer "just before the `k` loop". Lowering
# moves the **init** into a loop nest of its own over the loops inside the reduction.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
print("before:")
print(tc.lower(s))
s.reorder(i, k, j)
print("after reorder(i, k, j):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## fuse
#
# `s.fuse(a, b)` merges two adjacent loops into one of extent `a * b`, recovering the
# indices with `//` and `%`. Its main use is to make one long loop out of several short ones:
# a parallel loop over `i_o` with 4 iterations keeps at most 4 threads busy, but fused with
# `j_o` it has 4 * 8. Only adjacent loops of the same kind (spatial or reduction) can be fused.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
print("before:")
print(tc.lower(s))
ij = s.fuse(i, j)
print("after fuse(i, j):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## unroll
#
# `s.unroll(loop)` marks a loop to be fully unrolled: its body is copied once per iteration
# with the index a constant. The printout still shows the loop (as `unrolled(4)`), but the
# machine code has no counter, no compare, no branch. The real gain comes from what it
# allows: with `i_i` unrolled inside `k`, the four rows' partial sums are four separate
# values that can each sit in a register, and four independent multiply-add chains keep the
# CPU's pipelined FMA units busy (one chain has to wait for its previous result).

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=4)
s.reorder(io, j, k, ii)
print("before:")
print(tc.lower(s))
s.unroll(ii)
print("after unroll(i_i):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## vectorize
#
# `s.vectorize(loop)` turns a loop into SIMD instructions: one instruction works on all its
# iterations at once. The loop must be spatial (its iterations independent), innermost, and
# at most 64 wide; a loop of exactly `LANES` iterations fills one register. Here the inner
# `j_i` has `LANES` iterations, and the update of `C[i, j_o*LANES : j_o*LANES + LANES]` becomes
# one vector load of `B`, one broadcast of `A[i, k]`, one fused multiply-add and one store.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
jo, ji = s.split(j, factor=LANES)
s.reorder(i, jo, k, ji)
print("before:")
print(tc.lower(s))
s.vectorize(ji)
print("after vectorize(j_i):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## parallel
#
# `s.parallel(loop)` runs a loop's iterations on a pool of threads (`tc.set_num_threads`, or
# `MINITC_NUM_THREADS`). Each thread takes a contiguous chunk of iterations. The loop must be
# spatial (two threads updating one sum would race) and should be outer, so each task does
# enough work to pay for waking a thread; a parallel loop inside another is refused.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=16)
print("before:")
print(tc.lower(s))
s.parallel(io)
print("after parallel(i_o):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## compute_at
#
# With more than one stage, each stage is by default computed in full before its consumer
# runs, in a full-size temporary. Take `S = A + B` and `Y = row sums of S`. `s.compute_at(S,
# i)` computes `S` inside `Y`'s loop `i`, and only the region that one iteration of `i`
# reads: here one row. The temporary shrinks from n x n to 1 x n, small enough to stay in L1
# cache, and each row of `S` is used right after it is written, instead of making a round
# trip through memory. Bound inference works out the region from the indices `Y` reads.

# %%
A = tc.placeholder((64, 64), "float32", name="A")
B = tc.placeholder((64, 64), "float32", name="B")
S = tc.compute((64, 64), lambda i, j: A[i, j] + B[i, j], name="S")
r = tc.reduce_axis(64, name="r")
Y = tc.compute((64,), lambda i: tc.sum(S[i, r], axis=r), name="Y")
s = tc.Schedule(Y)
yi, yr = s.loops(Y)
print("before:")
print(tc.lower(s))
s.compute_at(S, yi)
print("after compute_at(S, i):")
print(tc.lower(s))
check(s, lambda a, b: (a + b).sum(axis=1))

# %% [markdown]
# ## compute_inline
#
# The extreme of `compute_at`: no buffer at all. `s.compute_inline(S)` substitutes `S`'s
# formula where `Y` reads it (tutorial 1 did this for `relu(A + B)`). It applies to
# elementwise stages only, and is the right choice when each element of `S` is read once;
# `compute_at` is better when a value is read several times and costly to recompute.

# %%
s = tc.Schedule(Y)
s.compute_inline(S)
print("after compute_inline(S):")
print(tc.lower(s))
check(s, lambda a, b: (a + b).sum(axis=1))

# %% [markdown]
# ## cache_write
#
# `s.cache_write(C, "local")` computes `C` into a new stage `C_local` and adds a copy from it
# into `C`. Attached with `compute_at` inside a tile of `C`, the cache becomes a small
# accumulator tile: here 4 rows by 2 vectors. Every update of the inner loop nest touches
# only `C_local`, whose 8 vectors LLVM keeps in registers for the whole `k` loop; `C` in
# memory is written once per tile. This is register blocking, the core of a fast matmul: per
# step of `k`, 4 broadcasts of `A` and 2 vector loads of `B` feed 8 vector FMAs.

# %%
TILE_ROWS, TILE_VECTORS = 4, 2


def register_tiled(C, rows=TILE_ROWS, vectors=TILE_VECTORS, parallel=False):
    """A rows x (vectors * LANES) accumulator tile of C, kept in registers over k."""
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s.loops(C)  # C itself now only copies the tile out: no reduction loop
    io, ii = s.split(i, factor=rows)
    jo, ji = s.split(j, factor=vectors * LANES)
    s.reorder(io, jo, ii, ji)
    s.compute_at(CL, jo)
    ci, cj, ck = s.loops(CL)
    s.reorder(ck, ci, cj)
    cjo, cji = s.split(cj, factor=LANES)
    s.unroll(ci)
    s.unroll(cjo)
    s.vectorize(cji)
    s.vectorize(ji)
    if parallel:
        s.parallel(io)
    return s


print("before:")
print(tc.lower(tc.Schedule(C)))
s = register_tiled(C)
print("after cache_write(C, 'local'), compute_at, unroll, vectorize:")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## cache_read
#
# `s.cache_read(B, "local", [C])` makes `C` read `B` through a copy. Attached inside a loop,
# the copy holds just the tile that loop reads, packed contiguously. Below, each `j_o`
# iteration packs a 64 x `LANES` column strip of `B` into `B_local`: the `k` loop then reads
# one contiguous cache line per step instead of jumping a row of `B`, and the strip is reused
# by all 64 rows `i`. The GEMM template packs panels of `B` this way. (`"shared"` is the GPU
# block's shared memory; `layout=` stores the copy transposed.)

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
jo, ji = s.split(j, factor=LANES)
s.reorder(jo, i, k, ji)
s.vectorize(ji)
print("before:")
print(tc.lower(s))
BL = s.cache_read(s.stage_name("B"), "local", [C])
s.compute_at(BL, jo)
print("after cache_read(B, 'local', [C]) and compute_at(B_local, j_o):")
print(tc.lower(s))
check(s)

# %% [markdown]
# ## rfactor
#
# A row sum reduces along the contiguous axis, and a reduction loop cannot be vectorized: all
# its iterations add into the same element. `s.rfactor(k_i)` splits the work in two stages.
# `Y_rf` keeps `LANES` partial sums per row, one per lane (`k_i` is now a *spatial* axis of
# `Y_rf`, so it can be vectorized); `Y` then adds the `LANES` partials of each row. The sum is
# evaluated in a different order than left to right, which is why compilers do not do this
# for floats on their own (tutorial 4 has more).

# %%
X = tc.placeholder((64, 64), "float32", name="X")
kr = tc.reduce_axis(64, name="k")
Y = tc.compute((64,), lambda i: tc.sum(X[i, kr], axis=kr), name="Y")
s = tc.Schedule(Y)
yi, yk = s.loops(Y)
ko, ki = s.split(yk, factor=LANES)
print("before:")
print(tc.lower(s))
Yrf = s.rfactor(ki)
ri, rki, rko = s.loops(Yrf)  # the rf stage's spatial axes, then k_i; its reduction k_o last
s.reorder(ri, rko, rki)
s.vectorize(rki)
print("after rfactor(k_i), with k_i vectorized in Y_rf:")
print(tc.lower(s))
check(s, lambda x: x.sum(axis=1))

# %% [markdown]
# ## bind, reverse_compute_at
#
# `s.bind(loop, "blockIdx.x")` maps a loop onto a GPU's blocks or threads; it belongs to the
# GPU backend and is the subject of tutorial 7. `s.reverse_compute_at(R, loop)` is
# `compute_at` the other way round: it computes an elementwise consumer (a bias or an
# activation) right after each finished tile of its producer, which is how the templates fuse
# epilogues into a matmul.
#
# ## The trace
#
# Every primitive call is recorded in `s.trace` as a `Step`: `kind`, `stage`, `loops` and
# `args` say *which* primitive was applied *where* (the structure); `decisions` holds the
# numbers a search may change (split factors). The trace serialises to JSON, and replaying it
# on a fresh schedule of the same computation rebuilds the same loop nest: this is what the
# tuning records store and what the tuner, the cost model and the language model work on.

# %%
s = register_tiled(C, parallel=True)
for step in s.trace:
    print(step)
text = s.trace.to_json()
print(text)

# %% [markdown]
# `tc.Trace.from_json` parses it back, and `tc.Schedule.from_trace(C, trace)` (or
# `tc.Schedule(C).replay(trace)`) replays it; the loop nest printed from the replay is the
# same text. `trace.with_decisions` keeps the structure and swaps the numbers: here a 2-row
# tile instead of a 4-row one, another program of the same design space.

# %%
trace = tc.Trace.from_json(text)
replayed = tc.Schedule.from_trace(C, trace)
assert str(tc.lower(replayed)) == str(tc.lower(s))
check(replayed)
print("the replayed schedule lowers to the same loop nest")

decisions = [(2,) if step.kind == "split" and step.loops == ("i",) else step.decisions for step in trace]
variant = tc.Schedule(C).replay(trace.with_decisions(decisions))
print(tc.lower(variant))
check(variant)

# %% [markdown]
# ## An illegal schedule
#
# A primitive that would change the result, or that the backend cannot compile, is refused
# with a `tc.ScheduleError` naming the loop and the reason. Some are caught when the
# primitive is applied (vectorizing a reduction loop), others when the whole nest is lowered
# (a vectorized loop with another loop inside it). A refused primitive leaves the schedule
# and its trace as they were.

# %%
s = tc.Schedule(C)
i, j, k = s.loops(C)
try:
    s.vectorize(k)
    raise AssertionError("expected a ScheduleError")
except tc.ScheduleError as e:
    print(f"vectorize(k): {e}")
print("trace after the refused primitive:", len(s.trace), "steps")

s.vectorize(j)  # legal on its own, but k is still inside j
try:
    tc.lower(s)
    raise AssertionError("expected a ScheduleError")
except tc.ScheduleError as e:
    print(f"lower: {e}")

# %% [markdown]
# ## What it buys: a small timing table
#
# The same matmul at a larger size, built with several of the schedules above, against the
# GEMM template (`tc.build(tc.ops.matmul(A, B))`, see `docs/scheduling.md`) and
# numpy's BLAS. Medians of interleaved repeats (`minitc.timing.measure`). Expect
# the reordered loop to beat the naive one by an order of magnitude (contiguous rows,
# vectorized by LLVM), the register tile to gain again (accumulators in registers), and
# `parallel` to scale with the cores that are free. On a shared machine the parallel rows are
# the noisiest.

# %%
n = 256 if FAST else 512
C = matmul(n)
A = tc.placeholder((n, n), "float32", name="A")
B = tc.placeholder((n, n), "float32", name="B")


def reordered(C):
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.reorder(i, k, j)
    return s


schedules = {
    "naive (i, j, k)": tc.Schedule(C),
    "reorder (i, k, j)": reordered(C),
    "register tile": register_tiled(C),
    "register tile + parallel": register_tiled(C, parallel=True),
}
a = rng.standard_normal((n, n)).astype("float32")
b = rng.standard_normal((n, n)).astype("float32")
expected = a @ b
out = np.empty((n, n), "float32")
calls = {}
for name, sched in schedules.items():
    f = tc.build(sched)
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-3, atol=1e-3)
    calls[name] = lambda f=f: f(a, b, out=out)
template = tc.build(tc.ops.matmul(A, B), db=False)  # db=False: the template, not a tuned record
np.testing.assert_allclose(template(a, b), expected, rtol=1e-3, atol=1e-3)
calls["GEMM template"] = lambda: template(a, b, out=out)
calls["numpy (BLAS)"] = lambda: np.matmul(a, b, out=out)
print(f"all {len(calls) - 1} minitc kernels match numpy")

timings = measure(calls, repeats=3 if FAST else 7, budget_s=0.3 if FAST else 2.0)
flops = 2 * n**3
print(f"\nmatmul {n}x{n}x{n} float32, {tc.get_num_threads()} threads, {host_cpu()['cpu']}")
print(f"{'schedule':28s} {'ms':>9s} {'GFLOP/s':>9s} {'vs naive':>9s}")
naive_s = timings["naive (i, j, k)"].median
for name, t in timings.items():
    print(f"{name:28s} {t.median * 1e3:9.3f} {flops / t.median / 1e9:9.1f} {naive_s / t.median:8.1f}x")

# %% [markdown]
# What remains between the register tile and the template is mostly memory: for each tile,
# the register-tiled loop streams an n x (2 * LANES) strip of `B` through the caches, and
# once n is large that strip no longer fits in L1 (at n = 1024 this schedule falls back
# below the plain reordered loop, and two threads only fight over the caches). The template
# packs panels of `B` (`cache_read`) sized to the L2 cache and picks its register tile from
# the target's register count. Tutorial 3 builds a CPU matmul that way, step by step, and
# `tc.tune` searches for such schedules.
