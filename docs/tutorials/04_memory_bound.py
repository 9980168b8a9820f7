# %% [markdown]
# # 4. Memory-bound kernels and the roofline
#
# A matmul does O(n) arithmetic per element it loads, so its speed is set by the vector units.
# Most other operators in a network do a handful of operations per element: an add, an
# activation, a row sum, a softmax. Those are **memory-bound**: the CPU finishes the
# arithmetic long before the next cache line arrives, and the best a schedule can do is move
# each byte once, at the full bandwidth of the memory system, with enough threads in flight.
#
# This tutorial measures the machine's two limits (the FMA peak and the STREAM-triad
# bandwidth), computes each kernel's arithmetic intensity, times four kernels (naive loop
# nest, minitc's template, numpy, torch), reports the bandwidth each achieves, and draws the
# roofline. On the way it shows why a reduction needs care to vectorize and how softmax's
# three passes are made to read memory once.
#
# All numbers depend on the CPU and on what else it is running; the tutorial prints which CPU
# it measured.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

import minitc as tc
from minitc.benchmarks.machine import host_cpu, measure_machine
from minitc.timing import measure, thread_limit

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
OUT = Path(os.environ.get("MINITC_TUTORIAL_OUT", "tutorial-output"))
OUT.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)

THREADS = tc.get_num_threads()
target = tc.target.parse_target("llvm")
print(f"host: {host_cpu()['cpu']} ({host_cpu()['llvm_cpu']}), {THREADS} threads")
print(
    f"vector width: {target.vector_bits} bits ({target.lanes('float32')} float32 lanes); "
    f"memory-bound templates use {target.preferred_vector_bits}-bit vectors"
)

# %% [markdown]
# ## The machine's two roofs
#
# `measure_machine` runs two probe kernels. The FMA kernel keeps several independent chains of
# vector fused multiply-adds busy on every thread and never touches memory: its GFLOP/s (an
# FMA counts as 2 flops) is the compute roof. The STREAM triad `a[i] = b[i] + s * c[i]` over
# three 64 MiB arrays (far larger than any cache) measures how many bytes per second the
# memory system delivers: the bandwidth roof. Their ratio is the **ridge point**: a kernel
# that does fewer flops per byte than this cannot be compute-bound, whatever its schedule.

# %%
machine = measure_machine(threads=(THREADS,))
PEAK_GFLOPS = machine.fma_gflops[THREADS]
TRIAD_GBPS = machine.triad_gbps[THREADS]
RIDGE = PEAK_GFLOPS / TRIAD_GBPS
print(f"FMA peak      {PEAK_GFLOPS:8.1f} GFLOP/s ({THREADS} threads)")
print(f"triad         {TRIAD_GBPS:8.1f} GB/s")
print(f"ridge point   {RIDGE:8.1f} flop/byte")
if machine.background_cpus and machine.background_cpus > 0.3:
    print(f"note: other processes kept {machine.background_cpus:.1f} CPUs busy meanwhile; peaks and timings may be low")

# %% [markdown]
# ## The kernels and their arithmetic intensity
#
# Arithmetic intensity is flops per byte of memory traffic. For the traffic we count what the
# kernel cannot avoid: each input read once and each output written once, 4 bytes per float32
# (the triad is counted the same way). For the flops we count the formula's operations, with
# `exp` as about 20 and `erf` as about 25: roughly the multiply-adds of the polynomial
# approximations minitc generates for them. The estimates are rough, but it does not matter
# here: every kernel lands far left of the ridge point.
#
# | kernel | formula | bytes / element | flops / element |
# |---|---|---|---|
# | add | `x + y` | 12 (read 2, write 1) | 1 |
# | gelu | `0.5 x (1 + erf(x / sqrt 2))` | 8 | 4 + erf |
# | row sum | `sum_j x[i, j]` | 4 (the output is one value per row) | 1 |
# | softmax | `exp(x - max) / sum exp(x - max)` per row | 8 | max, sub, exp, sum, div |

# %%
EXP_FLOPS, ERF_FLOPS = 20, 25
ROWS, COLS = (1024, 2048) if FAST else (4096, 4096)
X = tc.placeholder((ROWS, COLS), "float32", name="X")
Y = tc.placeholder((ROWS, COLS), "float32", name="Y")
x = rng.standard_normal((ROWS, COLS)).astype("float32")
y = rng.standard_normal((ROWS, COLS)).astype("float32")

