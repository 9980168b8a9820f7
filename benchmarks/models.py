"""`python -m minitc.benchmarks --suite models`: whole models, minitc against PyTorch eager,
torch.compile (Inductor) and ONNX Runtime, side by side in one process.

    python -m minitc.benchmarks --suite models [--workloads resnet50,bert-base] [--threads 2]
        [--trials N [--db FILE]] [--repeats N] [--budget S] [--json FILE] [--plot FILE.png]
        [--wait-quiet S] [--no-machine] [--quiet]

For each model of benchmarks/models_zoo.py (default: the four full ones; `--workloads` names
others, such as the test variants tiny-bert and resnet18-small) and each thread count (default
2), the systems are:

- minitc: `tc.compile(model, inputs, db=False)`, the operators' templates only;
- minitc-tuned: `tc.compile(model, inputs, trials=N, db=FILE)` when --trials is given (and
  tc.compile takes trials=);
- eager: the model under torch.no_grad();
- inductor: torch.compile(model) with torch._inductor.config.freezing = True, compiled for each
  thread count (its first call, the compile, is its setup_s);
- onnxruntime: the model exported to ONNX once, run by an InferenceSession with
  intra_op_num_threads set to the thread count (skipped, with a note, without onnxruntime).

`MINITC_MODELS_SYSTEMS=minitc,eager` runs only those systems (the tests use it: Inductor's
compile alone takes longer than the test budget).

PyTorch eager's output is computed once, first; every system's output is compared with it: max
abs error, and relative error = max abs error / max |eager|. A system off by more than RTOL
relative, or failing to build or run, is an error and is not timed. One more call measures
memory, then the systems that passed are timed interleaved (minitc/timing.py `measure`)
with thread_limit(n) in force for minitc, torch and BLAS.

Memory: `peak_rss_mib` is the process's peak resident memory (Linux VmHWM, reset through
/proc/self/clear_refs once the previous model is freed) while this model's systems are built,
checked and timed, all in this one process; `start_rss_mib` is what was resident at that reset
(the libraries). One call's share cannot be told apart: the allocators keep freed buffers for
the next call. For minitc the plan's own sizes are given: `arena_mib`, the one buffer its
intermediate results share (planned by liveness), and `constants_mib`, the weights it holds.

After the timing, `minitc_breakdown` (CompiledModel.benchmark, minitc alone) says where its
time goes: the total, the nodes run through torch, and the slowest tasks (fused groups).

JSON (`--json FILE`): one record per model and thread count (report.models_table prints them):

    {"suite": "models", "model": "resnet50", "description": "ResNet-50, 1x3x224x224",
     "inputs": ["float32[1, 3, 224, 224]"], "threads": 2,
     "minitc_ms": 91.2 | null, "minitc_tuned_ms": null, "eager_ms": 60.1, "inductor_ms": 45.2,
     "onnxruntime_ms": 40.3,                  # medians; null: an error, or not run
     "minitc_vs_eager": 0.66 | null,          # eager ms / minitc ms (> 1: minitc is faster)
     "compile_s": 25.1, "tuning_s": null, "trials": null,    # tuning_s: the tuned compile
     "max_abs_err": 2e-06, "rel_err": 1e-07,  # minitc (templates) against eager
     "torch_nodes": 35, "torch_ops": {"aten.hardtanh.default": 35},  # nodes run through torch
     "graph_nodes": 120, "tasks": 40, "arena_mib": 9.2, "constants_mib": 97.5,
     "minitc_breakdown": {"total_ms": 90.1, "torch_ms": 0.0, "top_tasks": [["conv2d ... x3", 9.1], ...]},
     "peak_rss_mib": 1403.2, "start_rss_mib": 610.5,   # the process's, see above
     "systems": {"minitc": {"ms", "spread_pct", "setup_s", "max_abs_err", "rel_err", "error",
                            "traceback"}, "eager": {...}, ...},
     "error": null | "...",                   # minitc's (templates) error
     "notes": [...],                          # systems skipped, how the ONNX file was made
     "target": "llvm", "host": {"cpu": ..., "llvm_cpu": ...}, "background_cpus": 0.02,
     "machine": {...} | null, "run": {"date", "command", "suite", "threads", "repeats", ...}}
"""

