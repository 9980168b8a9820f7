"""The explorer's Run button (inside the sandboxed worker): compile the schedule for the CPU,
check its output against numpy, and time it against numpy, interleaved, median of repeats.

The reference is `te_eval` (the tensor expression evaluated with numpy, independent of the
schedule). The numpy time is that of the float32 numpy baseline `minitc tune` uses for the
operator (BLAS for products, im2col + GEMM for convolutions); for a hand-typed expression
there is none, so te_eval itself is timed and labelled as such. The rate is GFLOP/s for a
compute-bound kernel and GB/s (inputs read and the output written once) for a memory-bound
one, and the page compares it with the machine's FMA or STREAM-triad peak.
"""

from __future__ import annotations

import numpy as np

import minitc as tc
from minitc import te_eval
from minitc.benchmarks.baselines import numpy_fn, workload_for
from minitc.explanation import estimate_flops
from minitc.te import ComputeOp, graph
from minitc.timing import measure

COMPUTE_BOUND_INTENSITY = 2.0  # flops per byte above which a hand-typed expression is rated in GFLOP/s


def _size(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64))


def estimated_work(outputs) -> tuple:
    """(kind, work) of a hand-typed expression: a multiply-add (2 flops) per reduction point;
    compute-bound when that is over COMPUTE_BOUND_INTENSITY flops per byte moved."""
    tensors = graph(outputs)
    flops = estimate_flops(outputs) or 0.0
    moved = [t for t in tensors if not isinstance(t.op, ComputeOp)] + list(outputs)
    nbytes = float(sum(_size(t) * np.dtype(t.dtype).itemsize for t in moved))
    if flops and flops / nbytes >= COMPUTE_BOUND_INTENSITY:
        return "compute", flops
    return "memory", nbytes


def _random_input(t, rng) -> np.ndarray:
    dtype = np.dtype(t.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(t.shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, t.shape).astype(dtype)
    return rng.integers(-8, 8, t.shape).astype(dtype)


def check(got: list, expected: list) -> dict:
    """Max absolute error, relative to the reference's largest magnitude, and a verdict."""
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return {"ok": False, "message": f"output shape {g.shape}, expected {e.shape}"}
        if e.dtype.kind == "f":
            scale = max(float(np.nanmax(np.abs(e), initial=0.0)), 1e-30)
            same = (g == e) | (np.isnan(g) & np.isnan(e))  # equal infinities and NaN where numpy has NaN
            err = np.where(same, 0.0, np.abs(g.astype(np.float64) - e.astype(np.float64)))
            worst = float("inf") if np.isnan(err).any() else float(np.max(err, initial=0.0))
            ok &= worst <= 1e-3 * scale + 1e-6
            worst_abs, worst_rel = max(worst_abs, worst), max(worst_rel, worst / scale)
        else:
            worst = float(np.max(np.abs(g.astype(np.int64) - e.astype(np.int64)), initial=0))
            ok &= worst == 0
            worst_abs = max(worst_abs, worst)
    verdict = "matches" if ok else "differs from"
    message = f"{verdict} the numpy reference (max abs error {worst_abs:.3g}, {worst_rel:.3g} of the largest value)"
    return {"ok": bool(ok), "max_abs_error": worst_abs, "max_rel_error": worst_rel, "message": message}


def run_kernel(program, payload: dict) -> dict:
    """Compile, check and time `program.schedule`; `payload["peak"]` is the machine's peak
    ({"fma_gflops", "triad_gbps", ...}) or None."""
    s = program.schedule
    if any(step.kind == "bind" for step in s.trace):
        raise tc.ScheduleError(
            "Run times CPU kernels, and this schedule binds loops to GPU indices; "
            "look at its CUDA C in the CUDA tab, or press template with another tab open for a CPU schedule"
        )
    f = tc.build(s, payload.get("target") or "llvm")
    input_names, output_names = s.arguments()
    inputs = [s.tensor(n) for n in input_names]
    outputs = [s.tensor(n) for n in output_names]
    rng = np.random.default_rng(0)
    call = program.call
    if call is not None:
        arrays = list(workload_for(call).make_inputs(rng))
    else:
        arrays = [_random_input(t, rng) for t in inputs]
    result = f(*arrays)
    got = list(result) if isinstance(result, (list, tuple)) else [result]
    expected = te_eval.evaluate(outputs, dict(zip(inputs, arrays)))  # the definition, not the schedule
    correct = check(got, expected)

    if call is not None:
        baseline, numpy_label = numpy_fn(call.op, call.kwargs), "numpy"
        work = call.flops()
        kind, work = ("compute", work) if work else ("memory", float(call.bytes()))
    else:
        baseline, numpy_label = None, "numpy (te_eval, the reference interpreter)"
        kind, work = estimated_work(outputs)
    reference_inputs = dict(zip(inputs, arrays))
    fns = {
        "minitc": lambda: f(*arrays, out=result),
        "numpy": (lambda: baseline(*arrays)) if baseline else (lambda: te_eval.evaluate(outputs, reference_inputs)),
    }
    budget = float(payload.get("budget_s") or 0.5)
    timings = measure(fns, repeats=10, budget_s=budget, min_sample_s=0.005)
    minitc_s, numpy_s = timings["minitc"].median, timings["numpy"].median
    unit = "GFLOP/s" if kind == "compute" else "GB/s"
    rate = work / minitc_s / 1e9
    peak = payload.get("peak") or {}
    peak_rate = peak.get("fma_gflops" if kind == "compute" else "triad_gbps")
    return {
        "correct": correct,
        "minitc_ms": 1e3 * minitc_s,
        "numpy_ms": 1e3 * numpy_s,
        "numpy_label": numpy_label,
        "speedup": numpy_s / minitc_s,
        "kind": kind,
        "unit": unit,
        "rate": rate,
        "numpy_rate": work / numpy_s / 1e9,
        "peak": peak_rate,
        "peak_name": "FMA peak" if kind == "compute" else "STREAM triad",
        "peak_fraction": rate / peak_rate if peak_rate else None,
        "threads": tc.get_num_threads(),
        "rounds": len(timings["minitc"].samples),
    }