KERNELS = {  # name: (output tensor, input arrays, bytes / element, flops / element)
    "add": (tc.ops.add(X, Y), (x, y), 12, 1),
    "gelu": (tc.ops.gelu(X), (x,), 8, 4 + ERF_FLOPS),
    "row sum": (tc.ops.sum(X, axis=-1), (x,), 4, 1),
    "softmax": (tc.ops.softmax(X), (x,), 8, 4 + EXP_FLOPS),
}
REFERENCES = {
    "add": tc.ops.reference.add,
    "gelu": tc.ops.reference.gelu,
    "row sum": lambda a: tc.ops.reference.sum(a, axis=-1),
    "softmax": tc.ops.reference.softmax,
}
ELEMENTS = ROWS * COLS
print(f"shape {ROWS} x {COLS}: {ELEMENTS * 4 / 2**20:.0f} MiB per array")
print(f"{'kernel':10s} {'bytes/elem':>11s} {'flops/elem':>11s} {'flop/byte':>10s}")
for name, (_, _, nbytes, flops) in KERNELS.items():
    print(f"{name:10s} {nbytes:11d} {flops:11d} {flops / nbytes:10.2f}")

# %% [markdown]
# In fast mode (`MINITC_TUTORIAL_FAST=1`) the arrays are a few MiB and fit in the L3 cache,
# so kernels can beat the triad's DRAM bandwidth; the full-size run (64 MiB per array) is the
# honest comparison.
#
# ## Elementwise kernels: the loop vectorizer already helps
#
# The naive loop nest of `add` is the obvious double loop. Because its inner loop is
# contiguous, its iterations independent, and its pointers declared non-aliasing, LLVM's loop
# vectorizer turns it into vector code on its own: count the vector instructions in its
# assembly (`v...ps` works on packed floats, `v...ss` on a single one). The template adds
# what LLVM does not: a parallel loop over row blocks, so every core has loads in flight, and
# vectors of the target's preferred width for memory-bound code, four registers per step.


# %%
def vector_ops(asm: str, op: str) -> tuple:
    """(packed, scalar) counts of the float32 instruction `op` (add, mul, ...) in assembly."""
    lines = asm.splitlines()
    return sum(f"v{op}ps" in ln for ln in lines), sum(f"v{op}ss" in ln for ln in lines)


add_out = KERNELS["add"][0]
print(tc.lower(tc.Schedule(add_out)))
naive_add = tc.build(tc.Schedule(add_out))
print("naive add: %d packed, %d scalar vaddps/vaddss" % vector_ops(naive_add.asm, "add"))
print(tc.lower(add_out, target="llvm", db=False))  # the template's loop nest

# %% [markdown]
# ## Reductions: why vectorizing them needs care
#
# The naive row sum is `s = s + x[i, j]` for `j = 0, 1, 2, ...`: one long chain in which each
# add waits for the previous one. To use vector lanes, the sum must be computed in another
# order: lane `l` adds up `x[i, l], x[i, l + L], x[i, l + 2L], ...`, and the `L` lane sums
# are added at the end. In exact arithmetic that is the same number. In floating point it is
# not, because `(a + b) + c != a + (b + c)` in general, so a compiler may not reassociate on
# its own (C compilers do only under `-ffast-math`). The naive kernel's assembly shows it:
# LLVM left the reduction scalar.

# %%
sum_out = KERNELS["row sum"][0]
print(tc.lower(tc.Schedule(sum_out)))
naive_sum = tc.build(tc.Schedule(sum_out))
print("naive row sum: %d packed, %d scalar vaddps/vaddss" % vector_ops(naive_sum.asm, "add"))

# %% [markdown]
# minitc reassociates explicitly, in the schedule, with `rfactor` (tutorial 2): the template
# splits the row into `L` columns of partial sums, makes them a spatial axis of a new stage
# `sum_rf`, and vectorizes it. Each row then streams through several independent vector
# accumulators (contiguous loads, no dependency between lanes), and a short horizontal step
# adds the `L` partials, with a tile of rows side by side so those scalar chains overlap too.
# Because the schedule says so, the result is deterministic: the same order on every run and
# every thread count.

