"""The charts of `--plot` (matplotlib, file-only Agg backend), drawn from the same records as
the tables of report.py:

- `plot`: cpu-core and smoke, % of the machine's peak per workload, a panel per thread count;
- `gpu_plot`: the GPU suites, speed relative to torch;
- `models_plot`: the models suite, each system's time relative to eager's;
- `plot_curves`: the tuning suites (and `minitc tune`), best-so-far latency after each trial;
- `tlm_curves`: tlm-eval, the language model's and evolutionary search's best-so-far curves.

Grouped bars (`bars`), panels per thread count (`thread_panels`) and best-so-far curves
(`curve`) are drawn one way for all of them.
"""

from __future__ import annotations

import math

from minitc.benchmarks.machine import host_cpu
from minitc.benchmarks.report import CPU_IMPLS, GPU_IMPLS, num, peak, peak_pct, rate, systems_in

PLOT_EXTRA = "pip install 'minitc[plot]'  (or: pip install matplotlib)"


def require_matplotlib():
    """matplotlib.pyplot with the file-only Agg backend; a clear error when it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(ax, count: int, series: dict, labels: dict | None = None) -> None:
    """Grouped bars: for each entry of `series` ({label: [value per group]}) one bar in each of
    the `count` groups, side by side around the group's tick; `labels` ({label: [text per
    group]}) writes text above the bars."""
    width = 0.8 / max(1, len(series))
    for k, (label, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(count)]
        drawn = ax.bar(xs, values, width, label=label)
        if labels:
            ax.bar_label(drawn, labels[label], fontsize=6, padding=1)


def thread_panels(plt, records: list, key: str, width_per_name: float, height: float) -> tuple:
    """(figure, [(axes, threads, {name: record})], names): one panel per thread count of the
    records, stacked, each with the records of that count by `key` (their group names)."""
    threads = sorted({r["threads"] for r in records})
    names = list(dict.fromkeys(r[key] for r in records))
    fig, axes = plt.subplots(
        len(threads), 1, figsize=(max(6, width_per_name * len(names) + 2), height * len(threads)), squeeze=False
    )
    panels = [(ax, n, {r[key]: r for r in records if r["threads"] == n}) for ax, n in zip(axes[:, 0], threads)]
    return fig, panels, names


def _legend_on_top(fig, ax, ncol: int) -> None:
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=ncol, fontsize=8)


def _save(plt, fig, path: str, dpi: int = 120, **layout) -> None:
    fig.tight_layout(**layout)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot(records: list, path: str) -> None:
    """Grouped bars of % of machine peak per workload (minitc, numpy, torch), one panel per
    thread count; without machine peaks, GFLOP/s or GB/s instead."""
    plt = require_matplotlib()
    have_peak = any(peak(r) for r in records)
    fig, panels, names = thread_panels(plt, records, "workload", 1.3, 3.2)
    for ax, n, by_name in panels:
        value = peak_pct if have_peak else rate
        series = {i: [(value(by_name[w], i) if w in by_name else None) or 0.0 for w in names] for i in CPU_IMPLS}
        bars(ax, len(names), series)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("% of machine peak" if have_peak else "GFLOP/s or GB/s")
        ax.set_title(f"{n} thread{'s' if n > 1 else ''}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    _legend_on_top(fig, panels[0][0], len(CPU_IMPLS))
    machine = records[0].get("machine") if records else None
    if machine:
        fig.suptitle(
            f"{records[0].get('suite', '')} on {machine['cpu']} (compute: % of FMA peak, memory: % of triad bandwidth)",
            fontsize=10,
        )
    _save(plt, fig, path)


def gpu_plot(records: list, path: str) -> None:
    """Bars of speed relative to torch (torch = 1) per workload: minitc, its template, Triton."""
    plt = require_matplotlib()
    impls = [i for i in GPU_IMPLS if i != "torch" and any(r.get(f"{i}_ms") for r in records)]
    names = [r["workload"] for r in records]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(names) + 2), 3.6))
    series = {
        impl.replace("_", " "): [
            (r["torch_ms"] / r[f"{impl}_ms"]) if r.get("torch_ms") and r.get(f"{impl}_ms") else 0.0 for r in records
        ]
        for impl in impls
    }
    bars(ax, len(names), series)
    ax.axhline(1.0, color="black", linewidth=0.8, label="torch (cuBLAS/cuDNN)")
    ax.set_xticks(range(len(names)), names, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("speed vs torch (torch ms / ms)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if records:
        ax.set_title(f"{records[0]['suite']} on {records[0]['device']['name']} (float32, no TF32)", fontsize=10)
    _save(plt, fig, path)


def models_plot(records: list, path: str, systems) -> None:
    """Bars of each system's median time relative to eager's (lower is faster), grouped by
    model, one panel per thread count; each bar is labelled with its ms."""
    plt = require_matplotlib()
    shown = systems_in(records, systems)
    fig, panels, names = thread_panels(plt, records, "model", 1.8, 3.6)
    for ax, n, by_name in panels:
        series, labels = {}, {}
        for system in shown:
            entries = [(by_name.get(name) or {}).get("systems", {}).get(system) for name in names]
            eager = [(by_name.get(name) or {}).get("eager_ms") for name in names]
            ms = [(e or {}).get("ms") for e in entries]
            series[system] = [m / e if m and e else 0.0 for m, e in zip(ms, eager)]
            labels[system] = [f"{m:.0f}" if m else ("err" if e else "") for m, e in zip(ms, entries)]
        bars(ax, len(names), series, labels)
        ax.axhline(1.0, color="grey", linewidth=0.6)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel("time / eager's (lower: faster)")
        ax.set_title(f"{n} thread{'s' if n > 1 else ''} (labels: median ms)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    _legend_on_top(fig, panels[0][0], len(shown))
    host = records[0]["host"] if records else host_cpu()
    fig.suptitle(f"whole models on {host['cpu']} ({host['llvm_cpu']})", fontsize=10, x=0.02, ha="left")
    _save(plt, fig, path, rect=(0, 0, 1, 0.94))


def curve(ax, history: list, label: str) -> None:
    """Best-so-far ms after each trial (None: nothing worked yet)."""
    ax.plot(range(1, len(history) + 1), [h if h is not None else math.nan for h in history], label=label)


def plot_curves(records: list, path: str, title: str | None = None) -> None:
    """Best-so-far latency vs trials: one subplot per workload (and thread count), one curve per
    strategy, with the template and the best library as horizontal lines."""
    plt = require_matplotlib()
    panels = list(dict.fromkeys((r["workload"], r["threads"]) for r in records))
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, n) in zip(axes.flat, panels):
        recs = [r for r in records if r["workload"] == name and r["threads"] == n]
        for r in recs:
            curve(ax, r["history"], f"{r['strategy']} (best {num(r.get('best_ms'), '.3g')} ms)")
        first = recs[0]
        if first.get("default_kernel_ms"):
            ms = first["default_kernel_ms"]
            ax.axhline(ms, color="gray", ls="--", lw=1, label=f"template {ms:.3g} ms")
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
    _save(plt, fig, path, rect=(0, 0.06 if rows == 1 else 0.03, 1, 1))


def tlm_curves(rows: list, path: str) -> None:
    """tlm-eval: per workload, TLM's and evolutionary search's best-so-far ms after each
    measured program (log scale), with the hand template's as a line."""
    plt = require_matplotlib()
    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.2), squeeze=False)
    for ax, row in zip(axes[0], rows):
        curve(ax, row["tlm_history"], "tlm")
        curve(ax, row["evo_history"], "evolutionary")
        if row["template_ms"]:
            ax.axhline(row["template_ms"], color="gray", linestyle=":", label="template")
        ax.set_xscale("log")
        ax.set_title(row["workload"])
        ax.set_xlabel("measured programs")
        ax.set_ylabel("best ms")
        ax.legend(fontsize=7)
    _save(plt, fig, path, dpi=110)
