"""The registries the GPU templates fill as their modules load (`@template` with the template's
declared parameters, `@defaults`), and the constants they share; minitc.templates.gpu reads
them. Kept apart so that a template module imports this small module, not the package that
loads it."""

from __future__ import annotations

from minitc.lowering.gpu import GpuLimits
from minitc.lowering.probes import switch_on
from minitc.templates.registry import registrar, template_registrar

GPU_TEMPLATES: dict = {}  # tag -> fn(s, out_stage_name, target, **params)
GPU_PARAMS: dict = {}  # tag -> its template's parameters (minitc/templates/params.py)
GPU_DEFAULTS: dict = {}  # tag -> fn(s, out_stage_name, target) -> params
MAX_THREADS = GpuLimits().max_threads_per_block  # the limits every NVIDIA GPU since Volta has
SHARED_BYTES = GpuLimits().max_shared_bytes
THREADS = 256  # threads per block of the flat binding: enough warps to hide latency, many blocks


def unrolled_k_steps() -> bool:
    """Whether the templates unroll the loop over one shared tile's k (so that the compiler
    issues the next k's shared loads while this k's FMAs run); MINITC_GPU_UNROLL_K=0 keeps it
    a loop, for probing."""
    return switch_on("MINITC_GPU_UNROLL_K")


template = template_registrar(GPU_TEMPLATES, GPU_PARAMS)
defaults = registrar(GPU_DEFAULTS)
