"""A compiled model called with idle gaps between calls (a service's pattern), against ONNX
Runtime: after a gap, thread pools have gone to sleep and caches have cooled.

    python experiments/model_call_gaps.py resnet50      # also mobilenet_v2, bert-base, gpt2

Prints the median of 40 calls for each gap (0, 2 and 20 ms of sleep before each call), 2 threads.
"""

import sys
import time

import numpy as np
import torch

import minitc as tc
from minitc.benchmarks import models_systems as systems
from minitc.benchmarks.models_zoo import MODELS


def main(name: str, calls: int = 40) -> None:
    torch.set_num_threads(2)
    tc.set_num_threads(2)
    model, inputs = MODELS[name].make()
    minitc_system, _ = systems.setup_minitc("minitc", model, inputs)
    onnx_bytes, _ = systems.export_onnx(model, inputs)
    ort = systems.setup_onnxruntime(onnx_bytes, inputs, 2)
    for gap in (0.0, 0.002, 0.02):
        medians = {}
        for system in (minitc_system, ort):
            for _ in range(5):
                system.fn()
            times = []
            for _ in range(calls):
                if gap:
                    time.sleep(gap)
                start = time.perf_counter()
                system.fn()
                times.append(time.perf_counter() - start)
            medians[system.name] = 1e3 * float(np.median(times))
            time.sleep(0.5)  # the other system's pool goes quiet first
        print(f"gap {gap * 1e3:4.0f} ms: " + "  ".join(f"{n} {ms:.3f} ms" for n, ms in medians.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "resnet50")
