"""What the checked mode (MINITC_CHECK=1, minitc/frontend/checked.py) costs per model call:
each model compiled twice, its plan made without and with the checks, called alternately;
median milliseconds of each.

    MINITC_NUM_THREADS=2 python experiments/checked_mode_cost.py [model ...]
"""

import os
import statistics
import sys
import time
import warnings

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from stress_runtime import PLAIN  # noqa: E402


def compiled(name: str, check: str):
    os.environ["MINITC_CHECK"] = check
    module, inputs = (PLAIN.get(name) or MODELS[name].make)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tc.compile(module, inputs, db=False), inputs


def main(names, calls: int = 300) -> None:
    for name in names:
        (default, inputs), (checked, _) = compiled(name, "0"), compiled(name, "1")
        assert default.plan.checker is None and checked.plan.checker is not None
        times = {"default": [], "checked": []}
        for _ in range(calls):
            for label, model in (("default", default), ("checked", checked)):
                start = time.perf_counter()
                model(*inputs)
                times[label].append(time.perf_counter() - start)
        d, c = (1e3 * statistics.median(times[k][10:]) for k in ("default", "checked"))
        steps = sum(1 for kind, _, _ in checked.plan.steps if kind == "kernel")
        print(f"{name}: {steps} kernels, default {d:.3f} ms, checked {c:.3f} ms ({c / d:.2f}x)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mlp-32", "cnn-32", "attention-64", "zoo-resnet", "zoo-deit", "zoo-mobilevit"])
