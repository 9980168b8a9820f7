"""Targets: what code is generated for. Everything that asks "which machine?" asks here.

    parse_target("llvm")                  # the host CPU: LLVMTarget (cpu.py)
    parse_target("llvm -mcpu=znver4")     # a named x86 CPU (AVX-512: 16 float32 lanes)
    parse_target("cuda -arch=sm_90")      # an NVIDIA GPU: CudaTarget (gpu.py); "cuda-sim": simulated
    target_kind(t), is_gpu(t), simd_width(t, "float32"), hardware_fingerprint(t)

A CPU target is also the description of the machine that templates derive their choices from:
lanes per dtype, vector registers, whether 512-bit ops are full-rate, the preferred vector
width, cache sizes and cores (`t.vector_registers`, `t.cache_bytes("l2")`, ...: cpu.py's
docstring lists them; cpus.py holds the table of known cpus and reads the host's caches).

A target kind maps to the function that parses its strings (KINDS); a backend for a new kind
registers one with `register_target_kind`. Probing what the host measures (peak FMA rate,
bandwidth) needs generated kernels, so it lives with the LLVM backend (backends/llvm/probe.py).
"""

from __future__ import annotations

import hashlib

from minitc.errors import BuildError
from minitc.lowering.probes import switches_off
from minitc.target.cpu import CPU_FEATURES, LLVMTarget, enabled_features, host_cpu_name, parse_cpu_target, simd_width
from minitc.target.gpu import CudaTarget, GpuLimits, parse_cuda_target

Target = LLVMTarget | CudaTarget

KINDS: dict = {"llvm": parse_cpu_target, "cuda": parse_cuda_target, "cuda-sim": parse_cuda_target}
GPU_KINDS = ("cuda", "cuda-sim")


def register_target_kind(kind: str, parse) -> None:
    """Make `kind` a target kind whose strings `parse(text) -> target object` reads."""
    KINDS[kind] = parse


def target_kind(target) -> str:
    """ "llvm", "cuda" or "cuda-sim" (any registered kind): the first word of a target string,
    or the kind of a parsed target."""
    if isinstance(target, LLVMTarget):
        return "llvm"
    if hasattr(target, "kind"):
        return target.kind
    words = target.split() if isinstance(target, str) else []
    if not words or words[0] not in KINDS:
        raise BuildError(
            f"unknown target {target!r}; use 'llvm' (host CPU, or 'llvm -mcpu=...'), 'cuda' (an NVIDIA GPU, "
            "or 'cuda -arch=sm_90'), or 'cuda-sim' (the GPU simulated with numpy)"
        )
    return words[0]


def is_gpu(target) -> bool:
    """True for a CUDA target (string or parsed), real or simulated."""
    return target_kind(target) in GPU_KINDS


def parse_target(target) -> Target:
    """The target object of a target string (a parsed target passes through unchanged)."""
    if isinstance(target, (LLVMTarget, CudaTarget)):
        return target
    return KINDS[target_kind(target)](target)


def hardware_fingerprint(target) -> str:
    """What tuning records are keyed by besides the target string: the CPU model, core count
    and feature set, e.g. `znver2-2c-1a2b3c4d`; for a GPU its name and SM count, e.g.
    `NVIDIA-H100-80GB-HBM3-132sm`."""
    t = parse_target(target)
    if isinstance(t, CudaTarget):
        name = t.device_name or ("simulator" if t.kind == "cuda-sim" else t.arch)
        probes = "".join(f"-{s.removeprefix('MINITC_GPU_').lower()}-off" for s in switches_off())
        return f"{'-'.join(name.split())}-{t.sm_count}sm{probes}"
    digest = hashlib.sha256(t.features.encode()).hexdigest()[:8]
    return f"{t.cpu}-{t.num_cores}c-{digest}"


__all__ = [
    "CPU_FEATURES",
    "GPU_KINDS",
    "KINDS",
    "CudaTarget",
    "GpuLimits",
    "LLVMTarget",
    "Target",
    "enabled_features",
    "hardware_fingerprint",
    "host_cpu_name",
    "is_gpu",
    "parse_cpu_target",
    "parse_cuda_target",
    "parse_target",
    "register_target_kind",
    "simd_width",
    "target_kind",
]