from __future__ import annotations

import gc
import inspect
import os

import numpy as np

import minitc as tc
from minitc.benchmarks.machine import host_cpu
from minitc.benchmarks.models_systems import (
    BF16_RTOL,
    INT8_COSINE,
    MINITC_DTYPES,
    RTOL,
    SYSTEMS,
    TARGET,
    System,
    as_array,
    autocast,
    breakdown,
    compare,
    export_onnx,
    failed,
    ms_key,
    on_device,
    peak_memory,
    quantize_onnx,
    reset_peak_memory,
    setup_eager,
    setup_inductor,
    setup_minitc,
    setup_onnxruntime,
    synchronized,
)
from minitc.benchmarks.report import short, sig
from minitc.timing import BackgroundLoad, measure, thread_limit, wait_for_quiet

SYSTEMS_ENV = "MINITC_MODELS_SYSTEMS"
FACTS = (  # the record's facts about minitc's compiled model and the process's memory
    "torch_nodes", "torch_ops", "graph_nodes", "tasks", "tuned_kept", "tuned_dropped", "arena_mib", "constants_mib",
    "minitc_breakdown",
    "peak_rss_mib", "start_rss_mib",
)  # fmt: skip


def chosen_systems() -> list:
    """The systems to run: all, or those MINITC_MODELS_SYSTEMS names (ValueError otherwise)."""
    text = os.environ.get(SYSTEMS_ENV, "")
    names = [n.strip() for n in text.split(",") if n.strip()] or list(SYSTEMS)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"{SYSTEMS_ENV}: unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    return names


def compile_takes_trials() -> bool:
    """Whether tc.compile tunes (`trials=`): tc.compile passes its options to compile_model."""
    from minitc.frontend import compile_model

    return any("trials" in inspect.signature(f).parameters for f in (tc.compile, compile_model))


