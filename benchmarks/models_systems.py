"""The systems of the `models` suite (benchmarks/models.py): each a way to run a model, set up
once, checked against PyTorch eager, then timed.

    system = setup_minitc("minitc", model, inputs, db=False)[0]   # or setup_eager, setup_inductor, ...
    system.fn()          # one call; system.error says why there is no fn (compile failed, ...)
"""

from __future__ import annotations

import logging
import time
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

import minitc as tc
from minitc.benchmarks.report import short, sig
from minitc.frontend import unsupported

SYSTEMS = ("minitc", "minitc-tuned", "eager", "inductor", "onnxruntime")  # in the tables' order
RTOL = 1e-4  # of max |eager|: the accuracy target for float32
# --dtype (issue 54): bf16 against eager under autocast, within BF16_RTOL of max |eager|; int8
# against float32 eager, the outputs' cosine similarity at least INT8_COSINE
BF16_RTOL = 2e-2
INT8_COSINE = 0.99
MINITC_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8"}
TARGET = "llvm"


def ms_key(system: str) -> str:
    """The record's key of a system's median ms: minitc-tuned -> minitc_tuned_ms."""
    return system.replace("-", "_") + "_ms"


@dataclass
class System:
    """One way to run the model: a zero-argument callable, or why there is none."""

    name: str
    fn: object = None
    setup_s: float | None = None
    error: str | None = None
    traceback: str | None = None  # the last lines, for a build that failed
    check: dict = field(default_factory=dict)  # errors against eager
    compiled: object = None  # minitc's CompiledModel


def failed(name: str, what: str, e: BaseException) -> System:
    tail = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
    return System(name, error=f"{what}: {short(e)}", traceback=tail.strip()[-2000:])


def as_array(out) -> np.ndarray:
    """The model's output (a tensor, an array, or the first item of a tuple) as numpy."""
    if isinstance(out, (list, tuple)):
        out = out[0]
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    return np.asarray(out)


def compare(out, reference: np.ndarray, rtol: float = RTOL, min_cosine: float | None = None) -> tuple:
    """({max_abs_err, rel_err[, cosine]}, why it is wrong or None): wrong beyond `rtol` of max
    |eager|, or with `min_cosine`, below that cosine similarity instead (int8)."""
    actual = as_array(out)
    if actual.shape != reference.shape:
        return {}, f"wrong result: shape {actual.shape}, expected {reference.shape}"
    if not np.all(np.isfinite(actual)):
        return {}, f"wrong result: {int(np.sum(~np.isfinite(actual)))} non-finite element(s)"
    err = float(np.max(np.abs(actual.astype(np.float64) - reference), initial=0.0))
    rel = err / max(float(np.max(np.abs(reference), initial=0.0)), 1e-30)
    check = {"max_abs_err": sig(err, 3), "rel_err": sig(rel, 3)}
    if min_cosine is not None:
        a, b = actual.astype(np.float64).ravel(), reference.ravel()
        cosine = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))
        check["cosine"] = sig(cosine, 6)
        if cosine < min_cosine:
            return check, f"wrong result: cosine similarity {cosine:.5f} with eager (limit {min_cosine:g})"
        return check, None
    if rel > rtol:
        return check, f"wrong result: max abs error {err:.3g} is {rel:.3g} of max |eager| (limit {rtol:g})"
    return check, None


def reset_peak_memory():
    """Start a new peak of the process's resident memory (Linux: VmHWM, reset through
    /proc/self/clear_refs); returns the resident MiB now, or None where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        # VmHWM itself, not VmRSS: the kernel syncs per-thread RSS counters lazily, so a
        # VmRSS read can run ahead of the peak it was just reset to
        return round(_status_mib("VmHWM"), 1)
    except (OSError, ValueError):
        return None


def peak_memory(start_mib=None):
    """The process's peak resident MiB since reset_peak_memory, which returned start_mib
    (None where unknown). The peak is never below the start: the kernel sums its RSS counters
    from per-CPU parts approximately, so a later VmHWM read can come out slightly lower."""
    try:
        return round(max(_status_mib("VmHWM"), _status_mib("VmRSS"), start_mib or 0.0), 1)
    except (OSError, ValueError):
        return None


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise ValueError(key)


def setup_minitc(name: str, model, inputs, target: str = TARGET, **options) -> tuple:
    """(System, facts about the compiled model) for tc.compile(model, inputs, target, **options)."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # export's warnings; the fallbacks are reported below
            compiled = tc.compile(model, inputs, target=target, **options)
    except Exception as e:  # noqa: BLE001 - a model minitc cannot compile is an error row
        return failed(name, "compile failed", e), {}
    system = System(name, lambda: compiled(*inputs), time.perf_counter() - start)
    system.compiled = compiled
    return system, graph_facts(compiled)


def graph_facts(compiled) -> dict:
    graph = compiled.graph
    ops = unsupported(graph)
    arena = getattr(compiled.plan, "arena_bytes", None)
    return {
        "torch_nodes": sum(ops.values()),
        "torch_ops": dict(sorted(ops.items())),
        "graph_nodes": len(graph.nodes),
        "tasks": len(compiled.tasks),
        # tasks whose records' program differs from the template's: how many kept it in the model
        "tuned_kept": sum(c.kept == "tuned" for c in getattr(compiled, "choices", [])),
        "tuned_dropped": sum(c.kept == "template" for c in getattr(compiled, "choices", [])),
        "arena_mib": round(arena / 2**20, 1) if arena is not None else None,
        "constants_mib": round(sum(a.nbytes for a in graph.constants.values()) / 2**20, 1),
    }


