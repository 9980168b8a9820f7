"""The int8 GEMM (minitc/templates/gemm_int8.py; its IR: backends/llvm/gemm_int8.py and
gemm_amx.py): AMX tdpbusd where the recorded description has AMX-INT8 and the shape fits,
vpdpbusd where it has AVX-512 VNNI, the exact int32 emulation elsewhere, with the assembly
checked; the VNNI-4 packing; uint8 and int8 A (the u8 x s8 compensation) exactly
equal to numpy's int64 product, the emulation on any host, vpdpbusd where the host has it."""

import re

import numpy as np
import pytest
from helpers import recorded_target, table_target

from minitc.errors import BuildError, DTypeError
from minitc.target import parse_target
from minitc.target.cpu import enabled_features
from minitc.templates.gemm_int8 import choose_path, int8_gemm

HOST_HAS_VNNI = "avx512vnni" in enabled_features(parse_target("llvm"))
HOST_HAS_AMX = "amx-int8" in enabled_features(parse_target("llvm"))


@pytest.mark.parametrize(
    "describe, path",
    [
        (lambda: recorded_target("intel-sapphirerapids-kvm.json"), "vnni"),
        (lambda: recorded_target("amd-zen4.json"), "vnni"),
        (lambda: table_target("cascadelake"), "vnni"),
        (lambda: table_target("skylake-avx512"), "int"),
        (lambda: recorded_target("intel-haswell-avx2.json"), "int"),
    ],
)
def test_path_and_assembly_follow_the_description(describe, path):
    target = describe()
    assert choose_path(target, 20, 128, 64) == path  # M = 20: off AMX's 32-row blocks
    asm = int8_gemm(20, 128, 64, target).asm
    if path == "vnni":  # 6 rows x 4 vectors per quad of k in the main loop (LLVM may unroll)
        n = max(body.count("vpdpbusd") for body in re.split(r"\n\.LBB\d+_\d+:", asm))
        assert n >= 24 and "vpmaddwd" not in asm and "vpmulld" not in asm
    else:  # LLVM turns the widened products into 16-bit multiply-adds
        assert "vpdpbusd" not in asm and ("vpmaddwd" in asm or "vpmulld" in asm)


def test_amx_where_the_description_has_it_and_the_shape_fits():
    spr, zen4 = recorded_target("intel-sapphirerapids-kvm.json"), recorded_target("amd-zen4.json")
    assert choose_path(spr, 64, 128, 128) == "amx" and choose_path(zen4, 64, 128, 128) == "vnni"
    asm = int8_gemm(64, 128, 128, spr).asm
    assert "ldtilecfg" in asm and "tdpbusd" in asm and "tilestored" in asm and "vpdpbusd" not in asm


@pytest.mark.skipif(not HOST_HAS_AMX, reason="the host has no AMX-INT8 (tdpbusd)")
@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
def test_amx_is_exact(a_dtype):
    M, N, K = 64, 96, 192
    A, B = sample(M, N, K, a_dtype, 3)
    g = int8_gemm(M, N, K, "llvm")
    assert g.path == "amx"
    np.testing.assert_array_equal(g(A, g.pack(B)), A.astype(np.int64) @ B.astype(np.int64))


def test_packing_is_quad_interleaved():
    g = int8_gemm(4, 32, 8, "llvm", path="int", mr=2, nr=16)
    B = (np.arange(8 * 32) % 251 - 125).astype(np.int8).reshape(8, 32)
    bp = g.pack(B)
    assert bp.data.shape == (2, 2, 16, 4)
    for p, k4, c, e in [(0, 0, 0, 3), (1, 1, 5, 0), (1, 0, 15, 2)]:
        assert bp.data[p, k4, c, e] == B[4 * k4 + e, 16 * p + c]
    np.testing.assert_array_equal(bp.compensation, 128 * B.astype(np.int32).sum(axis=0))


def sample(M, N, K, a_dtype, seed):
    rng = np.random.default_rng(seed)
    lo = 0 if a_dtype == "uint8" else -128
    A = rng.integers(lo, lo + 256, (M, K)).astype(a_dtype)
    return A, rng.integers(-128, 128, (K, N)).astype(np.int8)


@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("M, N, K", [(13, 64, 40), (1, 32, 4)])
def test_emulation_is_exact_anywhere(M, N, K, a_dtype):
    A, B = sample(M, N, K, a_dtype, 1)
    g = int8_gemm(M, N, K, "llvm", path="int")
    C = g(A, g.pack(B))
    assert C.dtype == np.int32
    np.testing.assert_array_equal(C, A.astype(np.int64) @ B.astype(np.int64))


@pytest.mark.skipif(not HOST_HAS_VNNI, reason="the host has no AVX-512 VNNI (vpdpbusd)")
@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
def test_vpdpbusd_is_exact(a_dtype):
    M, N, K = 29, 128, 96
    A, B = sample(M, N, K, a_dtype, 2)
    g = int8_gemm(M, N, K, "llvm", path="vnni")
    np.testing.assert_array_equal(g(A, g.pack(B)), A.astype(np.int64) @ B.astype(np.int64))


def test_bad_shapes_and_dtypes():
    with pytest.raises(BuildError, match="multiple of 4"):
        int8_gemm(4, 32, 6, "llvm")
    g = int8_gemm(4, 32, 8, "llvm", path="int")
    with pytest.raises(DTypeError, match="int8"):
        g.pack(np.ones((8, 32), np.float32))
    with pytest.raises(DTypeError, match="uint8 or int8"):
        g(np.ones((4, 8), np.int32), g.pack(np.ones((8, 32), np.int8)))
