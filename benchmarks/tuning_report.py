"""The tuning suites' presentation: one JSON row per workload and strategy (its fields are in
tuning.py's docstring), the table `python -m minitc.benchmarks --suite cpu-tune` prints, the
rate of one implementation, and the tuning-curve plot (best-so-far latency after each trial)."""

from __future__ import annotations

import math

from minitc.benchmarks import report
from minitc.benchmarks.runner import _r, _sig
from minitc.benchmarks.suites import Workload
from minitc.benchmarks.tables import aligned

LIBRARIES = ("numpy", "torch")


def impl_rate(rec: dict, impl: str):
    ms, work = rec.get(f"{impl}_ms"), rec.get("flops", rec.get("bytes"))
    return work / (ms * 1e-3) / 1e9 if ms and work else None


def format_table(records: list) -> str:
    """The suite's table: one row per workload, thread count and strategy."""
    head = [
        "workload",
        "thr",
        "strategy",
        "trials",
        "err",
        "kernel ms",
        "tpl kernel",
        "tuned ms",
        "template ms",
        "numpy ms",
        "torch ms",
        "tuned rate",
        "vs template",
        "vs best lib",
        "tune s",
        "s/trial",
    ]
    rows = []
    for r in records:
        unit = " GFLOP/s" if r["kind"] == "compute" else " GB/s"
        rows.append(
            [
                r["workload"],
                str(r["threads"]),
                r["strategy"],
                f"{r['trials']}/{r['trials_requested']}",
                str(r["errors"]),
                report._num(r.get("best_ms"), ".4g"),
                report._num(r.get("default_kernel_ms"), ".4g"),
                *(report._ms(r, impl) for impl in ("tuned", "default", "numpy", "torch")),
                report._num(impl_rate(r, "tuned"), ".1f", unit),
                report._num(r.get("speedup_vs_default"), ".2f", "x"),
                report._num(r.get("ratio"), ".2f", "x"),
                report._num(r.get("seconds"), ".1f"),
                report._num(r.get("overhead_s_per_trial"), ".2f"),
            ]
        )
    out = aligned(head, rows, left=3)
    out.append(
        "kernel ms / tpl kernel: the tuned and the template kernel timed bare by the tuner's runner; the other "
        "ms: in-process calls, interleaved (median ± half the IQR)"
    )
    out.append(
        "vs template = template ms / tuned ms; vs best lib = best library ms / tuned ms (> 1: tuned minitc "
        "is faster); s/trial = tuning overhead per trial (build, bookkeeping)"
    )
    models = sorted({r["cost_model"] for r in records if r.get("cost_model")})
    if models:
        out.append(f"evolutionary cost model: {', '.join(models)}")
    for r in records:
        if (r.get("background_cpus") or 0) >= report.NOISY_CPUS:
            out.append(
                f"warning {r['workload']} [{r['threads']}T]: other processes kept "
                f"{r['background_cpus']:.1f} CPUs busy while it was timed"
            )
        if r.get("error"):
            out.append(f"ERROR {r['workload']} [{r['threads']}T] {r['strategy']}: {r['error']}")
        for note in r.get("notes") or []:
            out.append(f"note {r['workload']} [{r['threads']}T]: {note}")
    return "\n".join(dict.fromkeys(out))  # notes shared by a workload's strategies once