# --- one model ----------------------------------------------------------------------------------
def run_model(
    spec, threads, systems, repeats=10, budget_s=3.0, trials=None, db=None, say=None, wait_quiet_s=0.0,
    target=TARGET, batch=1, dtype="fp32",
):  # fmt: skip
    """The records of one model, one per thread count, at batch size `batch`, minitc built for
    `target` (a CUDA target runs every system on the GPU). `dtype` "bf16": minitc in bfloat16,
    eager and Inductor under torch.autocast, checked against eager under autocast; "int8":
    minitc in int8, ONNX Runtime after quantize_dynamic, checked by cosine similarity with
    float32 eager (eager and Inductor stay float32)."""
    import torch

    say = say or (lambda msg: None)
    notes: list = []
    memory = {"start_rss_mib": reset_peak_memory()}
    gpu, on_gpu = tc.target.is_gpu(target), tc.target.target_kind(target) == "cuda"  # on_gpu: not the simulator
    try:
        say(f"{spec.name}: building the model")
        model, inputs = on_device(*spec.make(), target, batch)
    except Exception as e:  # noqa: BLE001 - e.g. transformers missing
        why = f"model failed: {short(e)}" + (
            f" (needs {spec.needs}: pip install 'minitc[bench]')" if spec.needs else ""
        )
        return [base_record(spec, n, [], {}, {}, why, [], target=target, batch=batch) for n in threads]
    shapes = [f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in inputs]
    bf16 = dtype == "bf16"
    with thread_limit(threads[0]), torch.no_grad(), autocast(bf16):
        reference = as_array(model(*inputs)).astype(np.float64)
    built, facts = {}, {}
    lowp = {} if dtype == "fp32" else {"dtype": MINITC_DTYPES[dtype]}
    if "minitc" in systems:
        say(f"{spec.name}: tc.compile (templates) for {target}{f' in {dtype}' if lowp else ''}")
        mine, facts = setup_minitc("minitc", model, inputs, target, db=False, **lowp)
        built["minitc"] = mine
        say(f"{spec.name}: minitc: {mine.error or f'compiled in {mine.setup_s:.1f} s'}")
    if "minitc-tuned" in systems and trials:
        say(f"{spec.name}: tc.compile with {trials} trials")
        built["minitc-tuned"], tuned_facts = setup_minitc(
            "minitc-tuned", model, inputs, target, trials=trials, db=db, **lowp
        )
        # the choices are the tuned compile's (the templates' compile reads no records)
        facts.update({k: v for k, v in tuned_facts.items() if k in ("tuned_kept", "tuned_dropped")})
    onnx_bytes = None
    if "onnxruntime" in systems and bf16:
        notes.append("onnxruntime not run in bf16 (it is int8's peer)")
    elif "onnxruntime" in systems and not gpu:
        onnx_bytes = _onnx_for(model, inputs, built, notes, say, spec.name)
        if onnx_bytes is not None and dtype == "int8":
            try:
                onnx_bytes = quantize_onnx(onnx_bytes)
                notes.append("onnxruntime: quantize_dynamic(per_channel=True, weight_type=QInt8)")
            except Exception as e:  # noqa: BLE001
                built["onnxruntime"], onnx_bytes = failed("onnxruntime", "quantize_dynamic failed", e), None
    rows = []
    for n in threads:
        if wait_quiet_s > 0:
            wait_for_quiet(wait_quiet_s)
        with thread_limit(n):
            here = dict(built)
            if "eager" in systems:
                here["eager"] = setup_eager(model, inputs, bf16)
            if "inductor" in systems:
                say(f"{spec.name}: torch.compile (Inductor, freezing) at {n} thread(s)")
                here["inductor"] = setup_inductor(model, inputs, bf16)
            if onnx_bytes is not None:
                here["onnxruntime"] = setup_onnxruntime(onnx_bytes, inputs, n)
            here = {s: here[s] for s in SYSTEMS if s in here}
            if on_gpu:
                here = {name: synchronized(system) for name, system in here.items()}
            for name, system in here.items():
                if dtype == "int8" and name in ("minitc", "minitc-tuned", "onnxruntime"):
                    check(system, reference, min_cosine=INT8_COSINE)
                else:
                    check(system, reference, rtol=BF16_RTOL if bf16 else RTOL)
            fns = {s.name: s.fn for s in here.values() if s.error is None}
            say(f"{spec.name}: timing {', '.join(fns) or 'nothing'} with {n} thread(s)")
            with BackgroundLoad() as load:
                timings = measure(fns, repeats=repeats, budget_s=budget_s) if fns else {}
        error = here["minitc"].error if "minitc" in here else None
        memory["peak_rss_mib"] = peak_memory(memory["start_rss_mib"])
        if error is None and "minitc" in here and "minitc_breakdown" not in facts:
            facts["minitc_breakdown"] = breakdown(here["minitc"].compiled)
        facts_here = {**facts, **memory}
        record = base_record(spec, n, shapes, here, timings, error, notes, facts_here, trials, load.cpus, target, batch)
        if dtype != "fp32":  # the fp32 records keep their keys
            record["dtype"] = dtype
        rows.append(record)
        say(summary(rows[-1]))
    del model, built
    torch._dynamo.reset()  # Inductor's compiled graphs hold the model's weights
    gc.collect()
    return rows


def _onnx_for(model, inputs, built, notes, say, name):
    try:
        import onnx  # noqa: F401 - the exporter needs it
        import onnxruntime  # noqa: F401
    except ImportError:
        notes.append("onnxruntime not run: pip install 'minitc[bench]' (onnxruntime, onnx)")
        return None
    say(f"{name}: exporting to ONNX")
    try:
        onnx_bytes, how = export_onnx(model, inputs)
    except Exception as e:  # noqa: BLE001
        built["onnxruntime"] = failed("onnxruntime", "ONNX export failed", e)
        return None
    notes.append(f"ONNX file made by {how}")
    return onnx_bytes


