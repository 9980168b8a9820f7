"""The bf16 GEMM (minitc/templates/gemm_bf16.py; its IR: backends/llvm/gemm_bf16.py and
gemm_amx.py): the instruction path chosen from recorded target descriptions (AMX tiles where
the description has AMX-BF16 and the shape fits, vdpbf16ps where it has AVX-512 BF16, the
exact float32 FMA emulation elsewhere) with its assembly checked, the VNNI-2 packing, and runs
against a float64 reference: the emulation on any host, vdpbf16ps and AMX only where the host
has them (skipped otherwise); vdpbf16ps and the emulation bitwise equal."""

import re

import numpy as np
import pytest
import torch
from helpers import lowp_sample, recorded_target, table_target

from minitc.errors import BuildError, DTypeError, ShapeError
from minitc.target import parse_target
from minitc.target.cpu import enabled_features
from minitc.templates.gemm_bf16 import bf16_gemm, choose_path

HOST_HAS_BF16 = "avx512bf16" in enabled_features(parse_target("llvm"))
HOST_HAS_AMX = "amx-bf16" in enabled_features(parse_target("llvm"))


def inner_loop(asm: str) -> str:
    """The assembly of the loop that holds the most instructions of the micro-kernel's kind."""
    loops = re.split(r"\n\.LBB\d+_\d+:", asm)
    return max(loops, key=lambda body: body.count("vdpbf16ps") + body.count("vfmadd"))


@pytest.mark.parametrize(
    "describe, path",
    [
        (lambda: recorded_target("intel-sapphirerapids-kvm.json"), "amx"),
        (lambda: recorded_target("amd-zen4.json"), "dpbf16"),
        (lambda: table_target("skylake-avx512"), "fma"),
        (lambda: recorded_target("intel-haswell-avx2.json"), "fma"),
    ],
)
def test_path_and_assembly_follow_the_description(describe, path):
    target = describe()
    assert choose_path(target, 64, 128, 64) == path
    if path == "amx":  # tile configuration, loads, 4 tile products per 32 of k, stores
        asm = bf16_gemm(64, 128, 64, target).asm
        assert "ldtilecfg" in asm and "tilerelease" in asm
        assert asm.count("tdpbf16ps") % 4 == 0 and asm.count("tileloadd") >= 4 and asm.count("tilestored") % 4 == 0
        # a shape off AMX's 32 x 32 blocks takes the AVX-512 BF16 kernel on the same description
        assert choose_path(target, 20, 128, 64) == "dpbf16"
        return
    g = bf16_gemm(20, 128, 64, target)
    loop = inner_loop(g.asm)
    if path == "dpbf16":  # 6 rows x 4 vectors of 16 columns per pair of k (LLVM may unroll)
        n = loop.count("vdpbf16ps")
        assert n >= 24 and n % 24 == 0 and "vfmadd" not in loop
    else:
        assert "vdpbf16ps" not in g.asm and "vfmadd231ps" in loop
        assert ("zmm" in loop) == ("avx512f" in enabled_features(target))


def test_packing_is_pair_interleaved():
    g = bf16_gemm(4, 32, 6, "llvm", path="fma", mr=2, nr=16)
    B = np.arange(6 * 32, dtype=np.float32).reshape(6, 32).astype("bfloat16")
    bp = g.pack(B)
    assert bp.shape == (2, 3, 16, 2)
    for p, k2, c, e in [(0, 0, 0, 1), (1, 2, 5, 0), (1, 1, 15, 1)]:
        assert bp[p, k2, c, e] == B[2 * k2 + e, 16 * p + c]


@pytest.mark.parametrize("M, N, K", [(13, 64, 40), (6, 96, 2), (1, 16, 130)])
def test_emulation_runs_anywhere_and_matches(M, N, K):
    A, B = lowp_sample((M, K), "bfloat16", 1), lowp_sample((K, N), "bfloat16", 2)
    g = bf16_gemm(M, N, K, "llvm", path="fma")
    C = g(A, g.pack(B))
    assert C.dtype == np.float32
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HOST_HAS_BF16, reason="the host has no AVX-512 BF16 (vdpbf16ps)")
def test_vdpbf16ps_runs_and_equals_the_emulation_bitwise():
    M, N, K = 29, 128, 96
    A, B = lowp_sample((M, K), "bfloat16", 3), lowp_sample((K, N), "bfloat16", 4)
    fast, exact = bf16_gemm(M, N, K, "llvm"), bf16_gemm(M, N, K, "llvm", path="fma")
    assert fast.path == "dpbf16"
    C = fast(A, fast.pack(B))
    np.testing.assert_array_equal(C, exact(A, exact.pack(B)))
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HOST_HAS_AMX, reason="the host has no AMX-BF16 (tdpbf16ps)")
def test_amx_runs():
    M, N, K = 64, 96, 128
    A, B = lowp_sample((M, K), "bfloat16", 5), lowp_sample((K, N), "bfloat16", 6)
    g = bf16_gemm(M, N, K, "llvm")
    assert g.path == "amx"
    # float32 sums in another order than the emulation's: equal to float32 rounding
    np.testing.assert_allclose(g(A, g.pack(B)), A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_torch_bfloat16_inputs():
    A, B = torch.randn(7, 24).to(torch.bfloat16), torch.randn(24, 32).to(torch.bfloat16)
    g = bf16_gemm(7, 32, 24, "llvm", path="fma")
    C = g(A, g.pack(B))
    assert isinstance(C, torch.Tensor) and C.dtype == torch.float32
    torch.testing.assert_close(C, A.double() @ B.double(), rtol=1e-5, atol=1e-5, check_dtype=False)


def test_bad_shapes_and_dtypes():
    with pytest.raises(BuildError, match="multiple of 16"):
        bf16_gemm(4, 40, 8, "llvm")
    with pytest.raises(BuildError, match="even"):
        bf16_gemm(4, 32, 7, "llvm")
    with pytest.raises(BuildError, match="multiples of 32"):
        bf16_gemm(20, 32, 32, "llvm", path="amx")
    g = bf16_gemm(4, 32, 8, "llvm", path="fma")
    with pytest.raises(DTypeError, match="bfloat16"):
        g.pack(np.ones((8, 32), np.float32))
    with pytest.raises(ShapeError, match=r"\(4, 8\)"):
        g(lowp_sample((4, 6), "bfloat16"), g.pack(lowp_sample((8, 32), "bfloat16")))
