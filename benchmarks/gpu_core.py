"""The GPU suites: minitc's CUDA kernels against torch (cuBLAS/cuDNN) and Triton, float32.

    python -m benchmarks --suite gpu-core [--workloads matmul-4096,...] [--repeats 100]
                         [--budget 2] [--tune N] [--json out.json] [--plot out.png]

For each workload, in one process: minitc's kernel (`tc.build(out, target="cuda", db=False)`,
the operator's GPU template; with `--tune N` the kernel `tc.tune(out, trials=N,
strategy="evolutionary", target="cuda")` finds, the template then timed beside it), torch on
the GPU and a straightforward Triton kernel (triton_kernels.py). Everything is float32 without
TF32: torch's `allow_tf32` flags are off (cuBLAS SGEMM, cuDNN FP32 algorithms) and Triton's
`tl.dot` uses `input_precision="ieee"`. Every result is checked against torch in float64 on
the GPU before timing; a wrong or failing minitc kernel is an error row, a wrong or failing
library a note. Timing is `triton.testing.do_bench`'s method, interleaved: each sample flushes
L2 (zeroing 2 GiB), then times one call between two CUDA events; the flush also keeps the GPU
busy while Python enqueues the call, so the samples measure GPU time, not launch overhead (a
call whose enqueueing takes as long as the flush is flagged). Rounds rotate who goes first.
The workloads are in gpu_suites.py, the timer in timing.py, the table in report.py and the
plot in plots.py.

`gpu-smoke` is the same at tiny shapes (tests/gpu/test_benchmarks_gpu.py runs its minitc kernels in
the GPU simulator). Without torch's CUDA build, CuPy or a GPU, the suite stops with one line
saying what is missing; without Triton only its column is empty.

JSON (`--json`): one self-contained record per workload:

    {"suite": "gpu-core", "workload": "matmul-4096", "description": ..., "kind": "compute",
     "minitc_ms": 3.1, "torch_ms": 2.4, "triton_ms": 2.9,   # medians; null: error / unavailable
     "minitc_template_ms": null,     # with --tune: the untuned template, timed alongside
     "unit": "GFLOP/s", "rates": {"minitc": 44000.0, ...},  # GFLOP/s (compute) or GB/s (memory)
     "flops": 137438953472,          # "bytes" for memory-bound workloads
     "peak_pct": 65.1,               # minitc's rate / the GPU's nominal FP32 peak or bandwidth
     "vs_torch": 0.77, "vs_triton": 0.94,   # library ms / minitc ms (> 1: minitc is faster)
     "max_rel_err": {"minitc": 1e-6, ...},  # max |x - float64 torch| / max(1, max |ref|)
     "spread_pct": {...}, "samples": {...}, "launch_bound": [],   # IQR/median %, count, flags
     "compile_s": 0.8, "launches": [["matmul_kernel", [64, 64, 1], [16, 16, 1]]],
     "tune": null | {"trials": 64, "seconds": 80.1, "best_ms": 2.9, "error": null},
     "error": null, "notes": [], "device": {...}, "run": {...}}
"""

from __future__ import annotations

import contextlib
import datetime
import platform
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

import minitc as tc
from minitc.benchmarks.gpu_suites import GpuWorkload
from minitc.benchmarks.report import GPU_IMPLS, rounded, short, sig
from minitc.timing import FLUSH_MIB, Timer

TARGET = "cuda"  # minitc's target; DEVICE: torch's (the tests run the suite on "cuda-sim" and "cpu")
DEVICE = "cuda"
LAUNCH_BOUND = 0.8  # host enqueue time / flush time above which a sample may include launch gaps
FP32_LANES = {"sm_70": 64, "sm_75": 64, "sm_80": 64}  # FP32 FMA units per SM; 128 on sm_86 and later
PRECISION = (
    "float32 without TF32: torch allow_tf32=False (cuBLAS SGEMM, cuDNN FP32), "
    "Triton tl.dot input_precision='ieee', minitc scalar FMA"
)


class GpuUnavailable(RuntimeError):
    """What the GPU suites need and this machine lacks (one line)."""


# ---------------------------------------------------------------------------------------------
# what the suite needs


def requirements(suite: str = "gpu-core"):
    """(torch, cupy, minitc Device) or GpuUnavailable naming everything missing, in one line."""
    missing, torch, cupy, device = [], None, None, None
    try:
        import torch
    except ImportError:
        missing.append("torch is not installed")
    if torch is not None and not torch.cuda.is_available():
        missing.append(
            f"torch {torch.__version__} is a CPU-only build"
            if torch.version.cuda is None
            else f"torch {torch.__version__} sees no CUDA GPU"
        )
    try:
        import cupy
    except ImportError:
        missing.append("CuPy is not installed (pip install 'minitc[cuda]')")
    if cupy is not None:
        from minitc.backends.cuda.device import current_device

        try:
            device = current_device()
        except tc.BuildError as e:
            missing.append(str(e).splitlines()[0])
    if missing:
        raise GpuUnavailable(f"{suite} needs an NVIDIA GPU with torch's CUDA build and CuPy: {'; '.join(missing)}")
    return torch, cupy, device


