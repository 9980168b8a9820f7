"""The `tlm-eval` suite: the language model against evolutionary search on workloads it never
saw in training (lm/workloads.py HELD_OUT), in the form of the TLM paper's Table 2.

    python -m benchmarks --suite tlm-eval [--tlm-k 1,10,32,64] [--evo-trials 64,256,1000]
                         [--workloads matmul-512,...] [--json out.json] [--plot curves.png]
                         [--evo-from earlier.json] [--tlm-seeds 0,1,2]

For each workload, one `tlm` run measures max(k) programs and one `evolutionary` run measures
max(trials), each from a fresh records database and without the hand template measured first
(this evaluates the searches, not the template); TLM@k is the best of the first k programs,
Evo@t the best of the first t. A cell of the table is Evo@t ms / TLM@k ms (> 1: TLM@k is
faster). Both runs use the same cost model class (TLP, trained online) and the same measuring
setup; wall times are the tuning calls' own.

Each history entry is a program's first measurement, and the best of many noisy measurements
is optimistic by the noise (more so for 1000 than for 64), so the winners at every budget are
then built again and timed side by side, in rotated order (`retime`), with the hand template's
program; the second table gives the same ratios from those timings, and a last line how each
winner compares with the template neither search was given. The winners' traces are kept in
the JSON (`winners`), so `--evo-from` reuses them too.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace


def geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _best_after(history: list, k: int):
    values = [h for h in history[:k] if h is not None]
    return min(values) if values else None


def _time_to(history: list, times: list, target: float | None):
    """Seconds until the best-so-far first reached `target` (None if never)."""
    if target is None:
        return None
    for h, t in zip(history, times):
        if h is not None and h <= target * 1.0001:
            return t
    return None


def _best_traces(db_path: str, workload: str, budgets) -> dict:
    """{k: trace JSON of the fastest of the first k measured programs} of one tuning run's
    records (the re-measurements of its finalists come after its trials)."""
    from minitc.tune.database import Database
    from minitc.tune.tuner import decode_trace

    with Database(db_path) as db:
        records = db.records(workload)
    out = {}
    for k in budgets:
        ok = [r for r in records[:k] if r.ok]
        if ok:
            out[k] = decode_trace(min(ok, key=lambda r: r.median_ms).trace)[1].to_json()
    return out


def retime(out, rows_traces: dict, rounds: int) -> dict:
    """{label: median ms}: each distinct winner (TLM@k, Evo@t) built once and timed side by side."""
    from .tuning import kernels_ms

    by_trace = {}
    for label, trace in rows_traces.items():
        by_trace.setdefault(trace, []).append(label)
    timed = kernels_ms(out, {str(n): t for n, t in enumerate(by_trace)}, rounds=rounds)
    return {label: timed[str(n)] for n, labels in enumerate(by_trace.values()) for label in labels}


def evaluate_workload(name: str, make, ks, evo_trials, seed: int = 0, say=None, lm=None, evo_from=None,
                      retime_rounds: int = 5) -> dict:  # fmt: skip
    """One row of the table. `evo_from`: a row of an earlier run whose evolutionary search is
    reused (its budget must cover `evo_trials`): only TLM is run again. The winners at each
    budget are then timed again side by side (`retime_rounds`; 0 skips it)."""
    from minitc.tune.cost_model import default_cost_model
    from minitc.tune.tuner import tune

    from .tuning import template_kernel_ms, template_trace

    say = say or (lambda msg: None)
    out = make()
    runs, winners = {}, {}
    plan = [("tlm", max(ks))] + ([] if evo_from else [("evolutionary", max(evo_trials))])
    for strategy, trials in plan:
        say(f"{name}: {strategy}, {trials} trials")
        with tempfile.TemporaryDirectory(prefix="minitc-tlm-eval-") as tmp:
            r = tune(out, trials=trials, strategy=strategy, db=os.path.join(tmp, "r.db"), seed=seed,
                     cost_model=default_cost_model(), template_first=False, lm=lm)  # fmt: skip
            budgets = ks if strategy == "tlm" else evo_trials
            label = "TLM" if strategy == "tlm" else "Evo"
            winners.update({f"{label}@{k}": t for k, t in _best_traces(os.path.join(tmp, "r.db"), r.workload, budgets).items()})
        runs[strategy] = r
    if evo_from:
        winners.update(evo_from.get("winners", {}))
    tlm = runs["tlm"]
    evo = runs.get("evolutionary") or SimpleNamespace(
        history=evo_from["evo_history"], times=evo_from["evo_times"], errors=evo_from["evo_errors"])
    row = {
        "workload": name, "template_ms": template_kernel_ms(out),
        "tlm_ms": {k: _best_after(tlm.history, k) for k in ks},
        "evo_ms": {t: _best_after(evo.history, t) for t in evo_trials},
        "tlm_seconds": {k: tlm.times[min(k, len(tlm.times)) - 1] if tlm.times else None for k in ks},
        "evo_seconds": {t: evo.times[min(t, len(evo.times)) - 1] if evo.times else None for t in evo_trials},
        "tlm_history": tlm.history, "evo_history": evo.history, "tlm_times": tlm.times, "evo_times": evo.times,
        "valid_rate": tlm.search_stats.get("valid_rate"), "tlm_stats": tlm.search_stats,
        "tlm_errors": tlm.errors, "evo_errors": evo.errors,
    }  # fmt: skip
    row["winners"] = winners
    if retime_rounds and winners:
        say(f"{name}: timing the {len(set(winners.values()))} winners again, side by side")
        template = template_trace(out)  # timed with them: what the searches add to the hand schedule
        extra = {"template": template} if template is not None else {}
        row["retimed_ms"] = retime(out, {**winners, **extra}, retime_rounds)
    top = max(evo_trials)
    row["evo_best_s"] = _time_to(evo.history, evo.times, row["evo_ms"][top])
    row["tlm_time_to_evo_best_s"] = _time_to(tlm.history, tlm.times, row["evo_ms"][top])
    return row


def _ratios(rows: list, ks, evo_trials, ms) -> list:
    """Table lines of Evo@t ms / TLM@k ms per workload and their geometric mean; `ms(row, label)`
    gives a row's latency for "TLM@k" / "Evo@t" (None: unknown)."""
    head = ["workload"] + [f"TLM@{k}/Evo@{t}" for k in ks for t in evo_trials]
    lines = []
    ratios = {(k, t): [] for k in ks for t in evo_trials}
    for row in rows:
        cells = [row["workload"]]
        for k in ks:
            for t in evo_trials:
                a, b = ms(row, f"TLM@{k}"), ms(row, f"Evo@{t}")
                r = b / a if a and b else None
                if r:
                    ratios[(k, t)].append(r)
                cells.append(f"{r:.2f}" if r else "-")
        lines.append(cells)
    lines.append(["geomean"] + [f"{geomean(ratios[(k, t)]):.2f}" if ratios[(k, t)] else "-" for k in ks for t in evo_trials])
    return _aligned(head, lines)


