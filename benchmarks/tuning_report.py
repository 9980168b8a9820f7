"""The tuning suites' presentation: the table `python -m minitc.benchmarks --suite cpu-tune`
prints, the rate of one implementation, and the tuning-curve plot (best-so-far latency after
each trial)."""

from __future__ import annotations

import math

from minitc.benchmarks import report


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
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]
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
