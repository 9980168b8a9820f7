"""The `zoo` suite: the zoo's coverage table (docs/models.md). Each small model of the zoo
(models_zoo.ZOO) is compiled with the templates, checked against eager, its PyTorch fallbacks
listed, and timed against eager (and with --inductor, torch.compile):

    python -m minitc.benchmarks --suite zoo [--threads 2,1] [--rounds 7] [--workloads zoo-llama,...]

Timing alternates the systems in one process (timing.alternate): each round times eager, then
minitc, each the median of enough calls, and the speed is the median over rounds of eager's
time over minitc's (above 1: minitc is faster). Prints a markdown table (report.zoo_table) and
the CPU it ran on.
"""

from __future__ import annotations

import time
import warnings

import numpy as np


def measure(name: str, threads: list, rounds: int, inductor: bool = False) -> dict:
    """{model, fallbacks, error, rel_err, compile_s, timing: {threads: {eager_ms, minitc_ms, speed}}}
    (with `inductor`, also inductor_ms and vs_inductor: Inductor's time over minitc's)."""
    import torch

    import minitc as tc
    from minitc.benchmarks.models_systems import compare
    from minitc.benchmarks.models_zoo import MODELS
    from minitc.benchmarks.report import short
    from minitc.frontend import unsupported
    from minitc.timing import thread_limit

    row = {"model": name, "fallbacks": {}, "error": None, "timing": {}}
    try:
        model, inputs = MODELS[name].make()
        with thread_limit(threads[0]), torch.no_grad():
            expected = model(*inputs).numpy()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled = tc.compile(model, inputs, db=False)
            row["compile_s"] = time.perf_counter() - start
            row["fallbacks"] = unsupported(compiled.graph)
            check, wrong = compare(compiled(*inputs), expected)
            row["rel_err"], row["error"] = check.get("rel_err"), wrong
        for n in threads:
            with thread_limit(n), torch.no_grad():
                fns = {"eager": lambda: model(*inputs), "minitc": lambda: compiled(*inputs)}
                if inductor:  # compiled at this thread count, by its first call
                    from minitc.benchmarks.models_systems import setup_inductor

                    system = setup_inductor(model, inputs)
                    if system.error is None:
                        fns["inductor"] = system.fn
                row["timing"][n] = speeds(fns, rounds)
    except Exception as e:  # noqa: BLE001 - a model that fails is a row of the table
        row["error"] = short(e)
    return row


def speeds(fns: dict, rounds: int) -> dict:
    """The systems timed in turn (timing.alternate): {name_ms: median, speed: eager over minitc,
    vs_inductor: Inductor over minitc}, each ratio the median over rounds."""
    from minitc.timing import alternate

    ms = alternate(fns, rounds)
    mine = np.array(ms["minitc"])
    out = {f"{name}_ms": float(np.median(v)) for name, v in ms.items()}
    out["speed"] = float(np.median(np.array(ms["eager"]) / mine))
    if "inductor" in ms:
        out["vs_inductor"] = float(np.median(np.array(ms["inductor"]) / mine))
    return out


def select(names) -> list:
    """The zoo's model names that `names` names (all when none); KeyError listing them."""
    from minitc.benchmarks.models_zoo import MODELS, ZOO
    from minitc.benchmarks.suites import pick

    return [spec.name for spec in pick([MODELS[n] for n in ZOO], names, "zoo")]
