"""Run workloads: build the minitc kernel for the run's CPU target, check it against numpy, time
minitc, numpy and torch interleaved for each thread count, and turn the timings into result
records (the JSON rows, see benchmarks/__init__.py for the schema).

The target is the host (`llvm`) or any `llvm ...` target whose code the host can run, such as
`llvm -mcpu=znver2` (AVX2 code) on an AVX-512 machine: `bench_target` checks it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import minitc as tc
from minitc.benchmarks.machine import host_cpu
from minitc.benchmarks.report import CPU_IMPLS, rounded, short, sig
from minitc.benchmarks.suites import Workload
from minitc.errors import BuildError
from minitc.target import LLVMTarget, enabled_features, is_gpu, parse_target
from minitc.timing import BackgroundLoad, measure, thread_limit, torch_module, wait_for_quiet

LIBRARIES = ("numpy", "torch")
HOST_TARGET = "llvm"


def bench_target(text: str = HOST_TARGET) -> LLVMTarget:
    """The CPU target a suite's kernels are built for: `text` parsed, if it is an `llvm ...`
    target whose code this host can run. Raises BuildError naming what is wrong otherwise."""
    if is_gpu(text):
        raise BuildError(
            f"target {text!r} is a GPU target; the CPU suites take 'llvm ...' targets "
            "(GPU kernels are measured by --suite gpu-core or gpu-smoke)"
        )
    target = parse_target(text)
    if target.is_host_compatible:
        return target
    host = parse_target(HOST_TARGET)
    if target.triple != host.triple:
        why = f"its triple {target.triple!r} is not this host's {host.triple!r}"
    else:
        missing = sorted(enabled_features(target) - enabled_features(host))
        why = f"it needs {', '.join(missing)}, which this host lacks"
    raise BuildError(
        f"this host ({host.string}) cannot run code for target {target.string!r}: {why}; "
        "choose a target with a subset of the host's features, e.g. 'llvm -mcpu=x86-64-v3' for AVX2"
    )


@dataclass
class Prepared:
    """A workload made ready: inputs, the numpy reference result and one callable per
    implementation that could be set up (None where not)."""

    workload: Workload
    inputs: tuple
    target: LLVMTarget | None = None  # what the minitc kernel is built for
    expected: np.ndarray | None = None
    fns: dict = field(default_factory=dict)  # impl -> zero-argument callable or None
    kernel: object = None  # the built tc.Function
    minitc_out: np.ndarray | None = None
    compile_s: float | None = None
    error: str | None = None  # why minitc is not timed
    notes: list = field(default_factory=list)  # library problems


def mismatch(actual, expected, w: Workload) -> str | None:
    """Why `actual` is not an acceptable result for `expected`, or None if it is."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"wrong result: shape {actual.shape}, expected {expected.shape}"
    if not np.all(np.isfinite(actual)):
        return f"wrong result: {int(np.sum(~np.isfinite(actual)))} non-finite element(s)"
    ref = expected.astype(np.float64)
    err = np.abs(actual.astype(np.float64) - ref)
    tol = w.atol * float(np.max(np.abs(ref), initial=1.0)) + w.rtol * np.abs(ref)
    bad = err > tol
    if bad.any():
        at = np.unravel_index(int(np.argmax(err - tol)), err.shape)
        return (
            f"wrong result: {int(bad.sum())} of {err.size} elements off, worst at {tuple(map(int, at))}: "
            f"{float(actual[at]):.6g} vs {float(expected[at]):.6g}"
        )
    return None


def prepare(w: Workload, seed: int = 0, target: LLVMTarget | str = HOST_TARGET) -> Prepared:
    """Make inputs, the numpy reference and the three callables; build the minitc kernel for
    `target` (checked with bench_target)."""
    p = Prepared(w, w.make_inputs(np.random.default_rng(seed)), bench_target(target))
    try:
        numpy_fn = w.make_numpy()
        p.expected = np.asarray(numpy_fn(*p.inputs))
        p.fns["numpy"] = lambda: numpy_fn(*p.inputs)
    except Exception as e:  # noqa: BLE001 - a broken baseline is reported, not raised
        p.fns["numpy"] = None
        p.error = f"numpy reference failed ({short(e)}); minitc cannot be checked"
    p.fns["torch"] = torch_callable(w, p.inputs, p.expected, p.notes)
    p.fns["minitc"] = None
    if p.error is None:
        try:
            start = time.perf_counter()
            f = p.kernel = tc.build(w.make_minitc(), target=p.target.string)
            p.compile_s = time.perf_counter() - start
            p.minitc_out = np.empty(f.kernel.outputs[0].shape, f.kernel.outputs[0].dtype)
            p.fns["minitc"] = lambda: f(*p.inputs, out=p.minitc_out)
        except Exception as e:  # noqa: BLE001 - a kernel that does not build is an error row
            p.error = f"build failed: {short(e)}"
    return p


def torch_callable(w: Workload, inputs: tuple, expected, notes: list):
    """torch's zero-argument callable on CPU tensors sharing `inputs`, checked against numpy's
    `expected` (None: not checked); None, with a note why, where torch fails, disagrees or is
    not installed (or the workload has no torch form)."""
    torch = torch_module()
    if torch is None or w.make_torch is None:
        return None
    try:
        torch_fn = w.make_torch()
        tensors = tuple(torch.from_numpy(a) for a in inputs)
        with torch.inference_mode():
            got = torch_fn(*tensors)
        if expected is not None and (why := mismatch(got.numpy(), expected, w)):
            notes.append(f"torch disagrees with numpy ({why}); torch not timed")
            return None
        return lambda: torch_fn(*tensors)
    except Exception as e:  # noqa: BLE001 - a broken library is a note, not an error
        notes.append(f"torch failed: {short(e)}")
        return None


