"""Present the records of the `models` suite (benchmarks/models.py): a text table and a bar
chart of each system's time relative to PyTorch eager."""

from __future__ import annotations

from minitc.benchmarks.machine import host_cpu
from minitc.benchmarks.models_systems import SYSTEMS, ms_key
from minitc.benchmarks.report import NOISY_CPUS, machine_lines, require_matplotlib
from minitc.benchmarks.tables import aligned


def systems_in(records: list) -> list:
    return [s for s in SYSTEMS if any(s in r["systems"] for r in records)]


def _ms(rec: dict, system: str) -> str:
    entry = rec["systems"].get(system)
    if entry is None:
        return "-"
    if entry.get("error") or entry.get("ms") is None:
        return "error" if entry.get("error") else "-"
    ms, spread = entry["ms"], entry.get("spread_pct")
    return (f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}") + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def header(records: list) -> list:
    """The CPU the suite ran on, and its measured peaks when there are any."""
    host = records[0]["host"] if records else host_cpu()
    return [f"host: {host['cpu']} ({host['llvm_cpu']})"] + machine_lines(records[0].get("machine") if records else None)


def format_table(records: list) -> str:
    shown = systems_in(records)
    head = ["model", "thr", *(f"{s} ms" for s in shown), "vs eager", "compile s", "torch nodes", "rel err", "peak MiB"]
    rows = [
        [
            r["model"],
            str(r["threads"]),
            *(_ms(r, s) for s in shown),
            _num(r.get("minitc_vs_eager"), ".2f") + ("x" if r.get("minitc_vs_eager") else ""),
            _num(r.get("compile_s"), ".1f"),
            _num(r.get("torch_nodes"), "d"),
            _num(r.get("rel_err"), ".1e"),
            _num(r.get("peak_rss_mib"), ".0f"),
        ]
        for r in records
    ]
    out = aligned(head, rows)
    out.append(
        "ms = median ± half the IQR; vs eager = eager ms / minitc ms (> 1: minitc is faster); "
        "rel err = minitc's max abs error / max |eager output|; peak MiB: the process's resident peak while "
        "all systems of the model ran"
    )
    busy = [r for r in records if (r.get("background_cpus") or 0) >= NOISY_CPUS]
    if busy:
        text = ", ".join(f"{r['model']} [{r['threads']}T] {r['background_cpus']:.1f}" for r in busy)
        out.append(f"warning: other processes kept CPUs busy while these rows ran (CPUs): {text}; timings unreliable")
    seen = set()
    for r in records:
        where = f"{r['model']} [{r['threads']} threads]"
        if r.get("error") and not r["systems"]:  # the model itself could not be built
            out.append(f"ERROR {where}: {r['error']}")
        for system, entry in r["systems"].items():
            if entry.get("error"):
                out.append(f"ERROR {where} {system}: {entry['error']}")
        for note in r.get("notes") or []:
            if (r["model"], note) not in seen:
                out.append(f"note {r['model']}: {note}")
                seen.add((r["model"], note))
        parts = r.get("minitc_breakdown") or {}
        if parts.get("top_tasks") and (r["model"], "tasks") not in seen:
            slowest = "; ".join(f"{name} {ms:.1f}" for name, ms in parts["top_tasks"][:4])
            out.append(
                f"{r['model']}: minitc alone {parts['total_ms']:.1f} ms, of which torch nodes "
                f"{parts['torch_ms']:.1f} ms; slowest tasks (ms per call): {slowest}"
            )
            seen.add((r["model"], "tasks"))
        if r.get("torch_ops") and (r["model"], "ops") not in seen:
            ops = ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in r["torch_ops"].items())
            out.append(f"{r['model']}: minitc runs {r['torch_nodes']} node(s) through torch: {ops}")
            seen.add((r["model"], "ops"))
    return "\n".join(out)


def plot(records: list, path: str) -> None:
    """Bars of each system's median time relative to eager's (lower is faster), grouped by
    model, one panel per thread count; each bar is labelled with its ms."""
    plt = require_matplotlib()
    threads = sorted({r["threads"] for r in records})
    names = list(dict.fromkeys(r["model"] for r in records))
    shown = systems_in(records)
    fig, axes = plt.subplots(len(threads), 1, figsize=(max(6, 1.8 * len(names) + 2), 3.6 * len(threads)), squeeze=False)
    width = 0.8 / max(1, len(shown))
    for ax, n in zip(axes[:, 0], threads):
        by_name = {r["model"]: r for r in records if r["threads"] == n}
        for k, system in enumerate(shown):
            xs, heights, labels = [], [], []
            for i, name in enumerate(names):
                r = by_name.get(name) or {}
                ms, eager = r.get(ms_key(system)), r.get("eager_ms")
                xs.append(i + (k - (len(shown) - 1) / 2) * width)
                heights.append(ms / eager if ms and eager else 0.0)
                labels.append(f"{ms:.0f}" if ms else ("err" if (r.get("systems") or {}).get(system) else ""))
            bars = ax.bar(xs, heights, width, label=system)
            ax.bar_label(bars, labels, fontsize=6, padding=1)
        ax.axhline(1.0, color="grey", linewidth=0.6)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylabel("time / eager's (lower: faster)")
        ax.set_title(f"{n} thread{'s' if n > 1 else ''} (labels: median ms)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(shown), fontsize=8)
    host = records[0]["host"] if records else host_cpu()
    fig.suptitle(f"whole models on {host['cpu']} ({host['llvm_cpu']})", fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=120)
    plt.close(fig)
