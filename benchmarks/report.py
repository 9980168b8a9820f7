"""Present result records: a text table, the JSON file and a bar chart."""

from __future__ import annotations

import json

from minitc.benchmarks.machine import host_cpu
from minitc.benchmarks.runner import IMPLS
from minitc.benchmarks.tables import aligned

NOISY_CPUS = 0.25  # other processes' CPU use that makes a row's timings suspect
PLOT_EXTRA = "pip install 'minitc[plot]'  (or: pip install matplotlib)"


def _rate(rec: dict, impl: str):
    """GFLOP/s or GB/s of one implementation, from its time and the record's work."""
    ms = rec.get(f"{impl}_ms")
    work = rec.get("flops", rec.get("bytes"))
    return work / (ms * 1e-3) / 1e9 if ms and work else None


def _peak(rec: dict):
    kind_key = "fma_gflops" if rec["kind"] == "compute" else "triad_gbps"
    for row in (rec.get("machine") or {}).get("peaks", []):
        if row["threads"] == rec["threads"]:
            return row.get(kind_key)
    return None


def peak_pct(rec: dict, impl: str):
    rate, peak = _rate(rec, impl), _peak(rec)
    return 100 * rate / peak if rate and peak else None


def _ms(rec: dict, impl: str) -> str:
    ms = rec.get(f"{impl}_ms")
    if ms is None:
        return "error" if impl == "minitc" and rec.get("error") else "-"
    spread = (rec.get("spread_pct") or {}).get(impl)
    text = f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"
    return text + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def _num(x, fmt: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, fmt) + suffix


def _size(nbytes: int) -> str:
    return f"{nbytes // 2**20} MiB" if nbytes >= 2**20 and nbytes % 2**20 == 0 else f"{nbytes // 1024} KiB"


def target_lines(target) -> list:
    """Header lines naming the target minitc's kernels were built for and the host CPU they
    ran on (the same CPU unless --target chose another)."""
    d, host = target.describe(), host_cpu()
    vectors = f"{d['vector_bits']}-bit vectors"
    if d["preferred_vector_bits"] != d["vector_bits"]:
        vectors += f" ({d['preferred_vector_bits']}-bit for memory-bound kernels)"
    caches = ", ".join(f"{level.capitalize()} {_size(n)}" for level, n in d["caches"].items() if n)
    return [
        f"target: {target.string}: {vectors}, {d['vector_registers']} vector registers, {caches}",
        f"host: {host['cpu']} ({host['llvm_cpu']})",
    ]


def machine_lines(machine: dict) -> list:
    """Header lines describing the measured machine."""
    if not machine:
        return ["machine: not measured (--no-machine): % of peak left empty"]
    rows = machine.get("peaks", [])
    ts = "/".join(str(r["threads"]) for r in rows)

    def col(key, fmt):
        return "/".join(_num(r.get(key), fmt) for r in rows)

    return [
        f"machine: {machine['cpu']} ({machine.get('llvm_cpu')}), {machine['cpus']} CPUs",
        f"  peak FMA {col('fma_gflops', '.1f')} GFLOP/s, STREAM triad {col('triad_gbps', '.1f')} GB/s "
        f"({ts} threads, best of 7)",
        f"  parallel launch {col('launch_overhead_us', '.2f')} us (empty tasks), "
        f"fork/join {col('fork_join_us', '.2f')} us ({ts} threads)",
    ] + (
        [
            f"  warning: other processes kept {machine['background_cpus']:.1f} CPUs busy while the machine was "
            "measured: the peaks are too low"
        ]
        if (machine.get("background_cpus") or 0) >= NOISY_CPUS
        else []
    )


def format_table(records: list) -> str:
    """A plain-text table, one row per record, followed by the errors and notes."""
    head = [
        "workload",
        "thr",
        "minitc ms",
        "numpy ms",
        "torch ms",
        "minitc rate",
        "%peak",
        "best lib %peak",
        "vs best",
        "compile s",
    ]
    rows = []
    for r in records:
        best = r.get("best_library")
        rate_key = "gflops" if r["kind"] == "compute" else "gbps"
        unit = " GFLOP/s" if r["kind"] == "compute" else " GB/s"
        rows.append(
            [
                r["workload"],
                str(r["threads"]),
                *(_ms(r, impl) for impl in IMPLS),
                _num(r.get(rate_key), ".1f", unit),
                _num(r.get("peak_pct"), ".1f", "%"),
                _num(peak_pct(r, best) if best else None, ".1f", f"% {best}" if best else ""),
                _num(r.get("ratio"), ".2f", "x"),
                _num(r.get("compile_s"), ".2f"),
            ]
        )
    out = aligned(head, rows)
    out.append("vs best = best library ms / minitc ms (> 1: minitc is faster); ms = median ± half the IQR")
    out.append(
        "%peak: compute vs peak FMA, memory vs STREAM triad (read-mostly kernels can pass 100%: "
        "triad also pays write-allocate traffic)"
    )
    busy = [r for r in records if (r.get("background_cpus") or 0) >= NOISY_CPUS]
    if busy and len(busy) == len(records):
        mean = sum(r["background_cpus"] for r in busy) / len(busy)
        out.append(
            f"warning: other processes kept {mean:.1f} CPUs busy on average while every row ran; "
            "the timings, multi-threaded ones most, are unreliable"
        )
    elif busy:
        rows_text = ", ".join(f"{r['workload']} [{r['threads']}T] {r['background_cpus']:.1f}" for r in busy)
        out.append(
            f"warning: other processes kept CPUs busy while these rows ran (CPUs): {rows_text}; "
            "their timings, multi-threaded ones most, are unreliable"
        )
    for r in records:
        if r.get("error"):
            out.append(f"ERROR {r['workload']} [{r['threads']} threads]: {r['error']}")
        for note in r.get("notes") or []:
            out.append(f"note {r['workload']} [{r['threads']} threads]: {note}")
    return "\n".join(out)


def write_json(records: list, path: str) -> None:
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")


def require_matplotlib():
    """matplotlib.pyplot with the file-only Agg backend; a clear error when it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(records: list, path: str) -> None:
    """Grouped bars of % of machine peak per workload (minitc, numpy, torch), one panel per
    thread count; without machine peaks, GFLOP/s or GB/s instead."""
    plt = require_matplotlib()
    threads = sorted({r["threads"] for r in records})
    names = list(dict.fromkeys(r["workload"] for r in records))
    have_peak = any(_peak(r) for r in records)
    fig, axes = plt.subplots(len(threads), 1, figsize=(max(6, 1.3 * len(names) + 2), 3.2 * len(threads)), squeeze=False)
    width = 0.8 / len(IMPLS)
    for ax, n in zip(axes[:, 0], threads):
        by_name = {r["workload"]: r for r in records if r["threads"] == n}
        for k, impl in enumerate(IMPLS):
            values = []
            for name in names:
                r = by_name.get(name)
                v = (peak_pct(r, impl) if have_peak else _rate(r, impl)) if r else None
                values.append(v or 0.0)
            ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, label=impl)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("% of machine peak" if have_peak else "GFLOP/s or GB/s")
        ax.set_title(f"{n} thread{'s' if n > 1 else ''}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(IMPLS), fontsize=8)
    machine = records[0].get("machine") if records else None
    if machine:
        fig.suptitle(
            f"{records[0].get('suite', '')} on {machine['cpu']} (compute: % of FMA peak, memory: % of triad bandwidth)",
            fontsize=10,
        )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
