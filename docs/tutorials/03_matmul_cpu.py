# %% [markdown]
# # 3. Optimising a matmul on the CPU, step by step
#
# This tutorial takes one float32 matrix multiplication, `C = A @ B` with 1024 x 1024 matrices,
# from the textbook triple loop to within reach of the machine's peak, one schedule primitive
# at a time. It follows the path of TVM's "How to optimize GEMM on CPU": blocking,
# vectorisation, loop permutation, array packing, a write cache, unrolling and threads, then
# compares the result with minitc's own matmul template, numpy and torch.
#
# After each step it prints the loop nest, checks the result against numpy, and times it
# (median of repeats) in GFLOP/s and as a share of the machine's FMA peak, measured on this
# machine with minitc-generated kernels. Every number depends on the CPU: the vector width,
# the number of vector registers, the caches and the cores. The tile sizes below are derived
# from the target, so the same steps apply to AVX2 and AVX-512 machines, but the figures you
# get will differ from anyone else's.
#
# Run it from the repository root: `python docs/tutorials/03_matmul_cpu.py`. Environment:
# `MINITC_TUTORIAL_FAST=1` for 256 x 256 matrices and few repeats; `MINITC_TUTORIAL_THREADS=n`
# for the threads of the parallel steps (default: every CPU this process may use);
# `MINITC_TUTORIAL_OUT=dir` for where the plot and the table go (default `tutorial-output`).

# %%
import json
import os
from pathlib import Path

import numpy as np

import minitc as tc
from minitc.benchmarks.machine import host_cpu, measure_machine
from minitc.timing import measure

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
OUT = Path(os.environ.get("MINITC_TUTORIAL_OUT", "tutorial-output"))
OUT.mkdir(parents=True, exist_ok=True)
THREADS = int(os.environ.get("MINITC_TUTORIAL_THREADS", len(os.sched_getaffinity(0))))
N = 256 if FAST else 1024  # M = N = K
FLOPS = 2 * N**3  # one multiply and one add per (i, j, k)
tc.set_num_threads(THREADS)
CPU = host_cpu()
print(f"matmul {N} x {N} x {N}, float32, on {CPU['cpu']} ({CPU['llvm_cpu']}), {THREADS} thread(s)")

# %% [markdown]
# ## What the target says: vector lanes and registers
#
# The target object describes the CPU the code is generated for. Two of its facts decide the
# shape of the fastest inner loop:
#
# - `lanes("float32")`: how many floats one vector register holds (8 with AVX2, 16 with
#   AVX-512). One fused multiply-add (FMA) instruction does that many multiply-adds.
# - `vector_registers`: 16 with AVX2, 32 with AVX-512.
#
# The inner loop will keep an `MR x NR` tile of `C` in vector registers: `MR` rows of
# `NR = VECS x lanes` columns, so `MR x VECS` accumulators. Each step of `k` loads `VECS`
# vectors of a row of `B`, broadcasts one element of `A` per row, and does `MR x VECS` FMAs.
# An FMA takes about 4 cycles and a core starts two per cycle, so about 8-10 independent
# accumulators are needed to keep the FMA units busy. The tile must fit the register file:
# accumulators, the `B` vectors and one broadcast. We take `VECS = 2` and the most rows that
# fit and divide `N` (minitc's template, `minitc/templates/gemm.py`, makes the same choice with
# more care for shapes that nothing divides).

# %%
target = tc.target.parse_target(f"llvm -num-cores={THREADS}")
LANES = target.lanes("float32")
REGISTERS = target.vector_registers
VECS = 2
NR = VECS * LANES
MR = max(r for r in range(1, N + 1) if N % r == 0 and r * VECS + VECS + 1 <= REGISTERS)
print(f"target {target}: {LANES} float32 lanes, {REGISTERS} vector registers")
print(f"register tile: {MR} rows x {NR} columns = {MR * VECS} vector accumulators")

