"""Run each default gpu-core kernel once, for a profiler (run on a GPU, under Nsight Compute):

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \\
        python experiments/gpu_profile.py [WORKLOADS]

The inputs are numpy arrays copied to the GPU with CuPy, so the only kernels launched are
minitc's (one per workload: matmul 4096^3, the BERT FFN dense + GELU, the ResNet-50 layer3
convolution, the attention softmax). Prints each kernel's name and launch shape.
"""

from __future__ import annotations

import sys

import numpy as np

import minitc as tc
from minitc.benchmarks.gpu_suites import select


def main(names=None) -> None:
    rng = np.random.default_rng(0)
    for w in select("gpu-core", names):
        f = tc.build(w.make_minitc(), target="cuda", db=False)
        args = w.minitc_inputs(w.make_inputs(rng))
        f(*args)
        for launch in f.program.launches:
            print(f"{w.name}: {launch.name} grid {launch.grid} block {launch.block}")


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else None)
