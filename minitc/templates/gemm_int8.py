"""The int8 GEMM: uint8 or int8 A, int8 B packed ahead of time (quad-interleaved, VNNI-4),
exact int32 output. The path comes from the target description's features:

    g = int8_gemm(M, N, K, target="llvm")   # g.path: "amx", "vnni" or "int" (emulation)
    bp = g.pack(B)                           # once per weight: [N//nr, K//4, nr, 4] int8
    C = g(A, bp)                             # A uint8 or int8 [M, K]; C int32 = A @ B exactly

`vpdpbusd` multiplies unsigned by signed bytes. A signed A runs as A + 128 (a uint8) and the
result is corrected by 128 * (the column sums of B), computed once at packing: the u8 x s8
compensation. IR: backends/llvm/gemm_int8.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitc.backends.llvm import gemm_amx as amx
from minitc.backends.llvm import gemm_int8 as ir
from minitc.backends.llvm.gemm_bf16 import GemmShape
from minitc.errors import BuildError, DTypeError, ShapeError
from minitc.target import parse_target
from minitc.target.cpu import enabled_features
from minitc.templates.gemm_bf16 import LowPrecisionGemm, default_tile

PATH_FEATURES = {"amx": "amx-int8", "vnni": "avx512vnni", "int": None}


def choose_path(target, M: int = 32, N: int = 32, K: int = 64) -> str:
    """`amx` where the target description has AMX-INT8 and the shape fits its blocks (M, N
    multiples of 32, K of 64), else `vnni` where it has AVX-512 VNNI, else the exact `int`
    emulation."""
    feats = enabled_features(parse_target(target))
    if "amx-int8" in feats and not (M % amx.TILE or N % amx.TILE or K % 64):
        return "amx"
    return "vnni" if "avx512vnni" in feats else "int"


@dataclass
class PackedB:
    """B in the VNNI-4 layout, with 128 * its column sums (the compensation of a signed A)."""

    data: np.ndarray
    compensation: np.ndarray


class Int8Gemm(LowPrecisionGemm):
    kind = "int8"
    path_features = PATH_FEATURES

    def pack(self, B) -> PackedB:
        """B [K, N] int8 -> PackedB([N//nr, K//4, nr, 4] int8, 128 * column sums int32)."""
        K, N, nr = self.shape.K, self.shape.N, self.shape.nr
        B = np.asarray(B)
        if B.dtype != np.int8 or B.shape != (K, N):
            raise DTypeError(f"B must be an int8 array of shape {(K, N)}, got {B.dtype} {B.shape}")
        data = np.ascontiguousarray(B.reshape(K // 4, 4, N // nr, nr).transpose(2, 0, 3, 1))
        return PackedB(data, 128 * B.sum(axis=0, dtype=np.int32))

    def __call__(self, A, bp: PackedB) -> np.ndarray:
        kernel = self.kernel()
        s = self.shape
        A = np.asarray(A)
        if A.shape != (s.M, s.K):
            raise ShapeError(f"A has shape {A.shape}, expected {(s.M, s.K)}")
        if A.dtype not in (np.uint8, np.int8):
            raise DTypeError(f"A must be uint8 or int8, got {A.dtype}")
        if not isinstance(bp, PackedB) or bp.data.shape != (s.N // s.nr, s.K // 4, s.nr, 4):
            raise ShapeError("bp must be this GEMM's g.pack(B)")
        signed = A.dtype == np.int8
        a = np.ascontiguousarray((A.view(np.uint8) ^ 0x80) if signed else A)  # int8 + 128 as uint8
        C = np.empty((s.M, s.N), np.int32)
        kernel.cfunc(*(x.__array_interface__["data"][0] for x in (a, bp.data, C)))
        if signed:
            C -= bp.compensation
        return C


def int8_gemm(M: int, N: int, K: int, target="llvm", path: str | None = None, mr=None, nr=None) -> Int8Gemm:
    """The GEMM for `target`; `path` overrides the instruction choice (`int` runs anywhere)."""
    target = parse_target(target)
    path = path or choose_path(target, M, N, K)
    tile = (amx.TILE, amx.TILE) if path == "amx" else default_tile(N, target)
    shape = GemmShape(M, N, K, mr or tile[0], nr or tile[1])
    if K % 4:
        raise BuildError(f"int8 GEMM: K={K} must be a multiple of 4 (quads of k); pad A and B with zeros")
    name = f"gemm_int8_{path}_{M}x{N}x{K}_{shape.mr}x{shape.nr}"
    text = amx.render(shape, name, "int8") if path == "amx" else ir.render(shape, path, name)
    return Int8Gemm(shape, path, target, text)
