"""Software prefetch of the GEMM micro-kernel's B panel (issue 41): the decision `l2` of the
GEMM templates, its analytical distance and where the design space offers it.

The micro-kernel reads, per k step, one row of nr columns of B's packed panel (nr / L vectors),
which lives in L2 (gemm_blocking: the panel takes a quarter of it). The libraries' Skylake-X
and Sapphire Rapids kernels (BLIS's sgemm_skx, oneDNN's) prefetch that stream into L1 a few
k steps ahead; minitc's `l2 = d` does the same: in each k step, prefetch the lines of B's row
k + d (llvm.prefetch, locality 3: into L1).

**Distance.** A k step of an mr x nv tile takes t_k = mr x nv / F cycles at the FMA peak (F:
FMAs issued per cycle, `hw.fma_per_cycle`). A line asked for d steps ahead arrives in time
when d x t_k covers the L2's load-to-use latency, so

    d = ceil(L2 latency / t_k) = ceil(lat_L2 x F / (mr x nv))

lat_L2 is the host's measured load-to-use latency (`hw.l2_latency_cycles`, a pointer chase in
target/calibrate.py: 16 cycles on a Zen 5); a description without it (a table target, a host
recorded before the measurement) takes L2_LATENCY_CYCLES, the published figure of the server
cores (Sapphire Rapids 16, Zen 4 14).
The space also offers 2d and 4d: a busy L2 answers later than its idle latency.

**Where the space offers it: every CPU description.** The slot's default is 0 (off: no
measurement here found it better, docs/hardware.md), its candidates `candidates` (the
analytical distance, twice and four times it), so the evolutionary search and the language
model can find the libraries' prefetching kernels on the machines where they pay. Sentences
recorded before the slot existed (lm/data) still replay: the language reads a missing `l2` as
0, the program they measured (the `l2` Param's `before`, gemm.py). IN_DESIGN_SPACE = False
takes the slot out of every space. The name `l2` is a word the vocabulary already has (the hardware
line's), so sentences with the slot need no new token.
"""

from __future__ import annotations

import inspect
import math

# A template parameter with this default is a design-space slot only where the template's
# @defaults gives it a value (autotune/space.py skips a parameter without one).
ABSENT = inspect.Parameter.empty
L2_LATENCY_CYCLES = 16  # load-to-use, in core cycles: Sapphire Rapids 16, Zen 4 and 5 14
LOCALITY = 3  # llvm.prefetch's "keep in all levels": into L1
IN_DESIGN_SPACE = True  # the l2 slot in the GEMM templates' spaces (see the module docstring)


def offered(hw) -> bool:
    """Whether the GEMM templates' design spaces on this description have the `l2` slot."""
    return IN_DESIGN_SPACE


def l2_latency(hw) -> float:
    """The L2's load-to-use latency in cycles: measured where the description has it, else
    the constant."""
    return hw.l2_latency_cycles or L2_LATENCY_CYCLES


def distance(hw, mr: int, vecs: int) -> int:
    """k steps ahead that cover the L2's latency at the micro-kernel's pace (the formula above)."""
    step_cycles = mr * vecs / max(hw.fma_per_cycle, 1e-9)
    return max(1, math.ceil(l2_latency(hw) / step_cycles))


def candidates(hw, mr: int, vecs: int) -> tuple:
    """The slot's values: off, the analytical distance, twice and four times it."""
    d = distance(hw, mr, vecs)
    return (0, d, 2 * d, 4 * d)


def ahead(value) -> int:
    """The template parameter as a distance: 0 (off) when absent."""
    return 0 if value is ABSENT or value is None else value


def prefetch_b(s, acc: str, k_loop, b_stage: str, d: int) -> None:
    """In each step of the micro-kernel's innermost k loop (unrolled or not: the k index is
    linear in it), prefetch B's row d steps ahead."""
    s.prefetch(k_loop, b_stage, ahead=d, locality=LOCALITY)
