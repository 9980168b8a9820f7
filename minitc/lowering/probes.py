"""Switches that change generated GPU code, for probing one choice of a template or pass against
its alternative (experiments/gpu_*_probe.py). One table: each is on unless its variable is "0".

A program built with a switch off is another program for the same workload, so tuning records
made that way are keyed apart (target.hardware_fingerprint appends the switches that are off).
"""

from __future__ import annotations

import os

PROBE_SWITCHES = {
    "MINITC_GPU_UNROLL_K": "the GEMM and conv templates unroll the k-steps of one shared tile",
    "MINITC_GPU_DOUBLE_BUFFER": "shared-memory tiles are double-buffered (lowering/double_buffer.py)",
    "MINITC_GPU_CONV_K_LAST": "the conv template stages weights [C, R, S, K] and reads them as float4",
}


def switch_on(name: str) -> bool:
    """Whether the probe switch `name` (a key of PROBE_SWITCHES) is on: its default."""
    if name not in PROBE_SWITCHES:
        raise KeyError(f"unknown probe switch {name}; known: {', '.join(PROBE_SWITCHES)}")
    return os.environ.get(name, "1") != "0"


def switches_off() -> list:
    """The probe switches turned off in this process, in table order."""
    return [name for name in PROBE_SWITCHES if not switch_on(name)]
