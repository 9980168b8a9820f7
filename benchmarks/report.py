"""Present benchmark records: the plain-text tables every suite prints and the JSON file. One
place for each piece, shared by all suites:

- the records' numbers and words: `sig`, `rounded`, `short` (an exception in one line);
- a table's cells: `timed` (median ms ± half the IQR), `num`, `rate` (GFLOP/s or GB/s);
- `aligned`, the table itself, and `busy_lines` / `problem_lines`, the warnings, errors and notes
  under it;
- each suite's columns: `format_table` (cpu-core, smoke), `tuning_table` (cpu-tune, smoke-tune),
  `gpu_table`, `models_table`, `zoo_table`, `scaling_table`; tlm_report.py builds tlm-eval's
  from `aligned`;
- `write_json`. The charts (`--plot`) are in plots.py.
"""

from __future__ import annotations

import json

from minitc.benchmarks.machine import host_cpu

CPU_IMPLS = ("minitc", "numpy", "torch")  # what a cpu-core record times
GPU_IMPLS = ("minitc", "minitc_template", "torch", "triton")  # what a gpu-core record times
NOISY_CPUS = 0.25  # other processes' CPU use that makes a row's timings suspect


# ---------------------------------------------------------------------------------------------
# numbers, words and cells


def sig(x, digits: int):
    """`x` to `digits` significant digits (None stays None)."""
    return None if x is None else float(f"{float(x):.{digits}g}")


def rounded(x, digits: int):
    """`x` rounded to `digits` decimals (None stays None)."""
    return None if x is None else round(float(x), digits)


