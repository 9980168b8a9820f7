"""The GEMM micro-kernels the templates choose for CPUs we cannot run on stay FMA-bound, by
llvm-mca's static model (experiments/mca_microkernel.py, docs/hardware.md): a change to the
analytical model (minitc/templates/gemm_blocking.py) that starves the FMAs of an Intel server or
a Zen 4 is caught without either machine. Targets and descriptions are pinned (the recorded
hosts of tests/fixtures/hosts), so nothing here depends on this host's cpu."""

from __future__ import annotations

import pytest
from helpers import experiment

mca = experiment("mca_microkernel")
TOOLS = mca.mca_tools()
needs_mca = pytest.mark.skipif(not TOOLS, reason="no llvm-mca on the PATH (Debian: apt-get install llvm-19)")

# (fixture, llvm-mca -mcpu, least LLVM version with that model) -> least predicted fraction of
# the FMA peak per workload. Intel: Skylake-server's model (two 512-bit FMA ports, two loads a
# cycle, as the Sapphire Rapids fixture measured; LLVM 19's own sapphirerapids model has one 512-bit
# FMA port). bmm's 8 x 2 tile (16 accumulators that divide its 64 columns; 3 x 4 before
# 2026-12-08) predicts 88%: its eight broadcasts' addresses and the loop's counter share ports 0
# and 5 with the FMAs. On the Sapphire Rapids itself it ran faster than 3 x 4 (1.34x torch
# against 0.97x, 2 threads), so the bound for it is 0.85. Zen 4: LLVM's Znver4 model runs each 512-bit broadcast from
# memory on FP1 beside the FMAs, which bounds a tile of v vectors near v / (v + 1/2): 6 x 4
# predicts 86%, 8 x 3 79%, 3 x 4 83%; a tile of 2 vectors (6 x 2: 73%) or spills fall below.
# The convolution's 14-lane input rows (56 columns) as 8 + 4 + 2 loads and two shuffles each put
# port 5 at 71%; as one masked load, 92%.
CASES = {
    ("intel-sapphirerapids-kvm.json", "skylake-avx512", 14): {"matmul-1024": 0.95, "dense-bert-ffn-gelu": 0.95,
                                                              "bmm-bert": 0.85, "conv-resnet": 0.9},
    ("amd-zen4.json", "znver4", 17): {"matmul-1024": 0.85, "dense-bert-ffn-gelu": 0.75, "bmm-bert": 0.75},
}  # fmt: skip


def _tool(version: int):
    newer = [path for v, path in sorted(TOOLS.items()) if v >= version]
    if not newer:
        pytest.skip(f"llvm-mca {max(TOOLS)} has no model of this cpu (needs LLVM {version}+)")
    return newer[-1]


@needs_mca
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].split(".")[0])
def test_the_micro_kernel_of_a_recorded_machine_is_fma_bound(case):
    fixture, mca_cpu, version = case
    tool = _tool(version)
    target = mca.described_target(fixture, None)
    assert target.hardware.source == "measured" and target.num_cores == 2  # the fixture's, not this host's
    for name, least in CASES[case].items():
        out = mca.workload(name, target.lanes("float32"))
        body = mca.fma_loops(mca.assembly(out, target))[0]
        counts = mca.loop_counts(body)
        assert counts["vector_bits"] == 512 and counts["stack_accesses"] == 0, (name, counts)
        assert counts["accumulators"] >= target.hardware.fma_chains, (name, counts)  # latency x pipes hidden
        m = mca.run_mca(tool, mca_cpu, body, iterations=50)
        fraction = counts["fmas"] / mca.model_fma_per_cycle(tool, mca_cpu, 512) / (m["total_cycles"] / m["iterations"])
        assert fraction >= least, f"{fixture} {name}: llvm-mca ({mca_cpu}) predicts {fraction:.0%} of the FMA peak"


def test_the_micro_kernel_is_found_in_the_assembly():
    """The innermost loop whose FMAs accumulate, not an epilogue's polynomial (erf's, in GELU)."""
    body = [
        "vbroadcastss (%rdi), %zmm2", "vmovups (%rsi), %zmm3", "vfmadd231ps %zmm2, %zmm3, %zmm0",
        "vfmadd231ps %zmm2, %zmm3, %zmm1", "addq $4, %rdi", "jne .LBB0_2",
    ]  # fmt: skip
    poly = ["vmulps %zmm4, %zmm4, %zmm5", "vfmadd213ps %zmm6, %zmm5, %zmm7", "vfmadd213ps %zmm6, %zmm7, %zmm5"]
    asm = "\n".join([".LBB0_1:", *poly, *poly, "jne .LBB0_1", ".LBB0_2:", *body])
    found = mca.fma_loops(asm)[0]
    assert found == body and mca.accumulators(found) == {"zmm0", "zmm1"}
    counts = mca.loop_counts(found)
    assert (counts["fmas"], counts["loads"], counts["broadcasts"], counts["vector_bits"]) == (2, 1, 1, 512)