def plot_curves(records: list, path: str, title: str | None = None) -> None:
    """Best-so-far latency vs trials: one subplot per workload (and thread count), one curve per
    strategy, with the template and the best library as horizontal lines."""
    plt = report.require_matplotlib()
    panels = list(dict.fromkeys((r["workload"], r["threads"]) for r in records))
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, n) in zip(axes.flat, panels):
        recs = [r for r in records if r["workload"] == name and r["threads"] == n]
        for r in recs:
            ys = [h if h is not None else math.nan for h in r["history"]]
            ax.plot(
                range(1, len(ys) + 1), ys, label=f"{r['strategy']} (best {report._num(r.get('best_ms'), '.3g')} ms)"
            )
        first = recs[0]
        if first.get("default_kernel_ms"):
            ax.axhline(
                first["default_kernel_ms"],
                color="gray",
                ls="--",
                lw=1,
                label=f"template {first['default_kernel_ms']:.3g} ms",
            )
        if first.get("default_ms"):
            ax.axhline(first["default_ms"], color="gray", ls=":", lw=1, label=f"template {first['default_ms']:.3g} ms*")
        lib = first.get("best_library")
        if lib and first.get(f"{lib}_ms"):
            ax.axhline(first[f"{lib}_ms"], color="black", ls="-.", lw=1, label=f"{lib} {first[f'{lib}_ms']:.3g} ms*")
        ax.set_title(f"{name} [{n} thread{'s' if n > 1 else ''}]", fontsize=9)
        ax.set_xlabel("trials", fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("best-so-far ms", fontsize=8)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.text(
        0.01,
        0.005,
        "curves, dashed template: bare kernel timed by the tuner's runner process\n"
        "*: timed in-process (tc.Function or the library call)",
        fontsize=7,
    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if rows == 1 else 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def record(
    w: Workload,
    strategy: str,
    trials: int,
    info: dict,
    timings: dict,
    errors: dict,
    notes: list,
    threads: int,
    background_cpus=None,
    suite=None,
    machine=None,
) -> dict:
    """One JSON row (see the module docstring): a workload tuned by one strategy."""
    r = info["result"]
    same = bool(info.get("same_as_template"))
    tuned_key = "default" if same else f"tuned:{strategy}"  # one program, one measurement
    ms = {
        impl: timings[key].median * 1e3 if key in timings else None
        for impl, key in (("tuned", tuned_key), ("default", "default"), ("numpy", "numpy"), ("torch", "torch"))
    }
    libs = {lib: ms[lib] for lib in LIBRARIES if ms[lib] is not None}
    best = min(libs, key=libs.get) if libs else None
    rate = w.work / (ms["tuned"] * 1e-3) / 1e9 if ms["tuned"] else None
    peak = machine.peak(w.kind, threads) if machine is not None else None
    error = info["error"] or errors.get(tuned_key)
    spread = {
        impl: _r(100 * timings[key].spread, 1)
        for impl, key in (("tuned", tuned_key), ("default", "default"), ("numpy", "numpy"), ("torch", "torch"))
        if key in timings
    }
    return {
        "suite": suite,
        "workload": w.name,
        "description": w.description,
        "kind": w.kind,
        "threads": threads,
        "strategy": strategy,
        "cost_model": info["cost_model"],
        "trials_requested": trials,
        "trials": r.trials if r else 0,
        "trials_resumed": r.resumed if r else 0,
        "errors": r.errors if r else 0,
        "best_ms": _sig(r.best_ms, 5) if r else None,
        **{f"{impl}_ms": _sig(v, 5) for impl, v in ms.items()},
        "best_library": best,
        "ratio": _sig(libs[best] / ms["tuned"], 4) if best and ms["tuned"] else None,
        "default_ratio": _sig(libs[best] / ms["default"], 4) if best and ms["default"] else None,
        "speedup_vs_default": _sig(ms["default"] / ms["tuned"], 4) if ms["default"] and ms["tuned"] else None,
        "same_as_template": same,
        ("gflops" if w.kind == "compute" else "gbps"): _sig(rate, 4),
        "peak_pct": _r(100 * rate / peak, 1) if rate and peak else None,
        ("flops" if w.kind == "compute" else "bytes"): int(w.work),
        "seconds": _r(r.seconds, 2) if r else None,
        "overhead_s_per_trial": _r(r.overhead_s_per_trial, 3) if r else None,
        "history": [_sig(h, 5) for h in r.history] if r else [],
        "workload_key": r.workload if r else None,
        "best_trace": r.best_trace if r else None,
        "spread_pct": spread,
        "background_cpus": _r(background_cpus, 2),
        "error": error,
        "notes": list(notes) + ([f"template: {errors['default']}"] if "default" in errors else []),
        "db": info["db"],
    }


def summary(rec: dict) -> str:
    parts = [
        f"{impl} {rec[impl + '_ms']:.4g} ms"
        for impl in ("tuned", "default", "numpy", "torch")
        if rec.get(impl + "_ms") is not None
    ]
    tail = f"  ERROR {rec['error']}" if rec.get("error") else ""
    return f"{rec['workload']} [{rec['threads']}T] {rec['strategy']}: " + ", ".join(parts) + tail
