"""What the checked mode (MINITC_CHECK=1, minitc/frontend/checked.py) costs per model call:
each model compiled twice, its plan made without and with the checks, called in turn
(minitc.timing.alternate); median milliseconds of each.

    MINITC_NUM_THREADS=2 python experiments/checked_mode_cost.py [model ...]
"""

import os
import statistics
import sys
import warnings

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS
from minitc.timing import alternate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "frontend"))
from stress_runtime import PLAIN  # noqa: E402


def compiled(name: str, check: str):
    os.environ["MINITC_CHECK"] = check
    module, inputs = (PLAIN.get(name) or MODELS[name].make)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tc.compile(module, inputs, db=False), inputs


def main(names, rounds: int = 15) -> None:
    for name in names:
        (default, inputs), (checked, _) = compiled(name, "0"), compiled(name, "1")
        assert default.plan.checker is None and checked.plan.checker is not None
        ms = alternate({"default": lambda: default(*inputs), "checked": lambda: checked(*inputs)}, rounds)
        d, c = (statistics.median(ms[k]) for k in ("default", "checked"))
        steps = sum(1 for kind, _, _ in checked.plan.steps if kind == "kernel")
        print(f"{name}: {steps} kernels, default {d:.3f} ms, checked {c:.3f} ms ({c / d:.2f}x)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mlp-32", "cnn-32", "attention-64", "zoo-resnet", "zoo-deit", "zoo-mobilevit"])
