"""The GPU that CuPy sees: its name, architecture and the limits a launch must respect.

current_device() -> Device   (cached per device id; BuildError without CuPy or a GPU)
device_target("cuda") -> CudaTarget of that GPU (its architecture, limits, name, SMs)
"""

from __future__ import annotations

from dataclasses import dataclass

from minitc.errors import BuildError
from minitc.lowering.gpu import GpuLimits
from minitc.target.gpu import CudaTarget, parse_cuda_target

_CACHE: dict = {}


@dataclass(frozen=True)
class Device:
    id: int
    name: str  # e.g. "NVIDIA H100 80GB HBM3"
    arch: str  # e.g. "sm_90"
    sm_count: int
    limits: GpuLimits


def import_cupy():
    """CuPy, or a BuildError that says how to install it."""
    try:
        import cupy
    except ImportError as e:
        raise BuildError(
            "target 'cuda' needs CuPy: pip install 'minitc[cuda]' (cupy-cuda13x); "
            f"use target='cuda-sim' to simulate the GPU without one (import failed: {e})"
        ) from None
    return cupy


def current_device() -> Device:
    """The current CUDA device (CuPy's), read once per device and cached."""
    cupy = import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            raise RuntimeError("0 devices")
        dev = cupy.cuda.Device()
        dev_id = int(dev.id)
    except Exception as e:  # CUDARuntimeError: no driver, no device, insufficient driver
        raise BuildError(f"no CUDA GPU is visible (cupy says: {e}); use target='cuda-sim' to simulate") from None
    if dev_id not in _CACHE:
        _CACHE[dev_id] = _read(cupy, dev, dev_id)
    return _CACHE[dev_id]


def _read(cupy, dev, dev_id: int) -> Device:
    try:
        attrs = dev.attributes  # cudaDevAttr* without the prefix: {"MaxThreadsPerBlock": 1024, ...}
        props = cupy.cuda.runtime.getDeviceProperties(dev_id)
        cc = str(dev.compute_capability)  # "90"
    except Exception as e:
        raise BuildError(f"could not read the properties of CUDA device {dev_id} (cupy says: {e})") from None
    default = GpuLimits()

    def get(key, fallback):
        value = attrs.get(key)
        return int(value) if value else fallback

    limits = GpuLimits(
        max_threads_per_block=get("MaxThreadsPerBlock", default.max_threads_per_block),
        max_block=tuple(get(f"MaxBlockDim{d}", default.max_block[i]) for i, d in enumerate("XYZ")),
        max_grid=tuple(get(f"MaxGridDim{d}", default.max_grid[i]) for i, d in enumerate("XYZ")),
        # static __shared__ arrays may use this much; the larger opt-in size needs dynamic memory
        max_shared_bytes=get("MaxSharedMemoryPerBlock", default.max_shared_bytes),
        max_local_bytes=default.max_local_bytes,
    )
    name = props.get("name", b"")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return Device(
        dev_id, name.strip("\x00 ") or f"CUDA device {dev_id}", f"sm_{cc}", get("MultiProcessorCount", 0), limits
    )


def device_target(target="cuda") -> CudaTarget:
    """`target` completed with the facts of the GPU CuPy sees (its architecture unless `-arch`
    names one); `cuda-sim` passes through."""
    t = parse_cuda_target(target)
    if t.kind != "cuda":
        return t
    dev = current_device()
    return CudaTarget("cuda", t.arch if t.arch_given else dev.arch, dev.limits, dev.name, dev.sm_count, t.arch_given)