# %%
print(tc.lower(sum_out, target="llvm", db=False))
template_sum = tc.build(sum_out, db=False)
print("template row sum: %d packed, %d scalar vaddps/vaddss" % vector_ops(template_sum.asm, "add"))

# %% [markdown]
# A different order gives slightly different bits, not a worse answer. Against a float64
# sum, the error of the left-to-right chain grows with the row length; the lane-wise partial
# sums (and numpy's pairwise summation) keep shorter chains and are usually closer.

# %%
exact = x.astype(np.float64).sum(axis=1)
for name, value in {
    "naive, left to right": naive_sum(x),
    "template, rfactor lanes": template_sum(x),
    "numpy, pairwise": x.sum(axis=1),
}.items():
    print(f"{name:26s} max |error| vs float64: {np.abs(value - exact).max():.2e}")
np.testing.assert_allclose(template_sum(x), exact, rtol=1e-4, atol=1e-3)

# %% [markdown]
# ## Softmax: three passes over a row
#
# Softmax of a row needs its maximum (pass 1), then `exp(x - max)` and their sum (pass 2),
# then each exponential divided by the sum (pass 3). `tc.ops.softmax` writes these as four
# stages. The naive loop nest computes each stage over the whole tensor before the next one
# starts, so the exponentials go to a full-size temporary: `x` is read twice, the temporary
# written once and read twice, the output written once. That is 24 bytes per element, three
# times the 8 that must move.

# %%
softmax_out = KERNELS["softmax"][0]
print(tc.lower(tc.Schedule(softmax_out)))

# %% [markdown]
# The template computes the statistics per tile of a few rows, inside the output's parallel
# row loop (`compute_at`). A tile's rows are read from memory by the max pass; the exp pass
# reads them again while they are still in the L1 or L2 cache, and writes the exponentials
# into a tile-sized buffer that stays in L1; the sum and the division read that buffer. From
# memory's point of view, each element is read once and written once. The max and the sum are
# row reductions, vectorized with `rfactor` as above.

# %%
print(tc.lower(softmax_out, target="llvm", db=False))

# %% [markdown]
# ## Timing: naive, template, numpy, torch
#
# Each kernel four ways, every minitc kernel first checked against numpy's reference. All
# libraries get the same thread count (`thread_limit`); numpy's elementwise functions run
# on one thread whatever the setting. The numpy softmax is the usual three-line version with
# temporaries; numpy has no `erf`, so gelu has no numpy row. Bandwidth is the minimum traffic
# from the table above divided by the median time: for the naive softmax, which moves three
# times as much, it is an "effective" bandwidth. `tc.build(out)` would use a tuned record of
# this workload if the records database held one; `db=False` asks for the template itself.

# %%
tx, ty = torch.from_numpy(x), torch.from_numpy(y)
full = np.empty((ROWS, COLS), "float32")
rows = np.empty(ROWS, "float32")
t_full, t_rows = torch.from_numpy(full), torch.from_numpy(rows)


def numpy_softmax(a, out):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return np.divide(e, e.sum(axis=1, keepdims=True), out=out)


BASELINES = {
    "add": {"numpy": lambda: np.add(x, y, out=full), "torch": lambda: torch.add(tx, ty, out=t_full)},
    "gelu": {"torch": lambda: torch.ops.aten.gelu.out(tx, out=t_full)},
    "row sum": {"numpy": lambda: np.sum(x, axis=1, out=rows), "torch": lambda: torch.sum(tx, dim=1, out=t_rows)},
    "softmax": {
        "numpy": lambda: numpy_softmax(x, full),
        "torch": lambda: torch.ops.aten._softmax.out(tx, -1, False, out=t_full),
    },
}

results = {}  # (kernel, implementation) -> seconds
with thread_limit(THREADS):
    for name, (out, args, nbytes, flops) in KERNELS.items():
        result = rows if out.shape == (ROWS,) else full
        kernels = {"naive": tc.build(tc.Schedule(out)), "template": tc.build(out, db=False)}
        expected = REFERENCES[name](*args)
        for impl, f in kernels.items():
            atol = 1e-3 if name == "row sum" else 1e-5  # sums of COLS terms, in another order
            np.testing.assert_allclose(f(*args), expected, rtol=1e-4, atol=atol)
        print(f"{name}: naive and template match numpy")
        calls = {impl: (lambda f=f: f(*args, out=result)) for impl, f in kernels.items()}
        calls.update(BASELINES[name])
        timings = measure(calls, repeats=3 if FAST else 10, budget_s=0.2 if FAST else 1.0)
        for impl, t in timings.items():
            results[name, impl] = t.median