def _aligned(head: list, lines: list) -> list:
    """A text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return [fmt(head), "  ".join("-" * w for w in widths)] + [fmt(c) for c in lines]


def _as_measured(row: dict, label: str):
    strategy, budget = label.split("@")
    return row["tlm_ms" if strategy == "TLM" else "evo_ms"][int(budget)]


def _side_by_side(row: dict, label: str):
    return row.get("retimed_ms", {}).get(label)


def _against_template(rows: list, labels: list) -> list:
    """One line: the geometric mean of template ms / winner ms, side by side, per budget (> 1:
    the search beat the hand schedule, which neither search was given)."""
    if not any(_side_by_side(r, "template") for r in rows):
        return []
    cells = []
    for label in labels:
        pairs = [(_side_by_side(r, "template"), _side_by_side(r, label)) for r in rows]
        ratios = [t / ms for t, ms in pairs if t and ms]
        cells.append(f"{label} {geomean(ratios):.2f}" if ratios else f"{label} -")
    return ["", "against the hand template (template ms / ms): " + "  ".join(cells)]


def table(rows: list, ks, evo_trials) -> str:
    """Speedup of TLM@k over Evo@t (Evo ms / TLM ms) per workload and the geometric mean: as
    the searches measured them, then (where the winners were timed again) side by side."""
    out = _ratios(rows, ks, evo_trials, _as_measured)
    if any(label.startswith("Evo@") for row in rows for label in row.get("retimed_ms", {})):
        out += ["", "the same winners timed again, side by side:"]
        out += _ratios(rows, ks, evo_trials, _side_by_side)
        out += _against_template(rows, [f"TLM@{k}" for k in ks] + [f"Evo@{t}" for t in evo_trials])
    out.append("")
    out.append("workload          template ms  " + "  ".join(f"TLM@{k} ms" for k in ks) + "  " +
               "  ".join(f"Evo@{t} ms" for t in evo_trials) + "  TLM s  Evo s  valid")  # fmt: skip
    for row in rows:
        ms = lambda v: f"{v:.4g}" if v else "-"  # noqa: E731
        out.append(f"{row['workload']:16s}  {ms(row['template_ms']):>11s}  " +
                   "  ".join(f"{ms(row['tlm_ms'][k]):>{len(f'TLM@{k} ms')}}" for k in ks) + "  " +
                   "  ".join(f"{ms(row['evo_ms'][t]):>{len(f'Evo@{t} ms')}}" for t in evo_trials) +
                   f"  {row['tlm_seconds'][max(ks)] or 0:5.0f}  {row['evo_seconds'][max(evo_trials)] or 0:5.0f}"
                   f"  {row['valid_rate'] if row['valid_rate'] is not None else '-'}")  # fmt: skip
    return "\n".join(out)


def plot(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.2), squeeze=False)
    for ax, row in zip(axes[0], rows):
        for key, label in (("tlm_history", "tlm"), ("evo_history", "evolutionary")):
            h = row[key]
            ax.plot(range(1, len(h) + 1), [v if v is not None else math.nan for v in h], label=label)
        if row["template_ms"]:
            ax.axhline(row["template_ms"], color="gray", linestyle=":", label="template")
        ax.set_xscale("log")
        ax.set_title(row["workload"])
        ax.set_xlabel("measured programs")
        ax.set_ylabel("best ms")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(names=None, ks=(1, 10, 32, 64), evo_trials=(64, 256, 1000), seed=0, say=None, lm=None, evo_from=None) -> list:
    """Rows of the table; `evo_from` (the JSON path of an earlier run, or its rows) reuses its
    evolutionary runs."""
    from lm.workloads import HELD_OUT

    names = list(names or HELD_OUT)
    unknown = [n for n in names if n not in HELD_OUT]
    if unknown:
        raise KeyError(f"tlm-eval runs held-out workloads only ({', '.join(HELD_OUT)}); unknown: {', '.join(unknown)}")
    from_file = isinstance(evo_from, (str, os.PathLike))
    evo_from_rows = json.loads(Path(evo_from).read_text())["rows"] if from_file else evo_from or []
    earlier = {r["workload"]: r for r in evo_from_rows}
    short = [n for n in names if evo_from and (n not in earlier or len(earlier[n]["evo_history"]) < max(evo_trials))]
    if short:
        raise KeyError(f"{evo_from if from_file else 'the earlier run'} has no evolutionary run of "
                       f"{max(evo_trials)} trials for {', '.join(short)}")  # fmt: skip
    return [evaluate_workload(n, HELD_OUT[n], list(ks), list(evo_trials), seed, say, lm, earlier.get(n)) for n in names]


def run_seeds(names, ks, evo_trials, seeds, say=None, lm=None, evo_from=None) -> dict:
    """{seed: rows}: TLM once per seed, against one evolutionary run (that of `evo_from`, else
    the first seed's). The model's first samples decide much of a workload's result, so one
    seed's geomean moves by several percent; the seeds table shows how much."""
    by_seed = {}
    for seed in seeds:
        by_seed[seed] = run(names, ks, evo_trials, seed, say, lm, evo_from)
        evo_from = evo_from or by_seed[seed]
    return by_seed


def seeds_table(by_seed: dict, ks, evo_trials) -> str:
    """Geomean of Evo@max(trials) ms / TLM@k ms per seed, as measured and side by side, and
    the median over the seeds."""
    top = f"Evo@{max(evo_trials)}"
    columns = [(f"TLM@{k}/{top}", f"TLM@{k}", _as_measured) for k in ks]
    columns += [(f"side by side @{k}", f"TLM@{k}", _side_by_side) for k in ks]
    lines = []
    for seed, rows in by_seed.items():
        cells = []
        for _, label, ms in columns:
            ratios = [ms(row, top) / ms(row, label) for row in rows if ms(row, label) and ms(row, top)]
            cells.append(geomean(ratios) if len(ratios) == len(rows) else None)
        lines.append((f"seed {seed}", cells))
    known = [[cells[i] for _, cells in lines if cells[i]] for i in range(len(columns))]
    lines.append(("median", [statistics.median(v) if v else None for v in known]))
    head = ["geomean over workloads"] + [name for name, _, _ in columns]
    return "\n".join(_aligned(head, [[name] + [f"{c:.2f}" if c else "-" for c in cells] for name, cells in lines]))
