"""One row of the sweep (issue 53): one architecture built (sweep_configs.py), exported,
compiled with the templates, checked against eager and timed.

    row = measure("bert", threads=2, rounds=3, inductor=False)

A row's status, in the order the stages run:

    scope      the main input is not text, vision or audio (time series, video, ...)
    config     the configuration cannot be shrunk, or the model cannot be built
    inputs     eager runs on none of the input sets the sweep makes
    export     torch.export cannot take it, even with use_cache=False, or its program differs
               from eager where minitc's result does
    compile    tc.compile raised
    mismatch   an output is off eager's by more than 1e-4 of its largest value (RTOL)
    error      anything else that went wrong (timing, Inductor...), with its message
    fallback   matches, but minitc fell back to PyTorch on an internal error (a bug to fix)
    pass       matches

transformers' cache classes are registered as pytrees before export (as transformers' own
exporter does), so a model that returns its key/value cache exports and its cache tensors are
outputs checked like the others. Where export still fails and the configuration has
`use_cache`, the model is exported again with use_cache=False, and the row says so.

`python -m minitc.benchmarks.sweep_row` is the worker that sweep.py runs: it reads model types
on stdin, one a line, and writes one JSON row a line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

from minitc.benchmarks.models_systems import compare, setup_inductor
from minitc.benchmarks.report import short
from minitc.benchmarks.sweep_configs import MODALITY, Architecture, SweepError, build

PASSING = ("pass", "fallback")  # compiled and matched eager
# Warm-up of each timed system: WARMUP_CALLS calls and WARMUP_S seconds, but no more than
# WARMUP_MAX_S. Eager BERT's first 8 calls took 60 ms each at 2 threads, the next 0.7 ms.
WARMUP_CALLS, WARMUP_S, WARMUP_MAX_S = 10, 0.25, 2.0


class Inputs(torch.nn.Module):
    """The model called with its inputs by name, positional for torch.export and tc.compile."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, list(names)

    def forward(self, *tensors):
        return self.model(**dict(zip(self.names, tensors)))


