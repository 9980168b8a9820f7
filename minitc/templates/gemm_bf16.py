"""The bfloat16 GEMM: bf16 inputs, float32 accumulation and output, B packed ahead of time in
the pair-interleaved (VNNI-2) layout. The instruction path comes from the target description's
features, never from the CPU's name:

    g = bf16_gemm(M, N, K, target="llvm")   # g.path: "amx", "dpbf16" or "fma"
    bp = g.pack(B)                           # once per weight: [N//nr, K//2, nr, 2] bfloat16
    C = g(A, bp)                             # A: bfloat16 [M, K] (ml_dtypes or torch); C float32

Paths, best first: `amx` (AMX-BF16 tiles, tdpbf16ps; M, N, K multiples of 32; IR in
backends/llvm/gemm_amx.py), `dpbf16` (AVX-512 BF16, vdpbf16ps) and `fma`, the emulation any
x86-64 runs (IR of both in backends/llvm/gemm_bf16.py). `dpbf16` and `fma` compute the same
float32 sums in the same order, so the emulation is exact where the instruction is missing;
AMX sums in another order (equal to float32 rounding).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from minitc import dtypes
from minitc.backends.function import is_torch, to_torch
from minitc.backends.llvm import gemm_amx as amx
from minitc.backends.llvm import gemm_bf16 as ir
from minitc.backends.llvm import jit
from minitc.errors import BuildError, DTypeError, ShapeError
from minitc.target import parse_target
from minitc.target.cpu import enabled_features

# instruction path -> the target feature it needs (None: any x86-64 LLVM target)
PATH_FEATURES = {"amx": "amx-bf16", "dpbf16": "avx512bf16", "fma": None}


def choose_path(target, M: int = 32, N: int = 32, K: int = 32) -> str:
    """`amx` where the target description has AMX-BF16 and the shape fits its 32 x 32 blocks,
    else `dpbf16` where it has AVX-512 BF16, else the exact `fma` emulation."""
    feats = enabled_features(parse_target(target))
    if "amx-bf16" in feats and not (M % amx.TILE or N % amx.TILE or K % amx.TILE):
        return "amx"
    return "dpbf16" if "avx512bf16" in feats else "fma"


def default_tile(N: int, target) -> tuple:
    """(mr, nr): 6 rows x 64 columns (24 of AVX-512's 32 registers accumulate, 4 hold B),
    narrower where N needs it; 3 x 16 on 16-register targets (AVX2: a 16-float row is two)."""
    target = parse_target(target)
    rows, widths = (6, (64, 48, 32, 16)) if target.vector_registers >= 32 else (3, (16,))
    for nr in widths:
        if N % nr == 0:
            return rows, nr
    raise BuildError(f"bf16 GEMM: N={N} must be a multiple of 16")


@dataclass
class LowPrecisionGemm:
    """A low-precision GEMM built for one shape and instruction path: its LLVM IR, compiled on
    the first call (the bf16 one here, gemm_int8.Int8Gemm). Subclasses name their `kind` and
    the CPU feature each path needs."""

    shape: ir.GemmShape
    path: str
    target: object
    llvm_ir: str
    compiled: object = None
    kind: ClassVar[str] = ""
    path_features: ClassVar[dict] = {}

    @property
    def asm(self) -> str:
        """The target's assembly (the optimised module), without running anything."""
        with jit._LOCK:
            mod, tm = jit.optimized_module(self.llvm_ir, f"{self.kind}_gemm", self.target)
            return tm.emit_assembly(mod)

    def kernel(self):
        """The compiled kernel (compile_gemm), compiled once."""
        if self.compiled is None:
            self.compiled = compile_gemm(self, self.path_features[self.path], self.kind)
        return self.compiled


class Bf16Gemm(LowPrecisionGemm):
    kind = "bf16"
    path_features = PATH_FEATURES

    def pack(self, B) -> np.ndarray:
        """B [K, N] bfloat16 -> Bp [N//nr, K//2, nr, 2], the layout the micro-kernel reads."""
        B = _as_bf16(B, (self.shape.K, self.shape.N), "B")
        K, N, nr = self.shape.K, self.shape.N, self.shape.nr
        return np.ascontiguousarray(B.reshape(K // 2, 2, N // nr, nr).transpose(2, 0, 3, 1))

    def __call__(self, A, Bp, out=None):
        kernel = self.kernel()
        s = self.shape
        torch_in = is_torch(A)
        A = _as_bf16(A, (s.M, s.K), "A")
        if not isinstance(Bp, np.ndarray) or Bp.shape != (s.N // s.nr, s.K // 2, s.nr, 2):
            raise ShapeError(
                f"Bp must be the packed B of this GEMM (g.pack(B)), shape {(s.N // s.nr, s.K // 2, s.nr, 2)}"
            )
        if Bp.dtype != np.dtype("bfloat16") or not Bp.flags.c_contiguous:
            raise DTypeError("Bp must be g.pack(B): C-contiguous bfloat16")
        C = np.empty((s.M, s.N), np.float32) if out is None else out
        if C.shape != (s.M, s.N) or C.dtype != np.float32 or not C.flags.c_contiguous:
            raise ShapeError(f"out must be a C-contiguous float32 array of shape {(s.M, s.N)}")
        kernel.cfunc(*(x.__array_interface__["data"][0] for x in (A, Bp, C)))
        return to_torch(C) if torch_in and out is None else C


def bf16_gemm(M: int, N: int, K: int, target="llvm", path: str | None = None, mr=None, nr=None) -> Bf16Gemm:
    """The GEMM for `target`; `path` overrides the instruction choice (the `fma` emulation runs
    on any x86-64 target, `dpbf16` needs avx512bf16 to run)."""
    target = parse_target(target)
    path = path or choose_path(target, M, N, K)
    tile = (amx.TILE, amx.TILE) if path == "amx" else default_tile(N, target)
    shape = ir.GemmShape(M, N, K, mr or tile[0], nr or tile[1])
    name = f"gemm_bf16_{path}_{M}x{N}x{K}_{shape.mr}x{shape.nr}"
    text = amx.render(shape, name) if path == "amx" else ir.render(shape, path, name)
    return Bf16Gemm(shape, path, target, text)


def compile_gemm(g, feature: str | None, kind: str):
    """JIT-compile a low-precision GEMM's LLVM IR (g.llvm_ir, g.target, g.path), once per
    process, where the host has `feature`; AMX tiles are requested from Linux first."""
    if not g.target.is_host_compatible or (feature and feature not in enabled_features(parse_target("llvm"))):
        raise BuildError(f"the {kind} GEMM's {g.path} path cannot run on this machine (it needs {feature}); see g.asm")
    if g.path == "amx":
        _request_amx()
    key = hashlib.sha256((g.llvm_ir + g.target.string).encode()).hexdigest()
    name = g.llvm_ir.split("define void @", 1)[1].split("(", 1)[0]
    with jit._LOCK:
        hit = jit._CACHE.get(key)
        if hit is None:
            hit = jit._CACHE[key] = jit._compile(g.llvm_ir, name, g.target, key, 3, time.perf_counter())
    return hit


def _request_amx() -> None:
    """Linux hands out AMX's 8 KiB tile state only to a process that asks (arch_prctl
    ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction faults."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(158, 0x1023, 18) != 0:  # SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XTILEDATA
        raise BuildError(f"Linux refused the AMX tile state (arch_prctl errno {ctypes.get_errno()})")


def _as_bf16(x, shape: tuple, role: str) -> np.ndarray:
    if is_torch(x):
        import torch

        if x.dtype != torch.bfloat16:
            raise DTypeError(f"{role} is a torch tensor of dtype {x.dtype}, expected torch.bfloat16")
        x = x.detach().contiguous().view(torch.int16).numpy().view(np.dtype("bfloat16"))
    x = np.asarray(x)
    if x.dtype != np.dtype(dtypes.check("bfloat16")):
        raise DTypeError(f"{role} has dtype {x.dtype}, expected bfloat16 (ml_dtypes.bfloat16 or torch.bfloat16)")
    if x.shape != shape:
        raise ShapeError(f"{role} has shape {x.shape}, expected {shape}")
    return np.ascontiguousarray(x)