def check(system: System, reference: np.ndarray, rtol: float = RTOL, min_cosine: float | None = None) -> None:
    """Run once and compare with eager: a wrong result is an error, and is not timed."""
    if system.error is not None:
        return
    try:
        out = system.fn()
    except Exception as e:  # noqa: BLE001
        failure = failed(system.name, "run failed", e)
        system.error, system.traceback = failure.error, failure.traceback
        return
    system.check, system.error = compare(out, reference, rtol, min_cosine)


def base_record(
    spec, n, shapes, systems, timings, error, notes, facts=None, trials=None, background=None, target=TARGET, batch=1
) -> dict:
    facts = facts or {}
    ms = {s: timings[s].median * 1e3 for s in timings}
    entries = {}
    for name, s in systems.items():
        entries[name] = {
            "ms": sig(ms.get(name), 5),
            "spread_pct": round(100 * timings[name].spread, 1) if name in timings else None,
            "setup_s": round(s.setup_s, 2) if s.setup_s is not None else None,
            **s.check,
            "error": s.error,
            **({"traceback": s.traceback} if s.traceback else {}),
        }
    mine = systems.get("minitc")
    tuned = systems.get("minitc-tuned")
    return {
        "suite": "models",
        "model": spec.name,
        "description": spec.description,
        "batch": batch,
        "inputs": shapes,
        "threads": n,
        **{ms_key(s): sig(ms.get(s), 5) for s in SYSTEMS},
        "minitc_vs_eager": sig(ms["eager"] / ms["minitc"], 4) if "eager" in ms and "minitc" in ms else None,
        "compile_s": round(mine.setup_s, 2) if mine and mine.setup_s is not None else None,
        "tuning_s": round(tuned.setup_s, 1) if tuned and tuned.setup_s is not None else None,
        "trials": trials if tuned else None,
        "max_abs_err": mine.check.get("max_abs_err") if mine else None,
        "rel_err": mine.check.get("rel_err") if mine else None,
        **{k: facts.get(k) for k in FACTS},
        "systems": entries,
        "error": error,
        "notes": list(notes),
        "target": target,
        "host": host_cpu(),
        **({"gpu": _gpu_name()} if tc.target.target_kind(target) == "cuda" else {}),
        "background_cpus": round(background, 2) if background is not None else None,
    }


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def summary(rec: dict) -> str:
    parts = [f"{s} {rec[ms_key(s)]:.1f} ms" for s in SYSTEMS if rec.get(ms_key(s)) is not None]
    errors = [f"{s}: {e['error']}" for s, e in rec["systems"].items() if e.get("error")]
    tail = f"  ERRORS {'; '.join(errors)}" if errors else ""
    return f"{rec['model']} [{rec['threads']}T]: " + ", ".join(parts) + tail


def run_models(specs, threads, systems, repeats=10, budget_s=3.0, trials=None, db=None, progress=None,
               context=None, wait_quiet_s=0.0, target=TARGET, batches=(1,), dtype="fp32") -> list:  # fmt: skip
    """Records of every model at every batch size and thread count; `context` (machine, run)
    joins each."""
    records = []
    for i, spec in enumerate(specs):
        say = (lambda msg, i=i: progress(f"[{i + 1}/{len(specs)}] {msg}")) if progress else None
        for batch in batches:
            rows = run_model(
                spec, threads, systems, repeats, budget_s, trials, db, say, wait_quiet_s, target, batch, dtype
            )
            records += [{**rec, **(context or {})} for rec in rows]
    return records


def all_versions() -> dict:
    """The runner's versions, and those of the packages only this suite uses."""
    from importlib.metadata import PackageNotFoundError, version

    from minitc.benchmarks.provenance import versions

    out = versions()
    for name in ("transformers", "onnxruntime", "onnx"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out
