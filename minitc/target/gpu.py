"""CUDA targets: `cuda`, `cuda -arch=sm_90`, `cuda-sim`; and the limits a launch must respect.

Without `-arch`, the architecture is sm_90 (H100) with the limits every GPU since Volta has;
`minitc.backends.cuda.device.device_target` fills in those of the GPU CuPy sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from minitc.errors import BuildError
from minitc.lowering.gpu import GpuLimits

DEFAULT_ARCH = "sm_90"


@dataclass(frozen=True)
class CudaTarget:
    kind: str  # "cuda" or "cuda-sim"
    arch: str = DEFAULT_ARCH  # e.g. "sm_90"
    limits: GpuLimits = field(default_factory=GpuLimits)
    device_name: str = ""  # set when queried from a real device
    sm_count: int = 0
    arch_given: bool = field(default=False, compare=False)  # -arch was in the target string

    def __str__(self):
        return self.kind if self.kind == "cuda-sim" else f"cuda -arch={self.arch}"

    @property
    def string(self) -> str:
        """The target string records are stored under (like LLVMTarget.string)."""
        return str(self)


def parse_cuda_target(target) -> CudaTarget:
    """Parse `cuda`, `cuda -arch=sm_XX` or `cuda-sim` (a CudaTarget passes through unchanged)."""
    if isinstance(target, CudaTarget):
        return target
    words = target.split() if isinstance(target, str) else []
    if not words or words[0] not in ("cuda", "cuda-sim"):
        raise BuildError(f"{target!r} is not a CUDA target; use 'cuda', 'cuda -arch=sm_XX' or 'cuda-sim'")
    arch = None
    for w in words[1:]:
        m = re.fullmatch(r"-arch=(sm_\d+a?)", w)
        if m is None:
            raise BuildError(f"unknown option {w!r} in target {target!r}; the CUDA target takes -arch=sm_XX")
        arch = m.group(1)
    return CudaTarget(words[0], arch or DEFAULT_ARCH, arch_given=arch is not None)