def breakdown(compiled, repeats: int = 5, top: int = 8) -> dict:
    """Where minitc's time goes (CompiledModel.benchmark, run alone after the timing): the
    total, the nodes run through torch, and the `top` tasks by time per call."""
    if not hasattr(compiled, "benchmark"):
        return {}
    result = compiled.benchmark(repeats=repeats)
    tasks = sorted(result["tasks_ms"].items(), key=lambda kv: -kv[1])
    return {
        "total_ms": sig(result["total_ms"], 4),
        "torch_ms": sig(result["torch_ms"], 4),
        "top_tasks": [[name, sig(ms, 4)] for name, ms in tasks[:top]],
    }


def on_device(model, inputs, target: str, batch: int = 1) -> tuple:
    """The model and its inputs where `target` runs them, the inputs repeated to `batch` along
    their first dimension (the zoo's factories make batch 1): a CUDA target puts both on the GPU
    and turns TF32 off, so that every system computes in float32."""
    import torch

    if batch > 1:
        inputs = tuple(torch.cat([x] * batch) for x in inputs)
    if tc.target.target_kind(target) != "cuda":  # the CPU, or the simulator's CPU tensors
        return model, inputs
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return model.cuda(), tuple(x.cuda() for x in inputs)


def synchronized(system: System) -> System:
    """The system's call followed by a wait for the GPU, so that a host clock times its work."""
    import torch

    fn = system.fn

    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    system.fn = run
    return system


def autocast(on: bool):
    """torch.autocast to bfloat16 on the CPU where `on` (--dtype bf16's peers), else nothing."""
    import contextlib

    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16) if on else contextlib.nullcontext()


def setup_eager(model, inputs, bf16: bool = False) -> System:
    import torch

    def run():
        with torch.no_grad(), autocast(bf16):
            return model(*inputs)

    return System("eager", run, 0.0)


def setup_inductor(model, inputs, bf16: bool = False) -> System:
    """torch.compile with freezing (weights as constants, pre-packed); compiled at the thread
    count in force, by the first call; `bf16`: called under torch.autocast."""
    import torch
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    inductor_config.freezing = True
    compiled = torch.compile(model)

    def run():
        with torch.no_grad(), autocast(bf16):
            return compiled(*inputs)

    start = time.perf_counter()
    try:
        run()
    except Exception as e:  # noqa: BLE001
        return failed("inductor", "compile failed", e)
    return System("inductor", run, time.perf_counter() - start)


def export_onnx(model, inputs) -> tuple:
    """(ONNX model bytes, how it was exported): torch 2.13's own exporter (dynamo=True, it needs
    onnxscript), else the TorchScript one, which cannot export GPT-2's mask (aten::diff)."""
    import io

    import torch

    names = [f"input{i}" for i in range(len(inputs))]
    with warnings.catch_warnings(), quiet_loggers("torch.onnx", "onnxscript"):
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(model, tuple(inputs), input_names=names, dynamo=True, verbose=False)
            return program.model_proto.SerializeToString(), "torch.onnx.export(dynamo=True)"
        except Exception as first:  # noqa: BLE001 - e.g. onnxscript missing: try the other exporter
            try:
                buffer = io.BytesIO()
                torch.onnx.export(model, tuple(inputs), buffer, input_names=names, dynamo=False)
                return buffer.getvalue(), f"torch.onnx.export(dynamo=False) ({short(first)})"
            except Exception as e:  # noqa: BLE001
                raise RuntimeError(f"dynamo=True: {short(first)}; dynamo=False: {short(e)}") from e


@contextmanager
def quiet_loggers(*names):
    """Only errors from these loggers meanwhile (the exporter's notes on every run)."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def quantize_onnx(onnx_bytes: bytes) -> bytes:
    """ONNX Runtime's dynamic quantization (--dtype int8's peer): weights int8 per output
    channel, activations uint8 per tensor at run time (MatMulInteger, DynamicQuantizeLinear)."""
    import os
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder, quiet_loggers("root"):
        source, quantized = os.path.join(folder, "model.onnx"), os.path.join(folder, "model.int8.onnx")
        with open(source, "wb") as f:
            f.write(onnx_bytes)
        quantize_dynamic(source, quantized, per_channel=True, weight_type=QuantType.QInt8)
        with open(quantized, "rb") as f:
            return f.read()


def setup_onnxruntime(onnx_bytes: bytes, inputs, threads: int) -> System:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    start = time.perf_counter()
    try:
        session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return failed("onnxruntime", "session failed", e)
    arrays = {f"input{i}": t.numpy() for i, t in enumerate(inputs)}
    wanted = [i.name for i in session.get_inputs()]
    # by name (the exporters keep ours), else by position
    feeds = {n: arrays[n] for n in wanted} if set(wanted) <= set(arrays) else dict(zip(wanted, arrays.values()))
    return System("onnxruntime", lambda: session.run(None, feeds)[0], time.perf_counter() - start)
