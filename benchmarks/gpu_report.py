"""The GPU suites' output (benchmarks/gpu_core.py): the table printed after a run and the plot
of speed relative to torch, both from the JSON records."""

from __future__ import annotations

from minitc.benchmarks.tables import aligned

IMPLS = ("minitc", "minitc_template", "torch", "triton")  # the implementations a gpu-core record times


def _ms(rec: dict, impl: str) -> str:
    ms = rec.get(f"{impl}_ms")
    if ms is None:
        return "error" if impl == "minitc" and rec.get("error") else "-"
    spread = (rec.get("spread_pct") or {}).get(impl)
    return f"{ms:.4g}" + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def format_table(records: list) -> str:
    """The device line, a table (one row per workload), then errors and notes."""
    tuned = any(r.get("minitc_template_ms") for r in records)
    impls = ["minitc"] + (["minitc_template"] if tuned else []) + ["torch", "triton"]
    head = (
        ["workload"]
        + [f"{i.replace('_', ' ')} ms" for i in impls]
        + ["minitc rate", "torch rate", "triton rate", "%peak", "vs torch", "vs triton", "compile s"]
    )
    rows = []
    for r in records:
        rate = r.get("rates") or {}
        cell = lambda x, f, s="": "-" if x is None else format(x, f) + s  # noqa: E731
        rows.append(
            [r["workload"]]
            + [_ms(r, i) for i in impls]
            + [cell(rate.get(i), ".5g", " " + r["unit"]) for i in ("minitc", "torch", "triton")]
            + [
                cell(r.get("peak_pct"), ".1f", "%"),
                cell(r.get("vs_torch"), ".2f", "x"),
                cell(r.get("vs_triton"), ".2f", "x"),
                cell(r.get("compile_s"), ".2f"),
            ]
        )
    out = []
    if records:
        d, run = records[0]["device"], records[0]["run"]
        peak, dram = d.get("fp32_peak_gflops") or "?", d.get("bandwidth_gbps") or "?"
        out.append(
            f"device: {d['name']} ({d['arch']}, {d['sm_count']} SMs), nominal FP32 peak {peak} GFLOP/s, "
            f"DRAM {dram} GB/s"
        )
        out.append(f"precision: {run['precision']}")
        out.append(f"timing: {run['timing']} ({run['flush_mib']} MiB flush = {run['flush_ms']} ms)")
    out += aligned(head, rows)
    out.append(
        "vs torch / vs triton = library ms / minitc ms (> 1: minitc is faster); ms = median ± half the IQR; "
        "%peak: minitc vs the nominal FP32 peak (compute) or DRAM bandwidth (memory)"
    )
    if records and records[0]["run"].get("triton_note"):
        out.append(f"note: {records[0]['run']['triton_note']}")
    for r in records:
        if r.get("error"):
            out.append(f"ERROR {r['workload']}: {r['error']}")
        for note in r.get("notes") or []:
            out.append(f"note {r['workload']}: {note}")
        if r.get("launch_bound"):
            out.append(
                f"note {r['workload']}: enqueueing {', '.join(r['launch_bound'])} took about as long as the "
                "L2 flush that hides it; those times may include launch overhead"
            )
    return "\n".join(out)


def plot(records: list, path: str) -> None:
    """Bars of speed relative to torch (torch = 1) per workload: minitc, its template, Triton."""
    from minitc.benchmarks.report import require_matplotlib

    plt = require_matplotlib()
    impls = [i for i in IMPLS if i != "torch" and any(r.get(f"{i}_ms") for r in records)]
    names = [r["workload"] for r in records]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(names) + 2), 3.6))
    width = 0.8 / max(1, len(impls))
    for k, impl in enumerate(impls):
        values = [
            (r["torch_ms"] / r[f"{impl}_ms"]) if r.get("torch_ms") and r.get(f"{impl}_ms") else 0.0 for r in records
        ]
        ax.bar(
            [i + (k - (len(impls) - 1) / 2) * width for i in range(len(names))],
            values,
            width,
            label=impl.replace("_", " "),
        )
    ax.axhline(1.0, color="black", linewidth=0.8, label="torch (cuBLAS/cuDNN)")
    ax.set_xticks(range(len(names)), names, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("speed vs torch (torch ms / ms)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if records:
        ax.set_title(f"{records[0]['suite']} on {records[0]['device']['name']} (float32, no TF32)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