def triton_module():
    """(benchmarks.triton_kernels, triton version) or (None, why not)."""
    try:
        import triton

        from minitc.benchmarks import triton_kernels
    except ImportError as e:
        return None, f"Triton is not installed ({e}); pip install triton: the Triton column is skipped"
    except Exception as e:  # noqa: BLE001 - a broken Triton install costs only its column
        return None, f"Triton failed to import ({short(e)}): the Triton column is skipped"
    return triton_kernels, triton.__version__


def fp32_mode(torch) -> dict:
    """Turn TF32 off for cuBLAS and cuDNN (old and new torch flags), let cuDNN pick its fastest
    FP32 algorithm, and return the settings as read back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch >= 2.9 deprecates allow_tf32 for fp32_precision
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        for owner in (torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)):
            try:
                if owner is not None and hasattr(owner, "fp32_precision"):
                    owner.fp32_precision = "ieee"
            except (AttributeError, RuntimeError, ValueError):
                pass  # a torch without the new flags: allow_tf32 above is what counts
        torch.backends.cudnn.benchmark = True
        return {
            "torch_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "torch_cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_benchmark": True,
            "triton_input_precision": "ieee",
        }


def device_info(torch, cupy, device) -> dict:
    """Name, architecture and the nominal FP32 peak and DRAM bandwidth from the attributes."""
    try:
        attrs = dict(cupy.cuda.Device(device.id).attributes)
    except Exception:  # noqa: BLE001 - the peaks are informative only
        attrs = {}
    clock_khz, mem_khz, bus_bits = (attrs.get(k) for k in ("ClockRate", "MemoryClockRate", "GlobalMemoryBusWidth"))
    lanes = FP32_LANES.get(device.arch, 128)
    return {
        "name": device.name,
        "arch": device.arch,
        "sm_count": device.sm_count,
        "memory_gib": rounded(torch.cuda.get_device_properties(device.id).total_memory / 2**30, 1),
        "fp32_peak_gflops": sig(2 * lanes * device.sm_count * clock_khz * 1e-6, 4) if clock_khz else None,
        "bandwidth_gbps": sig(2 * mem_khz * 1e3 * bus_bits / 8 / 1e9, 4) if mem_khz and bus_bits else None,
        "driver": cupy.cuda.runtime.driverGetVersion(),
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


# ---------------------------------------------------------------------------------------------
# checking


def check(torch, actual, ref, w: GpuWorkload):
    """(why `actual` is wrong or None, max |actual - ref| / max(1, max|ref|)); works on any
    device; `ref` is float64."""
    if tuple(actual.shape) != tuple(ref.shape):
        return f"wrong result: shape {tuple(actual.shape)}, expected {tuple(ref.shape)}", None
    a = actual.double()
    bad_values = int((~torch.isfinite(a)).sum())
    if bad_values:
        return f"wrong result: {bad_values} non-finite element(s)", None
    scale = max(1.0, float(ref.abs().max()))
    err = (a - ref).abs()
    excess = err - (w.atol * scale + w.rtol * ref.abs())
    rel = float(err.max()) / scale
    n_bad = int((excess > 0).sum())
    if n_bad:
        at = np.unravel_index(int(excess.argmax()), tuple(ref.shape))
        return (
            f"wrong result: {n_bad} of {err.numel()} elements off, worst at {tuple(map(int, at))}: "
            f"{float(a[at]):.6g} vs {float(ref[at]):.6g}"
        ), rel
    return None, rel


# ---------------------------------------------------------------------------------------------
# running a workload


@dataclass
class Prepared:
    """A workload on the GPU: inputs, the float64 reference and the checked callables."""

    workload: GpuWorkload
    inputs: tuple
    minitc_inputs: tuple = ()  # the inputs, or the workload's packed ones (GpuWorkload.pack)
    ref: object = None  # float64 torch result
    fns: dict = field(default_factory=dict)  # impl -> zero-argument callable, for results that passed
    rel_err: dict = field(default_factory=dict)
    compile_s: float | None = None
    launches: list | None = None
    tune: dict | None = None
    error: str | None = None  # why minitc is not timed
    notes: list = field(default_factory=list)


def _on_torch_stream(torch, cupy):
    """Make CuPy (minitc's kernels) launch on torch's current stream, where the events are."""
    ptr = torch.cuda.current_stream().cuda_stream
    return cupy.cuda.ExternalStream(ptr) if ptr else contextlib.nullcontext()


def _add(torch, p: Prepared, impl: str, fn, label: str | None = None) -> str | None:
    """Run `fn` once, check it; keep it for timing if right. Returns why not, or None."""
    try:
        got = fn()
        torch.cuda.synchronize()
        why, rel = check(torch, got, p.ref, p.workload)
    except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not raised
        why, rel = f"run failed: {short(e)}", None
    if why is None:
        p.fns[impl], p.rel_err[impl] = fn, sig(rel, 3)
    elif label:
        p.notes.append(f"{label} disagrees with float64 torch or failed ({why}); not timed")
    return why


def _minitc_callable(torch, cupy, f, p: Prepared):
    """The GpuFunction on zero-copy CuPy views of the inputs and a NaN-filled output."""
    out = torch.full(tuple(p.ref.shape), float("nan"), dtype=torch.float32, device=DEVICE)
    views = [cupy.from_dlpack(x) for x in p.minitc_inputs]
    out_view = cupy.from_dlpack(out)

    def run():
        f(*views, out=out_view)
        return out

    return run


def _build_minitc(torch, cupy, p: Prepared, tune_trials: int, db_path, say) -> None:
    w = p.workload
    try:
        start = time.perf_counter()
        template = tc.build(w.make_minitc(), target=TARGET, db=False)
        p.compile_s = time.perf_counter() - start
    except Exception as e:  # noqa: BLE001 - a kernel that does not build is an error row
        p.error = f"build failed: {short(e)}"
        return
    kernel = template
    if tune_trials:
        kernel = _tuned(w, tune_trials, db_path, p, say) or template
    p.launches = [[ln.name, list(ln.grid), list(ln.block)] for ln in kernel.program.launches]
    why = _add(torch, p, "minitc", _minitc_callable(torch, cupy, kernel, p))
    if why:
        p.error = why
    if kernel is not template:
        _add(torch, p, "minitc_template", _minitc_callable(torch, cupy, template, p), "the minitc template")


def _tuned(w: GpuWorkload, trials: int, db_path, p: Prepared, say):
    """The kernel `tc.tune(..., target="cuda")` finds, or None (the reason goes to p.tune)."""
    say(f"{w.name}: tuning with {trials} trials")
    start = time.perf_counter()
    p.tune = {"trials": trials, "seconds": None, "best_ms": None, "error": None}
    try:
        result = tc.tune(w.make_minitc(), trials=trials, strategy="evolutionary", target=TARGET, db=db_path)
        kernel = result.kernel
        if kernel is None:
            raise tc.BuildError(f"none of the {result.trials} programs measured ran")
        if not hasattr(kernel, "program"):  # not a GpuFunction: build the recorded best
            kernel = tc.build(w.make_minitc(), target=TARGET, db=db_path)
        p.tune.update(trials=result.trials, best_ms=sig(result.best_ms, 5) if result.best_ms else None)
    except Exception as e:  # noqa: BLE001 - e.g. tc.tune does not take the cuda target yet
        p.tune["error"] = short(e)
        p.notes.append(f"tuning failed ({short(e)}); timing the template")
        say(f"{w.name}: tuning failed: {short(e)}; continuing with the template")
        kernel = None
    p.tune["seconds"] = rounded(time.perf_counter() - start, 1)
    return kernel


def prepare(w: GpuWorkload, torch, cupy, tk, tune_trials: int = 0, db_path=None, say=None, seed: int = 0):
    """Inputs on the GPU, the float64 torch reference, and every implementation checked."""
    import torch.nn.functional as F

    say = say or (lambda msg: None)
    arrays = w.make_inputs(np.random.default_rng(seed))
    p = Prepared(w, tuple(torch.from_numpy(a).to(DEVICE) for a in arrays))
    packed = w.minitc_inputs(arrays) if w.pack else None  # else the same tensors: no second copy
    p.minitc_inputs = tuple(torch.from_numpy(a).to(DEVICE) for a in packed) if packed else p.inputs
    torch_fn = w.make_torch(torch, F)
    with torch.inference_mode():
        p.ref = torch_fn(*(x.double() for x in p.inputs))
    _add(torch, p, "torch", lambda: torch_fn(*p.inputs), "torch (float32)")
    if tk is not None and w.make_triton is not None:
        _add(torch, p, "triton", lambda fn=w.make_triton(tk): fn(*p.inputs), "triton")
    elif tk is not None:
        p.notes.append(f"no Triton kernel: {w.no_triton}")
    _build_minitc(torch, cupy, p, tune_trials, db_path, say)
    return p


def record(p: Prepared, timings: dict, flush_ms: float, device: dict, suite: str) -> dict:
    w = p.workload
    ms = {impl: timings[impl].median if impl in timings else None for impl in GPU_IMPLS}
    rates = {impl: w.work / (t * 1e-3) / 1e9 for impl, t in ms.items() if t}
    peak = device.get("fp32_peak_gflops" if w.kind == "compute" else "bandwidth_gbps")
    mine = ms["minitc"]
    return {
        "suite": suite,
        "workload": w.name,
        "description": w.description,
        "kind": w.kind,
        **{f"{impl}_ms": sig(ms[impl], 5) for impl in GPU_IMPLS},
        "unit": w.unit,
        "rates": {impl: sig(v, 4) for impl, v in rates.items()},
        ("flops" if w.kind == "compute" else "bytes"): int(w.work),
        "peak_pct": rounded(100 * rates["minitc"] / peak, 1) if mine and peak else None,
        "vs_torch": sig(ms["torch"] / mine, 4) if mine and ms["torch"] else None,
        "vs_triton": sig(ms["triton"] / mine, 4) if mine and ms["triton"] else None,
        "max_rel_err": dict(p.rel_err),
        "spread_pct": {impl: rounded(100 * t.spread, 1) for impl, t in timings.items()},
        "samples": {impl: len(t.samples) for impl, t in timings.items()},
        "launch_bound": [impl for impl, t in timings.items() if np.median(t.host) >= LAUNCH_BOUND * flush_ms],
        "compile_s": rounded(p.compile_s, 3),
        "launches": p.launches,
        "tune": p.tune,
        "error": p.error,
        "notes": list(p.notes),
    }


def run_suite(
    workloads,
    suite: str,
    repeats: int = 100,
    budget_s: float = 2.0,
    tune_trials: int = 0,
    progress=None,
    command: str | None = None,
    db=None,
) -> list:
    """Records of every workload (GpuUnavailable first if the GPU stack is missing). With
    `tune_trials`, tuning records go to `db` (kept), else to a temporary database."""
    torch, cupy, device = requirements(suite)
    say = progress or (lambda msg: None)
    precision = fp32_mode(torch)
    tk, triton_version = triton_module()
    if tk is None:
        say(triton_version)
    info = device_info(torch, cupy, device)
    timer = Timer(torch, FLUSH_MIB, DEVICE)
    context = {
        "device": info,
        "run": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command,
            "suite": suite,
            "repeats": repeats,
            "budget_s": budget_s,
            "tune_trials": tune_trials or None,
            "precision": PRECISION,
            "settings": precision,
            "flush_mib": FLUSH_MIB,
            "flush_ms": rounded(timer.flush_ms, 4),
            "timing": "median of interleaved samples; each: L2 flushed, one call between CUDA events",
            "triton_note": None if tk else triton_version,
            "versions": versions(torch, cupy, tk and triton_version),
        },
    }
    records = []
    with tempfile_db(tune_trials, db) as db_path, _on_torch_stream(torch, cupy):
        for i, w in enumerate(workloads):
            tell = lambda msg, i=i: say(f"[{i + 1}/{len(workloads)}] {msg}")  # noqa: E731
            tell(f"{w.name}: building and checking")
            p = prepare(w, torch, cupy, tk, tune_trials, db_path, tell)
            tell(f"{w.name}: timing {', '.join(p.fns) or 'nothing'}")
            timings = timer.measure(p.fns, repeats=repeats, budget_s=budget_s) if p.fns else {}
            rec = record(p, timings, timer.flush_ms, info, suite)
            tell(
                f"{w.name}: "
                + ", ".join(f"{impl} {rec[impl + '_ms']:.4g} ms" for impl in GPU_IMPLS if rec[impl + "_ms"])
                + (f"  ERROR {rec['error']}" if rec["error"] else "")
            )
            records.append({**rec, **context})
            del p
            torch.cuda.empty_cache()
    return records


@contextlib.contextmanager
def tempfile_db(tune_trials: int, db=None):
    """The records database for --tune: `db` if given (kept), else a fresh temporary one, so the
    user's records and earlier runs neither feed nor receive this run's tuning; None without
    --tune."""
    if not tune_trials or db is not None:
        yield db if tune_trials else None
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="minitc-gpu-core-") as d:
        yield f"{d}/records.db"


def versions(torch, cupy, triton_version) -> dict:
    from minitc.benchmarks.provenance import dist_version

    return {
        "python": platform.python_version(),
        "minitc": dist_version("minitc"),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "cupy": cupy.__version__,
        "triton": triton_version or None,
    }
