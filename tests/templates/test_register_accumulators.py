"""A micro-kernel's accumulators stay in registers wherever the program keeps them in memory
between k blocks (the GEMM's BLIS order, kc > 0, accumulating into its output). LLVM promotes
such an accumulator to a register only while the loop has few memory accesses
(minitc/target/llvm_state.py raises the limit); below it, an unrolled 14 x 2-vector tile loaded
and stored every accumulator at every FMA and ran 4.6x slower on the Intel Xeon. The
assembly is made for the recorded hosts' descriptions, so nothing depends on this host."""

from __future__ import annotations

import re

import pytest
from helpers import experiment

import minitc as tc

mca = experiment("mca_microkernel")
HOSTS = ["intel-sapphirerapids-kvm.json", "amd-zen4.json", "intel-haswell-avx2.json"]
STORE = re.compile(r"^vmov(u|a)ps\s+%[xyz]mm\d+,\s*-?\w*\(")


def _matmul(M, K, N):
    A = tc.placeholder((M, K), "float32", name="A")
    B = tc.placeholder((K, N), "float32", name="B")
    k = tc.reduce_axis(K, name="k")
    return tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")


@pytest.mark.parametrize("fixture", HOSTS, ids=lambda f: f.split(".")[0])
def test_the_blocked_k_micro_kernel_keeps_its_accumulators_in_registers(fixture):
    target = mca.described_target(fixture, None)
    out = _matmul(196, 1024, 256)  # ResNet-50's 1x1 layer at 14 x 14 as a GEMM: the k-blocked order
    params = mca.template_params(out, target)
    kc = params["kc"] or 256  # where this description's default needs no k blocks, ask for them
    body = mca.fma_loops(mca.assembly(out, target, kc=kc))[0]
    counts = mca.loop_counts(body)
    stores = [i for i in body if STORE.match(i)]
    assert counts["fmas"] >= 8 and not stores and counts["stack_accesses"] == 0, (params, counts, stores[:4])
    assert counts["accumulators"] >= min(params["mr"] * params["nr"] // target.lanes("float32"), 8), counts