def tensors(out) -> list:
    """The tensors of a model's output, in torch.export's order (its pytree leaves)."""
    return [x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def register_caches(model) -> None:
    """transformers' cache classes as pytree nodes (what its exporter does before torch.export)."""
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:  # transformers 4.x
        from transformers.integrations.executorch import register_dynamic_cache_export_support

        register_dynamic_cache_export_support()
        return
    register_cache_pytrees_for_model(model)


def _set_use_cache(config, value: bool) -> bool:
    """Set use_cache on the configuration and its sub-configurations; whether any had it."""
    found = False
    for c in [config, *(v for v in vars(config).values() if hasattr(v, "to_dict"))]:
        if getattr(c, "use_cache", None) is not None:
            c.use_cache, found = value, True
    return found


class ExportFailed(Exception):
    """torch.export could not take the model (inside tc.compile); `reason` is torch's error."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def compile_model(model, inputs: dict, row: dict):
    """(module, compiled, eager's outputs, warnings caught): tc.compile of the model (which
    exports it as torch.export(strict=False)), else, where torch.export cannot take it, with
    use_cache=False (noted in the row); SweepError("export") where neither exports. The sweep
    lets tc.compile's export be the only one: a torch.export of its own before it cost 0.4 s of
    a model's 4 (vit, whisper, gpt2, convnext, roberta on the Intel Xeon)."""
    wrapped = Inputs(model, inputs)
    args = tuple(inputs.values())
    try:
        return wrapped, *timed_compile(wrapped, args, row)
    except ExportFailed as e:
        first = e.reason
    if not _set_use_cache(model.config, False):
        raise SweepError("export", first)
    row["note"] = ", ".join(filter(None, [row.get("note"), "use_cache=False"]))
    try:
        return wrapped, *timed_compile(wrapped, args, row)
    except ExportFailed as e:
        raise SweepError("export", f"{first}; with use_cache=False: {e.reason}") from None


def timed_compile(module, args: tuple, row: dict):
    """(compiled, eager's outputs, warnings caught) with the row's compile_s; ExportFailed where
    tc.compile's torch.export failed, SweepError("compile") where minitc raised."""
    import minitc as tc
    from minitc.frontend.importer import ImportError_

    expected = tensors(module(*args))
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compiled = tc.compile(module, args, db=False)
        except ImportError_ as e:
            if e.__cause__ is None or not str(e).startswith("torch.export could not export"):
                raise SweepError("compile", short(e)) from None
            raise ExportFailed(short(e.__cause__)) from None
        except Exception as e:  # noqa: BLE001 - minitc's failure is this row's reason
            raise SweepError("compile", short(e)) from None
    row["compile_s"] = round(time.perf_counter() - start, 2)
    return compiled, expected, caught


def mismatch(module, args: tuple, expected: list, wrong: str) -> SweepError:
    """The row's reason when minitc's outputs differ from eager's: eager differs from itself
    (random: vit_mae's masks, vits' durations) is said; where torch.export's own program differs
    from eager (paligemma), minitc compiled what it was given, and the row is an export failure."""
    again = check(tensors(module(*args)), expected)
    if again:
        return SweepError("mismatch", f"{wrong}; eager differs from itself (random?): {again}")
    program = torch.export.export(module, args, strict=False)  # as tc.compile exported it
    exported = check(tensors(program.module()(*args)), expected)
    if exported:
        return SweepError("export", f"torch.export's program differs from eager: {exported}")
    return SweepError("mismatch", wrong)


def check(outputs, expected: list) -> str | None:
    """Why minitc's outputs differ from eager's tensors (count, shape, more than RTOL of an
    output's largest value), or None."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if len(outputs) != len(expected):
        return f"wrong result: {len(outputs)} outputs, eager has {len(expected)}"
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        _, wrong = compare(out, ref.detach().numpy().astype(np.float64))
        if wrong:
            return f"output {i}: {wrong}"
    return None


def internal_fallbacks(compiled, caught) -> list:
    """minitc's fallbacks on its own errors: the compiled model's `fallbacks`, else the warnings
    of class CompilerFallbackWarning (one warning sums up all of them), where this minitc has
    either."""
    import minitc as tc

    found = [str(f) for f in getattr(compiled, "fallbacks", [])]
    kind = getattr(tc, "CompilerFallbackWarning", None)
    warned = [str(w.message) for w in caught if kind is not None and issubclass(w.category, kind)]
    return found or warned


def measure(name: str, threads: int, rounds: int, inductor: bool) -> dict:
    """The row of one architecture (the module docstring lists its statuses)."""
    from minitc.frontend import unsupported
    from minitc.timing import thread_limit

    row = {"model": name, "status": None, "error": None, "fallbacks": {}, "internal_fallbacks": []}
    try:
        arch = Architecture.of(name)
        row["class"] = arch.model_class
        with thread_limit(threads), torch.no_grad():
            model, inputs, row["note"] = build(arch)
            row["inputs"] = {k: list(v.shape) for k, v in inputs.items()}
            row["modality"] = "multimodal" if len({MODALITY[k] for k in inputs if k in MODALITY}) > 1 else None
            row["modality"] = row["modality"] or MODALITY[arch.main_input()]
            register_caches(model)
            module, compiled, expected, caught = compile_model(model, inputs, row)
            row["fallbacks"] = unsupported(compiled.graph)
            row["internal_fallbacks"] = internal_fallbacks(compiled, caught)
            try:
                outputs = compiled(*inputs.values())
            except Exception as e:  # noqa: BLE001
                raise SweepError("compile", f"first call: {short(e)}") from None
            wrong = check(outputs, expected)
            if wrong:
                raise mismatch(module, tuple(inputs.values()), expected, wrong)
            row["status"] = "fallback" if row["internal_fallbacks"] else "pass"
            if rounds:
                args = tuple(inputs.values())
                fns = {"eager": lambda: module(*args), "minitc": lambda: compiled(*args)}
                if inductor:
                    system = setup_inductor(module, args)
                    if system.fn:
                        fns["inductor"] = system.fn
                    else:
                        row["inductor_error"] = system.error
                row.update(speeds(fns, rounds))
    except SweepError as e:
        row["status"], row["error"] = e.stage, str(e)[:500]
    except Exception as e:  # noqa: BLE001 - anything else is this row's error, not the sweep's end
        row["status"], row["error"] = row["status"] or "error", short(e)
    return row


def warm_up(fn) -> None:
    calls, start = 0, time.perf_counter()
    while (
        calls < WARMUP_CALLS or time.perf_counter() - start < WARMUP_S
    ) and time.perf_counter() - start < WARMUP_MAX_S:
        fn()
        calls += 1


def speeds(fns: dict, rounds: int) -> dict:
    """Each system called in turn, `rounds` rounds of the median of 5-50 calls (about 20 ms),
    after warm-up calls (WARMUP): median ms, and eager's and Inductor's time over minitc's, each the
    median of the rounds' ratios. Medians, because a shared machine's other work stalls some
    calls (2-thread eager calls of 1 ms took up to 100 ms under load)."""
    from minitc.timing import median_call_s

    once = 0.0
    for fn in fns.values():
        warm_up(fn)
        once = max(once, min(median_call_s(fn, 1) for _ in range(3)))
    calls = max(5, min(50, int(0.02 / max(once, 1e-6))))
    ms = {n: [] for n in fns}
    for _ in range(rounds):
        for n, fn in fns.items():
            ms[n].append(1e3 * median_call_s(fn, calls))
    ms = {n: np.array(v) for n, v in ms.items()}
    out = {f"{n}_ms": round(float(np.median(v)), 4) for n, v in ms.items()}
    out["speed"] = round(float(np.median(ms["eager"] / ms["minitc"])), 3)
    if "inductor" in ms:
        out["vs_inductor"] = round(float(np.median(ms["inductor"] / ms["minitc"])), 3)
    return out


def worker() -> None:
    """Read model types on stdin, write their rows as JSON lines; everything else the models
    print goes to stderr, so stdout carries only rows."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inductor", action="store_true")
    args = parser.parse_args()
    rows = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        row = measure(line.strip(), args.threads, args.rounds, args.inductor)
        rows.write(json.dumps(row) + "\n")
        rows.flush()


if __name__ == "__main__":
    worker()