print(f"\n{ROWS} x {COLS} float32, {THREADS} threads, {host_cpu()['cpu']} ({host_cpu()['llvm_cpu']})")
print(f"triad {TRIAD_GBPS:.1f} GB/s, FMA peak {PEAK_GFLOPS:.0f} GFLOP/s")
print(f"{'kernel':9s} {'implementation':15s} {'ms':>8s} {'GB/s':>7s} {'% triad':>8s} {'GFLOP/s':>8s}")
for (name, impl), seconds in results.items():
    _, _, nbytes, flops = KERNELS[name]
    gbps = nbytes * ELEMENTS / seconds / 1e9
    gflops = flops * ELEMENTS / seconds / 1e9
    print(f"{name:9s} {impl:15s} {seconds * 1e3:8.3f} {gbps:7.1f} {100 * gbps / TRIAD_GBPS:7.0f}% {gflops:8.1f}")

# %% [markdown]
# How to read it:
#
# - `add` and `gelu`: the naive nest is already vectorized by LLVM, and the template mostly
#   adds threads, so the two are close whenever one thread nearly saturates memory.
# - Row sum: the template's explicit reassociation is worth several times the naive chain of
#   dependent adds, which is limited by the latency of one add per element, not by memory.
# - Softmax: the naive nest pays for its full-size temporary (and runs on one thread); the
#   template, reading each row from memory once, gets close to what `add` gets.
# - More than 100% of the triad is possible. A store to memory first reads the cache line it
#   writes (write-allocate), so the triad really moves 16 bytes per element, not the 12 it is
#   credited with; a kernel that mostly reads, like the row sum, pays less of that tax.
#
# Small shapes in fast mode run from cache, and on a shared machine the parallel rows vary
# from run to run: when another process holds a core, a library whose threads wait for each
# other by spinning (torch's OpenMP pool) can take milliseconds for a call that normally
# takes a fraction of one.
#
# ## The roofline
#
# The roofline plots attainable GFLOP/s against arithmetic intensity, both on log scales: the
# slanted roof is `intensity x triad bandwidth`, the flat one the FMA peak, and they meet at
# the ridge point. A kernel is a point at (its intensity, the GFLOP/s it achieved). All four
# sit on the slanted part: their ceiling is bandwidth, and the distance from a point up to the
# roof is how much of the memory system a schedule leaves unused. Naive kernels are drawn
# hollow, templates filled.

# %%
fig, ax = plt.subplots(figsize=(7, 5))
intensity = np.logspace(-2, 3, 200)
ax.plot(intensity, np.minimum(PEAK_GFLOPS, intensity * TRIAD_GBPS), "k-", lw=2, label="roofline")
ax.axvline(RIDGE, color="grey", ls=":", lw=1)
ax.text(RIDGE * 1.1, PEAK_GFLOPS * 0.5, f"ridge {RIDGE:.1f} flop/B", color="grey")
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
for color, (name, (_, _, nbytes, flops)) in zip(colors, KERNELS.items()):
    ai = flops / nbytes
    for impl, face in (("naive", "none"), ("template", color)):
        gflops = flops * ELEMENTS / results[name, impl] / 1e9
        label = f"{name} ({impl})"
        ax.plot(ai, gflops, "o", ms=9, mec=color, mfc=face, label=label)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("arithmetic intensity (flop / byte)")
ax.set_ylabel("GFLOP/s")
ax.set_title(f"Roofline, {host_cpu()['llvm_cpu']}, {THREADS} threads, {ROWS}x{COLS} float32")
ax.legend(fontsize=8, loc="lower right")
ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
path = OUT / "04-roofline.png"
fig.savefig(path, dpi=120)
plt.close(fig)
print(f"saved {path}")

# %% [markdown]
# The lesson for scheduling memory-bound code: count the bytes first. Fuse stages so that
# intermediates stay in cache (`compute_inline`, `compute_at`), reassociate reductions
# deliberately (`rfactor`) so that loads are contiguous and lanes independent, and use enough
# threads to keep the memory system busy. Extra arithmetic is nearly free, up to the ridge.