def check_minitc(p: Prepared) -> str | None:
    """Run the minitc kernel once (with the current thread count) and compare with numpy."""
    p.minitc_out.fill(np.nan)  # elements the kernel forgets to write show up
    try:
        p.fns["minitc"]()
    except Exception as e:  # noqa: BLE001
        return f"run failed: {short(e)}"
    return mismatch(p.minitc_out, p.expected, p.workload)


def record(
    p: Prepared,
    threads: int,
    timings: dict,
    error: str | None,
    machine,
    suite: str,
    background_cpus: float | None = None,
) -> dict:
    """One JSON row: a workload at one thread count."""
    w = p.workload
    ms = {impl: (timings[impl].median * 1e3 if impl in timings else None) for impl in CPU_IMPLS}
    return {
        "suite": suite,
        "workload": w.name,
        "description": w.description,
        "kind": w.kind,
        "target": p.target.string,
        "target_description": p.target.describe(),
        "host": host_cpu(),
        "threads": threads,
        **{f"{impl}_ms": sig(ms[impl], 5) for impl in CPU_IMPLS},
        **against_libraries(ms, ms["minitc"]),
        **rated(w, ms["minitc"], machine, threads),
        "compile_s": rounded(p.compile_s, 3),
        "spread_pct": {impl: rounded(100 * t.spread, 1) for impl, t in timings.items()},
        "background_cpus": rounded(background_cpus, 2),
        "error": error,
        "notes": list(p.notes),
    }


def against_libraries(ms: dict, mine) -> dict:
    """{"best_library", "ratio"}: the fastest library of `ms` ({impl: ms or None}), and its ms
    over `mine` (> 1: minitc is faster)."""
    libs = {lib: ms[lib] for lib in LIBRARIES if ms.get(lib) is not None}
    best = min(libs, key=libs.get) if libs else None
    return {"best_library": best, "ratio": sig(libs[best] / mine, 4) if best and mine else None}


def rated(w: Workload, mine, machine, threads: int) -> dict:
    """The rate of `mine` ms per call (GFLOP/s or GB/s, by the workload's kind), its % of the
    machine's peak at `threads` threads, and the work it is computed from."""
    rate = w.work / (mine * 1e-3) / 1e9 if mine else None
    peak = machine.peak(w.kind, threads) if machine is not None else None
    return {
        ("gflops" if w.kind == "compute" else "gbps"): sig(rate, 4),
        "peak_pct": rounded(100 * rate / peak, 1) if rate and peak else None,
        ("flops" if w.kind == "compute" else "bytes"): int(w.work),
    }


def run_workload(
    w: Workload,
    threads,
    suite: str,
    machine=None,
    repeats: int = 10,
    budget_s: float = 2.0,
    progress=None,
    wait_quiet_s: float = 0.0,
    target: LLVMTarget | str = HOST_TARGET,
) -> list:
    """Records of one workload, one per thread count, its kernel built for `target`. With
    `wait_quiet_s`, each thread count first waits (up to that long) for other processes to
    leave the CPUs alone."""
    say = progress or (lambda msg: None)
    say(f"{w.name}: building and checking")
    p = prepare(w, target=target)
    if p.compile_s is not None:
        say(f"{w.name}: compiled in {p.compile_s:.2f} s")
    rows = []
    for n in threads:
        if wait_quiet_s > 0:
            say(f"{w.name}: waiting up to {wait_quiet_s:g} s for other processes to go quiet")
            wait_for_quiet(wait_quiet_s)
        with thread_limit(n):
            error = p.error or check_minitc(p)
            fns = {impl: fn for impl, fn in p.fns.items() if fn is not None and not (impl == "minitc" and error)}
            say(f"{w.name}: timing {', '.join(fns) or 'nothing'} with {n} thread(s)")
            with BackgroundLoad() as load:
                timings = measure(fns, repeats=repeats, budget_s=budget_s) if fns else {}
        rows.append(record(p, n, timings, error, machine, suite, load.cpus))
        say(_summary(rows[-1]))
    return rows


def _summary(rec: dict) -> str:
    parts = [f"{impl} {rec[impl + '_ms']:.3f} ms" for impl in CPU_IMPLS if rec[impl + "_ms"] is not None]
    tail = f"  ERROR {rec['error']}" if rec["error"] else ""
    return f"{rec['workload']} [{rec['threads']}T]: " + ", ".join(parts) + tail


def run_suite(
    workloads,
    threads,
    suite: str,
    machine=None,
    repeats: int = 10,
    budget_s: float = 2.0,
    progress=None,
    context: dict | None = None,
    wait_quiet_s: float = 0.0,
    target: LLVMTarget | str = HOST_TARGET,
) -> list:
    """Records of every workload at every thread count, the kernels built for `target`;
    `context` (machine and run info) is attached to each record."""
    target = bench_target(target)
    records = []
    for i, w in enumerate(workloads):
        say = (lambda msg, i=i: progress(f"[{i + 1}/{len(workloads)}] {msg}")) if progress else None
        for rec in run_workload(w, threads, suite, machine, repeats, budget_s, say, wait_quiet_s, target):
            records.append({**rec, **(context or {})})
    return records