def short(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def num(x, fmt: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, fmt) + suffix


def timed(ms, spread=None, fmt=".3f", failed=False) -> str:
    """A median time and half its interquartile spread (in % of the median): `1.234 ±2%`;
    "error" where it failed, "-" where it was not timed. `fmt` a format spec or a function of ms."""
    if ms is None:
        return "error" if failed else "-"
    text = fmt(ms) if callable(fmt) else format(ms, fmt)
    return text + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def impl_ms(rec: dict, impl: str, fmt=".3f") -> str:
    """The `timed` cell of one implementation of a record (`{impl}_ms`, `spread_pct[impl]`)."""
    spread = (rec.get("spread_pct") or {}).get(impl)
    return timed(rec.get(f"{impl}_ms"), spread, fmt, impl == "minitc" and bool(rec.get("error")))


def rate(rec: dict, impl: str):
    """GFLOP/s or GB/s of one implementation, from its time and the record's work."""
    ms = rec.get(f"{impl}_ms")
    work = rec.get("flops", rec.get("bytes"))
    return work / (ms * 1e-3) / 1e9 if ms and work else None


def peak(rec: dict):
    """The machine's peak the record's kind is rated against at its thread count, or None."""
    kind_key = "fma_gflops" if rec["kind"] == "compute" else "triad_gbps"
    for row in (rec.get("machine") or {}).get("peaks", []):
        if row["threads"] == rec["threads"]:
            return row.get(kind_key)
    return None


def peak_pct(rec: dict, impl: str):
    got, top = rate(rec, impl), peak(rec)
    return 100 * got / top if got and top else None


def _unit(rec: dict) -> str:
    return " GFLOP/s" if rec["kind"] == "compute" else " GB/s"


def _cpu_ms(ms: float) -> str:
    return f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


# ---------------------------------------------------------------------------------------------
# the table and what goes under it


def aligned(head: list, rows: list, left: int = 1) -> list:
    """The lines of a table: the header, a rule, then the rows. The first `left` columns are
    left-aligned, the others right-aligned, each as wide as its widest cell."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(head), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]


def busy_lines(records: list, where) -> list:
    """A warning naming the rows (`where(record)`) that other processes' CPU use disturbed."""
    busy = [r for r in records if (r.get("background_cpus") or 0) >= NOISY_CPUS]
    if busy and len(busy) == len(records):
        mean = sum(r["background_cpus"] for r in busy) / len(busy)
        return [
            f"warning: other processes kept {mean:.1f} CPUs busy on average while every row ran; "
            "the timings, multi-threaded ones most, are unreliable"
        ]
    if busy:
        rows = ", ".join(dict.fromkeys(f"{where(r)} {r['background_cpus']:.1f}" for r in busy))
        return [
            f"warning: other processes kept CPUs busy while these rows ran (CPUs): {rows}; "
            "their timings, multi-threaded ones most, are unreliable"
        ]
    return []


def problem_lines(records: list, where, error_where=None) -> list:
    """`ERROR {where}: ...` and `note {where}: ...` lines of the records, each line once."""
    out = []
    for r in records:
        if r.get("error"):
            out.append(f"ERROR {(error_where or where)(r)}: {r['error']}")
        out += [f"note {where(r)}: {note}" for note in r.get("notes") or []]
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# headers


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
        return "/".join(num(r.get(key), fmt) for r in rows)

    lines = [
        f"machine: {machine['cpu']} ({machine.get('llvm_cpu')}), {machine['cpus']} CPUs",
        f"  peak FMA {col('fma_gflops', '.1f')} GFLOP/s, STREAM triad {col('triad_gbps', '.1f')} GB/s "
        f"({ts} threads, best of 7)",
        f"  parallel launch {col('launch_overhead_us', '.2f')} us (empty tasks), "
        f"fork/join {col('fork_join_us', '.2f')} us ({ts} threads)",
    ]
    if (machine.get("background_cpus") or 0) >= NOISY_CPUS:
        lines.append(
            f"  warning: other processes kept {machine['background_cpus']:.1f} CPUs busy while the machine was "
            "measured: the peaks are too low"
        )
    return lines


def host_lines(records: list) -> list:
    """The CPU a suite ran on (as its records say), and its measured peaks when there are any."""
    host = records[0]["host"] if records else host_cpu()
    return [f"host: {host['cpu']} ({host['llvm_cpu']})"] + machine_lines(records[0].get("machine") if records else None)


# ---------------------------------------------------------------------------------------------
# the suites' tables


def format_table(records: list) -> str:
    """cpu-core and smoke: one row per workload and thread count, then the errors and notes."""
    head = ["workload", "thr", *(f"{i} ms" for i in CPU_IMPLS), "minitc rate", "%peak", "best lib %peak", "vs best"]
    head.append("compile s")
    rows = []
    for r in records:
        best = r.get("best_library")
        rows.append(
            [
                r["workload"],
                str(r["threads"]),
                *(impl_ms(r, impl, _cpu_ms) for impl in CPU_IMPLS),
                num(r.get("gflops" if r["kind"] == "compute" else "gbps"), ".1f", _unit(r)),
                num(r.get("peak_pct"), ".1f", "%"),
                num(peak_pct(r, best) if best else None, ".1f", f"% {best}" if best else ""),
                num(r.get("ratio"), ".2f", "x"),
                num(r.get("compile_s"), ".2f"),
            ]
        )
    out = aligned(head, rows)
    out.append("vs best = best library ms / minitc ms (> 1: minitc is faster); ms = median ± half the IQR")
    out.append(
        "%peak: compute vs peak FMA, memory vs STREAM triad (read-mostly kernels can pass 100%: "
        "triad also pays write-allocate traffic)"
    )
    out += busy_lines(records, lambda r: f"{r['workload']} [{r['threads']}T]")
    out += problem_lines(records, lambda r: f"{r['workload']} [{r['threads']} threads]")
    return "\n".join(out)


def tuning_table(records: list) -> str:
    """cpu-tune and smoke-tune (and `minitc tune`): one row per workload, thread count and strategy."""
    head = ["workload", "thr", "strategy", "trials", "err", "kernel ms", "tpl kernel", "tuned ms", "template ms"]
    head += ["numpy ms", "torch ms", "tuned rate", "vs template", "vs best lib", "tune s", "s/trial"]
    rows = [
        [
            r["workload"],
            str(r["threads"]),
            r["strategy"],
            f"{r['trials']}/{r['trials_requested']}",
            str(r["errors"]),
            num(r.get("best_ms"), ".4g"),
            num(r.get("default_kernel_ms"), ".4g"),
            *(impl_ms(r, impl, _cpu_ms) for impl in ("tuned", "default", "numpy", "torch")),
            num(rate(r, "tuned"), ".1f", _unit(r)),
            num(r.get("speedup_vs_default"), ".2f", "x"),
            num(r.get("ratio"), ".2f", "x"),
            num(r.get("seconds"), ".1f"),
            num(r.get("overhead_s_per_trial"), ".2f"),
        ]
        for r in records
    ]
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
    out += busy_lines(records, lambda r: f"{r['workload']} [{r['threads']}T]")
    out += problem_lines(
        records,
        lambda r: f"{r['workload']} [{r['threads']}T]",
        lambda r: f"{r['workload']} [{r['threads']}T] {r['strategy']}",
    )
    return "\n".join(out)


def gpu_table(records: list) -> str:
    """gpu-core and gpu-smoke: the device line, one row per workload, then errors and notes."""
    tuned = any(r.get("minitc_template_ms") for r in records)
    impls = ["minitc"] + (["minitc_template"] if tuned else []) + ["torch", "triton"]
    head = ["workload"] + [f"{i.replace('_', ' ')} ms" for i in impls]
    head += ["minitc rate", "torch rate", "triton rate", "%peak", "vs torch", "vs triton", "compile s"]
    rows = []
    for r in records:
        rates = r.get("rates") or {}
        rows.append(
            [r["workload"]]
            + [impl_ms(r, i, ".4g") for i in impls]
            + [num(rates.get(i), ".5g", " " + r["unit"]) for i in ("minitc", "torch", "triton")]
            + [
                num(r.get("peak_pct"), ".1f", "%"),
                num(r.get("vs_torch"), ".2f", "x"),
                num(r.get("vs_triton"), ".2f", "x"),
                num(r.get("compile_s"), ".2f"),
            ]
        )
    out = []
    if records:
        d, run = records[0]["device"], records[0]["run"]
        top, dram = d.get("fp32_peak_gflops") or "?", d.get("bandwidth_gbps") or "?"
        out.append(
            f"device: {d['name']} ({d['arch']}, {d['sm_count']} SMs), nominal FP32 peak {top} GFLOP/s, DRAM {dram} GB/s"
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
    out += problem_lines(records, lambda r: r["workload"])
    for r in records:
        if r.get("launch_bound"):
            out.append(
                f"note {r['workload']}: enqueueing {', '.join(r['launch_bound'])} took about as long as the "
                "L2 flush that hides it; those times may include launch overhead"
            )
    return "\n".join(out)


def systems_in(records: list, systems) -> list:
    """The systems of `systems` (in that order) that some record of the models suite ran."""
    return [s for s in systems if any(s in r["systems"] for r in records)]


def _system_ms(rec: dict, system: str) -> str:
    entry = rec["systems"].get(system)
    if entry is None:
        return "-"
    digits = lambda ms: f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"  # noqa: E731
    return timed(entry.get("ms"), entry.get("spread_pct"), digits, bool(entry.get("error")))


def models_table(records: list, systems) -> str:
    """The models suite: one row per model and thread count, a column per system of `systems`
    that ran; then errors, notes, where minitc's time goes and what it ran through torch."""
    shown = systems_in(records, systems)
    head = ["model", "thr", *(f"{s} ms" for s in shown), "vs eager", "compile s", "torch nodes", "rel err", "peak MiB"]
    rows = [
        [
            r["model"],
            str(r["threads"]),
            *(_system_ms(r, s) for s in shown),
            num(r.get("minitc_vs_eager"), ".2f") + ("x" if r.get("minitc_vs_eager") else ""),
            num(r.get("compile_s"), ".1f"),
            num(r.get("torch_nodes"), "d"),
            num(r.get("rel_err"), ".1e"),
            num(r.get("peak_rss_mib"), ".0f"),
        ]
        for r in records
    ]
    out = aligned(head, rows)
    out.append(
        "ms = median ± half the IQR; vs eager = eager ms / minitc ms (> 1: minitc is faster); "
        "rel err = minitc's max abs error / max |eager output|; peak MiB: the process's resident peak while "
        "all systems of the model ran"
    )
    out += busy_lines(records, lambda r: f"{r['model']} [{r['threads']}T]")
    for r in records:
        where = f"{r['model']} [{r['threads']} threads]"
        if r.get("error") and not r["systems"]:  # the model itself could not be built
            out.append(f"ERROR {where}: {r['error']}")
        out += [f"ERROR {where} {s}: {e['error']}" for s, e in r["systems"].items() if e.get("error")]
        out += [f"note {r['model']}: {note}" for note in r.get("notes") or []]
        parts = r.get("minitc_breakdown") or {}
        if parts.get("top_tasks"):
            slowest = "; ".join(f"{name} {ms:.1f}" for name, ms in parts["top_tasks"][:4])
            out.append(
                f"{r['model']}: minitc alone {parts['total_ms']:.1f} ms, of which torch nodes "
                f"{parts['torch_ms']:.1f} ms; slowest tasks (ms per call): {slowest}"
            )
        if r.get("torch_ops"):
            ops = ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in r["torch_ops"].items())
            out.append(f"{r['model']}: minitc runs {r['torch_nodes']} node(s) through torch: {ops}")
    return "\n".join(dict.fromkeys(out))  # a model's notes once, not once per thread count


def zoo_table(rows: list, threads: list, inductor: bool = False) -> str:
    """The zoo's coverage table (markdown, docs/models.md): compiles, error, fallbacks, and per
    thread count eager's and minitc's ms and their ratio (with `inductor`, Inductor's too)."""
    per = 5 if inductor else 3
    extra = " | Inductor ms, {n}T | vs Inductor, {n}T" if inductor else ""
    columns = " | ".join(f"eager ms, {n}T | minitc ms, {n}T | speed, {n}T" + extra.format(n=n) for n in threads)
    lines = [
        f"| model | compiles | max rel. error | ops through PyTorch | {columns} |",
        "|---|---|---|---|" + "---|" * (per * len(threads)),
    ]
    for r in rows:
        ops = ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in sorted(r["fallbacks"].items())) or "none"
        if "rel_err" not in r:
            lines.append(f"| {r['model']} | no: {r['error']} | | |" + " |" * (per * len(threads)))
            continue
        err = f"{r['rel_err']:.1e}" + (f" ({r['error']})" if r["error"] else "")
        cells = []
        for n in threads:
            t = r["timing"].get(n) or {}
            keys = ("eager_ms", "minitc_ms", "speed") + (("inductor_ms", "vs_inductor") if inductor else ())
            cells += [_zoo_cell(t, key) for key in keys]
        lines.append(f"| {r['model']} | yes | {err} | {ops} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _zoo_cell(timing: dict, key: str) -> str:
    if key not in timing:
        return ""
    return f"{timing[key]:.3f}" if key.endswith("_ms") else f"{timing[key]:.2f}x"


def scaling_table(result: dict) -> str:
    """runner-scaling: programs per second per configuration (local, Ray with 1 and 2 nodes)."""
    rows, local = result["rows"], result["rows"][0]["programs_per_s"]
    head = ["config", "nodes", "s/run", "programs/s", "vs local", "node s/program", "Ray ms/program"]
    cells = [
        [
            row["config"],
            str(row["nodes"] or "-"),
            f"{row['median_s']:.1f}",
            f"{row['programs_per_s']:.2f}",
            f"{row['programs_per_s'] / local:.2f}x",
            num(row.get("node_s_per_program"), ".3f"),
            num(row.get("ray_ms_per_program"), ".1f"),
        ]
        for row in rows
    ]
    return "\n".join(
        [
            f"runner-scaling: {rows[0]['programs']} programs of {result['workload']}, target {result['target']}, "
            f"1 thread; median of {len(rows[0]['walls_s'])} runs",
            f"CPU: {result['cpu']} ({result['cores']} cores)",
            *aligned(head, cells),
            f"driver time per trial (search, cost model, records): {result['driver_s_per_trial']:.3f} s",
        ]
    )


def sweep_lines(figures: dict, seconds: float) -> str:
    """The sweep's figures (sweep.summary) in a few lines."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(figures["counts"].items(), key=lambda x: -x[1]))
    rate = figures["pass_rate"]
    lines = [
        f"{figures['architectures']} architectures in {seconds:.0f} s: {counts}",
        f"{figures['passed']} of {figures['exported']} exported compile and match eager"
        + (f" ({100 * rate:.1f}%)" if rate is not None else ""),
    ]
    for key, what in (("geomean_vs_eager", "eager"), ("geomean_vs_inductor", "Inductor")):
        if figures[key]:
            lines.append(f"geomean {figures[key]:.2f}x {what}")
    return "\n".join(lines)


def write_json(records: list, path: str) -> None:
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