# %% [markdown]
# ## The yardstick: the machine's FMA peak
#
# `measure_machine` runs a minitc kernel that does nothing but independent FMAs in the widest
# vectors, on one thread and on `THREADS` threads. Its GFLOP/s is the best any matmul can do
# here; "% of peak" below is relative to the `THREADS`-thread figure. Steps before the
# parallel one run on one thread, so they can reach at most the one-thread peak.

# %%
machine = measure_machine(threads=sorted({1, THREADS}))
PEAK = machine.fma_gflops[THREADS]
PEAK_1 = machine.fma_gflops[1]
print(f"FMA peak: {PEAK_1:.1f} GFLOP/s on 1 thread, {PEAK:.1f} GFLOP/s on {THREADS} thread(s)")

# %% [markdown]
# ## The matmul and the bookkeeping
#
# `matmul()` defines a fresh `C = A @ B` for each step (a schedule belongs to one
# computation). `run_step` builds a schedule, checks its result against numpy, times it with
# `minitc.timing.measure` (warm-up, then the median of at least three samples) and
# keeps a row for the table. Slow steps get only those three samples.

# %%
rng = np.random.default_rng(0)
a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
expected = a @ b
c = np.empty_like(expected)
rows = []


def matmul():
    A = tc.placeholder((N, N), "float32", name="A")
    B = tc.placeholder((N, N), "float32", name="B")
    k = tc.reduce_axis(N, name="k")
    return tc.compute((N, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")


def record(step, seconds, threads):
    gflops = FLOPS / seconds / 1e9
    row = {
        "step": step,
        "ms": round(seconds * 1e3, 3),
        "gflops": round(gflops, 2),
        "pct_peak": round(100 * gflops / PEAK, 1),
        "cpu": f"{CPU['cpu']} ({CPU['llvm_cpu']})",
        "threads": threads,
        "size": N,
        "peak_gflops": round(PEAK, 1),
    }
    rows.append(row)
    print(f"{step}: {row['ms']:.3f} ms, {gflops:.1f} GFLOP/s, {row['pct_peak']:.1f}% of the {THREADS}-thread peak")


def run_step(step, s, threads=1):
    f = tc.build(s, target=target.string)
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-4, atol=1e-3)
    print("result matches numpy")
    timing = measure({step: lambda: f(a, b, out=c)}, repeats=5 if FAST else 10, budget_s=0.3 if FAST else 2.0)
    record(step, timing[step].median, threads)
    return f


# %% [markdown]
# ## Step 0: the naive loop nest
#
# Three loops, `k` innermost. For each element of `C` the inner loop walks a row of `A` (one
# new cache line every 16 floats) and a column of `B`: every step of `k` jumps `N` floats, a
# new cache line each time, of which one float is used. The loop is bound by memory latency,
# not arithmetic.

# %%
s = tc.Schedule(matmul())
print(tc.lower(s))
run_step("naive", s)

# %% [markdown]
# ## Step 1: blocking
#
# Split `i` and `j` into blocks of `BLOCK x BLOCK` (32, as in TVM's tutorial, rounded up to a
# multiple of the register tile) and move the reduction outside the block: for each `k`, the
# whole block of `C` is updated with row `k` of `B`. A block of `C` (4 KiB at 32 x 32) stays in
# the L1 cache while `k` runs, and the inner loop now walks rows of `B` and `C`, contiguously.
# `k` is split too (`k_i` of 4), which the unroll step uses later.
#
# At N = 1024 this helps less than it promises: the rows of a block are exactly 4 KiB apart,
# and addresses 4 KiB apart fall into the same set of the L1 cache, so the block's 32 rows
# compete for the few lines (ways) of one set and keep evicting each other.

# %%
BM = -(-32 // MR) * MR
BN = -(-32 // NR) * NR
KU = 4

C = matmul()
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
ko, ki = s.split(k, factor=KU)
s.reorder(io, jo, ko, ki, ii, ji)
print(tc.lower(s))
run_step("blocking", s)

# %% [markdown]
# ## Step 2: vectorise the inner loop
#
# The inner loop `j_i` now reads and writes consecutive floats. Split it by the number of
# lanes and vectorise the inner part: each iteration of `j_i_o` is one vector load of `B`, one
# broadcast of `A[i, k]`, one FMA and one vector load and store of `C`. The work per
# instruction grows by the lane count; memory traffic for `C` is now the limit, because each
# step of `k` loads and stores the whole block of `C` (32 x 32 floats are far more than the
# registers hold).

# %%
C = matmul()
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
ko, ki = s.split(k, factor=KU)
jv, jl = s.split(ji, factor=LANES)
s.reorder(io, jo, ko, ki, ii, jv, jl)
s.vectorize(jl)
print(tc.lower(s))
run_step("vectorize", s)

# %% [markdown]
# ## Step 3: loop permutation, `k` outside the register tile
#
# Cut the block into register tiles of `MR x NR` and move the tile loops (`i_i_o`, `j_i_o`)
# outside `k`. Now `k` runs over one small tile at a time: its `MR x VECS` accumulators fit
# the vector registers, so `C` is loaded once before the `k` loop and stored once after it,
# instead of once per `k`. LLVM sees this: the tile's elements are the same in every iteration
# of `k`, so it keeps them in registers (`f.asm` shows the FMAs on registers only), and it
# unrolls the small constant loops by itself. This is the largest single step.

# %%
C = matmul()
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
iio, iii = s.split(ii, factor=MR)
jio, jii = s.split(ji, factor=NR)
ko, ki = s.split(k, factor=KU)
jv, jl = s.split(jii, factor=LANES)
s.reorder(io, jo, iio, jio, ko, ki, iii, jv, jl)
s.vectorize(jl)
print(tc.lower(s))
f = run_step("loop permutation", s)
print(f"{f.asm.count('vfmadd')} FMA instructions in the kernel")

# %% [markdown]
# ## Step 4: array packing
#
# Each step of `k` reads `NR` floats of row `k` of `B`: the rows are `N` floats apart, so the
# tile's walk down `B` touches a new page every few rows and strides that map to the same
# cache sets (a multiple of 4 KiB apart). Packing copies the `K x BLOCK` panel of `B` that a
# column block reads into a small contiguous buffer first, so the micro-kernel walks it
# sequentially. `cache_read(B, "local", [C])` makes `C` read a copy of `B`; `compute_at` at
# the column-block loop copies only that block's panel, once per column block. For that the
# column blocks move outermost (`j_o` before `i_o`): every row block then reuses the panel
# while it is hot in L2. TVM's tutorial writes the packed layout as its own compute stage;
# minitc's template packs panels this way (`_pack` in `minitc/templates/gemm.py`).

# %%
C = matmul()
s = tc.Schedule(C)
i, j, k = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
iio, iii = s.split(ii, factor=MR)
jio, jii = s.split(ji, factor=NR)
ko, ki = s.split(k, factor=KU)
jv, jl = s.split(jii, factor=LANES)
s.reorder(jo, io, iio, jio, ko, ki, iii, jv, jl)
s.vectorize(jl)
B_local = s.cache_read("B", "local", [C])
s.compute_at(B_local, jo)
kx, jx = s.loops(B_local)
jxo, jxi = s.split(jx, factor=LANES)
s.vectorize(jxi)
print(tc.lower(s))
run_step("packing", s)

# %% [markdown]
# ## Step 5: write cache, accumulate in a register tile
#
# So far the tile accumulates into `C` itself: it is zeroed in memory, loaded, updated and
# stored, and LLVM has to prove that nothing else writes there to keep it in registers.
# `cache_write(C, "local")` computes `C` into a separate stage `C_local` and copies it out.
# `compute_at(C_local, j_i_o)` makes that stage one `MR x NR` tile per register tile: a
# small local buffer that starts at zero, accumulates over all of `k` and is copied to `C`
# once. The copy-out is vectorised like the tile. `cache_write` must come first, before the
# other primitives on `C`.

# %%
C = matmul()
s = tc.Schedule(C)
C_local = s.cache_write(C, "local")
i, j = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
iio, iii = s.split(ii, factor=MR)
jio, jii = s.split(ji, factor=NR)
jv, jl = s.split(jii, factor=LANES)
s.reorder(jo, io, iio, jio, iii, jv, jl)
s.vectorize(jl)
s.compute_at(C_local, jio)
ci, cj, k = s.loops(C_local)
ko, ki = s.split(k, factor=KU)
cv, cl = s.split(cj, factor=LANES)
s.reorder(ko, ki, ci, cv, cl)
s.vectorize(cl)
B_local = s.cache_read("B", "local", [C_local])
s.compute_at(B_local, jo)
kx, jx = s.loops(B_local)
jxo, jxi = s.split(jx, factor=LANES)
s.vectorize(jxi)
print(tc.lower(s))
run_step("write cache", s)

# %% [markdown]
# ## Step 6: unroll
#
# `unroll` marks the loops of the tile (`k_i`, the rows, the vectors of a row) and of the
# copy-out to be unrolled by minitc itself. Each accumulator then has a constant index, so
# the local tile becomes `MR x VECS` separate vector registers and the body of `k_o` is one
# straight run of `KU x MR x VECS` FMAs with no loop overhead. LLVM often does this already
# for loops this small (compare with step 5); unrolling in the schedule makes the kernel not
# depend on LLVM's heuristics, and is what the template does.

# %%
C = matmul()
s = tc.Schedule(C)
C_local = s.cache_write(C, "local")
i, j = s.loops(C)
io, ii = s.split(i, factor=BM)
jo, ji = s.split(j, factor=BN)
iio, iii = s.split(ii, factor=MR)
jio, jii = s.split(ji, factor=NR)
jv, jl = s.split(jii, factor=LANES)
s.reorder(jo, io, iio, jio, iii, jv, jl)
s.vectorize(jl)
s.unroll(iii)
s.unroll(jv)
s.compute_at(C_local, jio)
ci, cj, k = s.loops(C_local)
ko, ki = s.split(k, factor=KU)
cv, cl = s.split(cj, factor=LANES)
s.reorder(ko, ki, ci, cv, cl)
s.vectorize(cl)
s.unroll(ki)
s.unroll(ci)
s.unroll(cv)
B_local = s.cache_read("B", "local", [C_local])
s.compute_at(B_local, jo)
kx, jx = s.loops(B_local)
jxo, jxi = s.split(jx, factor=LANES)
s.vectorize(jxi)
print(tc.lower(s))
run_step("unroll", s)

# %% [markdown]
# ## Step 7: parallel
#
# The column blocks are independent: each packs its own panel of `B` and writes its own
# columns of `C`. `parallel(j_o)` shares them among `THREADS` threads (minitc's thread pool;
# `tc.set_num_threads` sets its size). With `N / BLOCK` column blocks there is enough work for
# a few cores; more cores would want the row blocks shared too. Only the first lines of the
# loop nest change, so only those are printed.

# %%
s.parallel(jo)
print("\n".join(str(tc.lower(s)).splitlines()[:4]))
run_step("parallel", s, threads=THREADS)

# %% [markdown]
# ## The template, numpy and torch
#
# `tc.build(C)` on a tensor, without a schedule, applies the operator's hand template from
# `minitc/templates/gemm.py` (`db=False` here: otherwise a tuned record of this workload from
# `minitc tune` would be used instead). It is the same structure as step 7, with tile sizes
# chosen by `pick_tiles` from the shape and the target: the register tile with the least
# padded work, and the widest panel of `B` that fits a quarter of the L2 cache.
# `tc.lower(C, target=...)` shows its loop nest.
#
# numpy calls a BLAS library (OpenBLAS in numpy's wheels) and torch its own (MKL in the x86
# wheels); both are limited to `THREADS` threads. The three are timed interleaved, so machine noise affects them alike.

# %%
A = tc.placeholder((N, N), "float32", name="A")
B = tc.placeholder((N, N), "float32", name="B")
C = tc.ops.matmul(A, B)
print(tc.lower(C, target=target.string, db=False))
template = tc.build(C, target=target.string, db=False)
np.testing.assert_allclose(template(a, b), expected, rtol=1e-4, atol=1e-3)
print("template result matches numpy")

from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(limits=THREADS, user_api="blas")
impls = {"template": lambda: template(a, b, out=c), "numpy": lambda: np.matmul(a, b, out=c)}
try:
    import torch

    torch.set_num_threads(THREADS)
    ta, tb, tcc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
    impls["torch"] = lambda: torch.matmul(ta, tb, out=tcc)
except ImportError:
    print("torch is not installed: no torch row")
timings = measure(impls, repeats=5 if FAST else 10, budget_s=0.3 if FAST else 2.0)
for name, timing in timings.items():
    record(name, timing.median, THREADS)

# %% [markdown]
# ## The climb
#
# The table and the plot put the steps side by side (the plot's GFLOP/s axis is logarithmic:
# the naive loop is two to three orders of magnitude below the peak). Blocking and
# vectorising gain a factor of a few at most, because the block of `C` still goes through memory
# at every step of `k`; the register tile (step 3) and the packed panel (step 4) are where
# most of the speed comes from, and threads multiply what one core does. The table is also
# written as JSON, for the docs to quote (`pct_peak` is always relative to the
# `THREADS`-thread peak, `peak_gflops`).

# %%
print(f"\nmatmul {N}^3 float32 on {CPU['cpu']} ({CPU['llvm_cpu']}), FMA peak {PEAK:.1f} GFLOP/s at {THREADS} thread(s)")
print(f"{'step':18s} {'threads':>7s} {'ms':>10s} {'GFLOP/s':>9s} {'% peak':>7s}")
for row in rows:
    print(f"{row['step']:18s} {row['threads']:7d} {row['ms']:10.3f} {row['gflops']:9.1f} {row['pct_peak']:7.1f}")
with open(OUT / "03-matmul-climb.json", "w") as fh:
    json.dump(rows, fh, indent=1)
print(f"saved {OUT / '03-matmul-climb.json'}")

# %%
import matplotlib.pyplot as plt  # noqa: E402

steps = [r for r in rows if r["step"] not in ("numpy", "torch")]
refs = [r for r in rows if r["step"] in ("numpy", "torch")]
fig, ax = plt.subplots(figsize=(9, 4.5))
bars = ax.bar([r["step"] for r in steps], [r["gflops"] for r in steps], color="tab:blue")
ax.bar_label(bars, fmt="%.1f", fontsize=8)
ax.axhline(PEAK, color="black", label=f"FMA peak, {THREADS} thread(s): {PEAK:.0f}")
if THREADS > 1:
    ax.axhline(PEAK_1, color="black", linestyle=":", label=f"FMA peak, 1 thread: {PEAK_1:.0f}")
for r, color in zip(refs, ("tab:orange", "tab:green")):
    ax.axhline(r["gflops"], color=color, linestyle="--", label=f"{r['step']}: {r['gflops']:.0f}")
ax.set_yscale("log")
ax.set_ylabel("GFLOP/s (log scale)")
ax.set_title(f"matmul {N}^3 float32, {CPU['cpu']} ({CPU['llvm_cpu']})")
ax.tick_params(axis="x", rotation=30)
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "03-matmul-climb.png", dpi=120)
print(f"saved {OUT / '03-matmul-climb.png'}")

# %% [markdown]
# ## What to try next
#
# - Change `VECS` or `MR` and watch the register tile spill (too many accumulators) or starve
#   the FMA units (too few).
# - Print `f.asm` of step 3 and step 6 and find the inner loop: a run of `vfmadd` instructions
#   on registers, with one load of `B` per vector and one broadcast of `A` per row.
# - Tutorial 5 lets a search pick the tile sizes instead of deriving them by hand.
