"""The `tlm-eval` suite: the language model against evolutionary search on workloads it never
saw in training (lm/workloads.py HELD_OUT), in the form of the TLM paper's Table 2.

    python -m benchmarks --suite tlm-eval [--tlm-k 1,10,32,64] [--evo-trials 64,256,1000]
                         [--workloads matmul-512,...] [--json out.json] [--plot curves.png]
                         [--evo-from earlier.json] [--tlm-seeds 0,1,2]

For each workload, one `tlm` run measures max(k) programs and one `evolutionary` run measures
max(trials), each from a fresh records database and without the hand template measured first
(this evaluates the searches, not the template). TLM@k is what tuning with a budget of k
programs returns, Evo@t likewise: the tuner does not answer with the fastest first
measurement but re-measures the few fastest programs and answers with the best of those
(tuner._remeasure_best), since on a shared machine a single first measurement often crowns a
lucky program. At the full budget that is the run's own answer; at a smaller one the same
re-measurement is done on a copy of the run's first k records (`_confirmed_winners`), and its
seconds are added to that budget's tuning time. A cell of the table is Evo@t ms / TLM@k ms
(> 1: TLM@k is faster). Both runs use the same cost model class (TLP, trained online) and the
same measuring setup; wall times are the tuning calls' own.

The re-measurements of each budget are still taken at different times for the two searches,
so the winners at every budget are then built again and timed side by side, in rotated order
(`retime`), with the hand template's program and the winners by first measurement alone; the
second table gives the same ratios from those timings, a line what confirming the finalists
changed, a line how each winner compares with the template neither search was given, and the
tuning time each search needed to match Evo's largest budget side by side (the same rule for
both). The winners' traces are kept in the JSON (`winners`, `first_winners`), so `--evo-from`
reuses them too.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace


# "Reached Evo@1000's quality" means timed side by side within this of its winner: one
# program's side-by-side timings in different runs spread by about 1% on the shared machine.
MATCH_TOLERANCE = 0.01


def geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _time_to(history: list, times: list, target: float | None):
    """Seconds until the best-so-far first reached `target` (None if never)."""
    if target is None:
        return None
    for h, t in zip(history, times):
        if h is not None and h <= target * 1.0001:
            return t
    return None


def _first_winners(records: list, budgets) -> dict:
    """{k: trace JSON of the fastest first measurement among the first k records}."""
    from minitc.autotune.tuner import decode_trace

    out = {}
    for k in budgets:
        ok = [r for r in records[:k] if r.ok]
        if ok:
            out[k] = decode_trace(min(ok, key=lambda r: r.median_ms).trace)[1].to_json()
    return out


def _confirmed_winners(out, records: list, result, budgets) -> dict:
    """{k: (trace JSON, ms, seconds)}: what tuning with a budget of k returns, its re-measured
    latency and the tuning time to get there, from the run's `records` (its trials, in order).
    The full budget's answer is the run's own; a smaller budget's comes from re-measuring, as
    the tuner does, a copy of the first k records."""
    from minitc.autotune.database import Database
    from minitc.autotune.measure import LocalRunner, Task
    from minitc.autotune.space import Space
    from minitc.autotune.tuner import _remeasure_best, decode_trace

    answers = {}
    if result.best_trace:
        answers[len(records)] = (decode_trace(result.best_trace)[1].to_json(), result.best_ms, result.seconds)
    smaller = [k for k in budgets if k < len(records) and any(r.ok for r in records[:k])]
    if smaller:
        space = Space(out, records[0].target)
        task, runner = Task.from_outputs(space.outputs, space.target.string), LocalRunner()
        try:
            for k in smaller:
                start = time.perf_counter()
                with tempfile.TemporaryDirectory(prefix="minitc-budget-") as tmp, Database(os.path.join(tmp, "r.db")) as copy:
                    for r in records[:k]:
                        copy.add(replace(r, id=None))
                    ms, trace = _remeasure_best(copy, result.workload, space, records[0].hardware, task, runner)
                answers[k] = (decode_trace(trace)[1].to_json(), ms, result.times[k - 1] + time.perf_counter() - start)
        finally:
            runner.close()
    return {k: answers[min(k, len(records))] for k in budgets if min(k, len(records)) in answers}


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
    from minitc.autotune.cost_model import default_cost_model
    from minitc.autotune.database import Database
    from minitc.autotune.tuner import tune

    from .tuning import template_kernel_ms, template_trace

    say = say or (lambda msg: None)
    out = make()
    runs, winners, first, measured, seconds = {}, {}, {}, {}, {}
    plan = [("tlm", max(ks))] + ([] if evo_from else [("evolutionary", max(evo_trials))])
    for strategy, trials in plan:
        say(f"{name}: {strategy}, {trials} trials")
        label, budgets = ("TLM", ks) if strategy == "tlm" else ("Evo", evo_trials)
        with tempfile.TemporaryDirectory(prefix="minitc-tlm-eval-") as tmp:
            r = tune(out, trials=trials, strategy=strategy, db=os.path.join(tmp, "r.db"), seed=seed,
                     cost_model=default_cost_model(), template_first=False, lm=lm)  # fmt: skip
            with Database(os.path.join(tmp, "r.db")) as db:
                records = db.records(r.workload)[: len(r.history)]  # the trials, not the re-measurements
        first.update({f"{label}@{k}": t for k, t in _first_winners(records, budgets).items()})
        for k, (trace, ms, s) in _confirmed_winners(out, records, r, budgets).items():
            winners[f"{label}@{k}"], measured[f"{label}@{k}"], seconds[f"{label}@{k}"] = trace, ms, s
        runs[strategy] = r
    if evo_from:  # its evolutionary winners only: the TLM ones were another run's answers
        winners.update(_evo_labels(evo_from.get("winners", {})))
        first.update(_evo_labels(evo_from.get("first_winners", {})))
        for t in evo_trials:
            measured[f"Evo@{t}"], seconds[f"Evo@{t}"] = _at(evo_from["evo_ms"], t), _at(evo_from["evo_seconds"], t)
    tlm = runs["tlm"]
    evo = runs.get("evolutionary") or SimpleNamespace(
        history=evo_from["evo_history"], times=evo_from["evo_times"], errors=evo_from["evo_errors"])
    row = {
        "workload": name, "template_ms": template_kernel_ms(out),
        "tlm_ms": {k: measured.get(f"TLM@{k}") for k in ks}, "evo_ms": {t: measured.get(f"Evo@{t}") for t in evo_trials},
        "tlm_seconds": {k: seconds.get(f"TLM@{k}") for k in ks}, "evo_seconds": {t: seconds.get(f"Evo@{t}") for t in evo_trials},
        "tlm_history": tlm.history, "evo_history": evo.history, "tlm_times": tlm.times, "evo_times": evo.times,
        "valid_rate": tlm.search_stats.get("valid_rate"), "tlm_stats": tlm.search_stats,
        "tlm_errors": tlm.errors, "evo_errors": evo.errors,
        # an --evo-from run older than the finalists' confirmation has first-measurement winners only
        "evo_confirmed": not evo_from or "first_winners" in evo_from,
    }  # fmt: skip
    row["winners"], row["first_winners"] = winners, first
    if retime_rounds and winners:
        template = template_trace(out)  # timed with them: what the searches add to the hand schedule
        extra = {"template": template} if template is not None else {}
        timed = {**winners, **{f"{label} first": t for label, t in first.items()}, **extra}
        say(f"{name}: timing the {len(set(timed.values()))} winners again, side by side")
        row["retimed_ms"] = retime(out, timed, retime_rounds)
    top = max(evo_trials)
    row["evo_best_s"] = _time_to(evo.history, evo.times, row["evo_ms"][top])
    row["tlm_time_to_evo_best_s"] = _time_to(tlm.history, tlm.times, row["evo_ms"][top])
    row["tlm_matches_evo"], row["evo_matches_evo"] = _matched([row], ks, evo_trials)[0]
    return row


def _evo_labels(by_label: dict) -> dict:
    return {label: v for label, v in by_label.items() if label.startswith("Evo@")}


def _at(by_budget: dict, budget: int):
    """A per-budget value of a row read back from JSON (string keys) or still in memory."""
    return by_budget.get(budget, by_budget.get(str(budget)))


def _first_match(row: dict, label: str, budgets, top: int, tolerance: float = MATCH_TOLERANCE) -> dict | None:
    """{"k", "seconds"} of the smallest budget whose winner of search `label` ("TLM", "Evo"),
    timed side by side, is within `tolerance` of Evo@top's; None if none is (or nothing was
    timed side by side). The same rule for both searches: Evo often has its final quality
    long before its last trial."""
    evo = _side_by_side(row, f"Evo@{top}")
    times = row["tlm_seconds" if label == "TLM" else "evo_seconds"]
    for k in sorted(budgets):
        ms = _side_by_side(row, f"{label}@{k}")
        if evo and ms and ms <= evo * (1 + tolerance):
            return {"k": k, "seconds": _at(times, k)}
    return None


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
    return _at(row["tlm_ms" if strategy == "TLM" else "evo_ms"], int(budget))


def _side_by_side(row: dict, label: str):
    return row.get("retimed_ms", {}).get(label)


def _against_template(rows: list, labels: list) -> list:
    """One line: the geometric mean of template ms / winner ms, side by side, per budget (> 1:
    the search beat the hand schedule, which neither search was given)."""
    if not any(_side_by_side(r, "template") for r in rows):
        return []
    cells = []
    for label in labels:
        g = _geomean_ratio(rows, "template", label, every_row=False)
        cells.append(f"{label} {g:.2f}" if g else f"{label} -")
    return ["", "against the hand template (template ms / ms): " + "  ".join(cells)]


def _geomean_ratio(rows: list, over: str, under: str, ms=_side_by_side, every_row: bool = True):
    """Geometric mean over the rows of ms(row, over) / ms(row, under); None if no row has
    both, or (every_row) if any row lacks one."""
    ratios = [ms(r, over) / ms(r, under) for r in rows if ms(r, over) and ms(r, under)]
    return geomean(ratios) if ratios and (len(ratios) == len(rows) or not every_row) else None


def _unconfirmed(rows: list, ks, top: int) -> list:
    """One line: the side-by-side geomeans had each search answered with its fastest first
    measurement instead of re-measuring its finalists."""
    cells = []
    for k in ks:
        g = _geomean_ratio(rows, f"Evo@{top} first", f"TLM@{k} first")
        cells.append(f"TLM@{k}/Evo@{top} {g:.2f}" if g else f"TLM@{k}/Evo@{top} -")
    return ["", "had each search kept its fastest first measurement (side by side): " + "  ".join(cells)]


def _matched(rows: list, ks, evo_trials) -> list:
    """Per row, (TLM's first match, Evo's first match) of Evo@max(trials)'s quality (see
    _first_match), under the current rule, so a stored run can be re-read."""
    top = max(evo_trials)
    return [(_first_match(r, "TLM", ks, top), _first_match(r, "Evo", evo_trials, top)) for r in rows]


def _wall_time_ratio(rows: list, ks, evo_trials) -> tuple:
    """(Evo s / TLM s summed over the workloads where both matched, how many did)."""
    both = [(t, e) for t, e in _matched(rows, ks, evo_trials) if t and e and t["seconds"] and e["seconds"]]
    tlm_s = sum(t["seconds"] for t, _ in both)
    return (sum(e["seconds"] for _, e in both) / tlm_s if tlm_s else None), len(both)


def _matches(rows: list, ks, evo_trials) -> list:
    """Lines: per workload, the tuning seconds each search needed until its winner, timed side
    by side, was within MATCH_TOLERANCE of Evo@max(trials)'s (at the budgets of the table)."""
    top = max(evo_trials)
    out = ["", f"tuning time until a search's winner is within {MATCH_TOLERANCE:.0%} of Evo@{top}'s, side by side:"]
    tlm_s = evo_s = 0.0
    for r, (tlm, evo) in zip(rows, _matched(rows, ks, evo_trials)):
        if tlm and evo and tlm["seconds"] and evo["seconds"]:
            tlm_s, evo_s = tlm_s + tlm["seconds"], evo_s + evo["seconds"]
            out.append(f"  {r['workload']:16s} TLM@{tlm['k']} after {tlm['seconds']:.0f} s, Evo@{evo['k']} after "
                       f"{evo['seconds']:.0f} s (Evo s / TLM s = {evo['seconds'] / tlm['seconds']:.2g})")  # fmt: skip
        else:
            out.append(f"  {r['workload']:16s} TLM: not within its budget")
    if tlm_s:
        out.append(f"  the matched workloads together: TLM {tlm_s:.0f} s, Evo {evo_s:.0f} s (Evo s / TLM s = {evo_s / tlm_s:.2g})")
    return out


def table(rows: list, ks, evo_trials) -> str:
    """Speedup of TLM@k over Evo@t (Evo ms / TLM ms) per workload and the geometric mean: as
    the searches measured them, then (where the winners were timed again) side by side."""
    out = _ratios(rows, ks, evo_trials, _as_measured)
    if any(label.startswith("Evo@") for row in rows for label in row.get("retimed_ms", {})):
        out += ["", "the same winners timed again, side by side:"]
        out += _ratios(rows, ks, evo_trials, _side_by_side)
        out += _unconfirmed(rows, ks, max(evo_trials))
        out += _against_template(rows, [f"TLM@{k}" for k in ks] + [f"Evo@{t}" for t in evo_trials])
        out += _matches(rows, ks, evo_trials)
    out.append("")
    out.append("workload          template ms  " + "  ".join(f"TLM@{k} ms" for k in ks) + "  " +
               "  ".join(f"Evo@{t} ms" for t in evo_trials) + "  TLM s  Evo s  valid")  # fmt: skip
    for row in rows:
        ms = lambda v: f"{v:.4g}" if v else "-"  # noqa: E731
        out.append(f"{row['workload']:16s}  {ms(row['template_ms']):>11s}  " +
                   "  ".join(f"{ms(_at(row['tlm_ms'], k)):>{len(f'TLM@{k} ms')}}" for k in ks) + "  " +
                   "  ".join(f"{ms(_at(row['evo_ms'], t)):>{len(f'Evo@{t} ms')}}" for t in evo_trials) +
                   f"  {_at(row['tlm_seconds'], max(ks)) or 0:5.0f}  {_at(row['evo_seconds'], max(evo_trials)) or 0:5.0f}"
                   f"  {row['valid_rate'] if row['valid_rate'] is not None else '-'}")  # fmt: skip
    return "\n".join(out)


def report(path) -> str:
    """The tables of a run stored with --json, under this code's rules (MATCH_TOLERANCE):
    `python -m benchmarks.tlm_eval RESULTS.json`."""
    data = json.loads(Path(path).read_text())
    rows = data["rows"]
    ks, evo_trials = sorted(map(int, rows[0]["tlm_ms"])), sorted(map(int, rows[0]["evo_ms"]))
    out = table(rows, ks, evo_trials)
    if data.get("more_seeds"):
        first = _first_seed(data["run"]["command"])
        by_seed = {first: rows, **{int(s): r for s, r in data["more_seeds"].items()}}
        out += f"\n\nTLM with {len(by_seed)} seeds (the tables above: seed {first}):\n" + seeds_table(by_seed, ks, evo_trials)
    return out


def _first_seed(command: str) -> int:
    """The seed of a stored run's main rows, from its command line."""
    words = command.split()
    for flag in ("--tlm-seeds", "--seed"):
        if flag in words[:-1]:
            return int(words[words.index(flag) + 1].split(",")[0])
    return 0


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
    if say and evo_from_rows and not all("first_winners" in r for r in evo_from_rows):
        say(f"note: {evo_from if from_file else 'the earlier run'} predates the finalists' re-measurement: "
            "its evolutionary winners are its fastest first measurements")  # fmt: skip
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
    """Geomean of Evo@max(trials) ms / TLM@k ms per seed, as measured and side by side, the
    wall-time ratio on the workloads both searches matched (_matches), and the median over
    the seeds."""
    top = f"Evo@{max(evo_trials)}"
    columns = [(f"TLM@{k}/{top}", f"TLM@{k}", _as_measured) for k in ks]
    columns += [(f"side by side @{k}", f"TLM@{k}", _side_by_side) for k in ks]
    lines = []
    for seed, rows in by_seed.items():
        wall, matched = _wall_time_ratio(rows, ks, evo_trials)
        cells = [_geomean_ratio(rows, top, label, ms) for _, label, ms in columns]
        lines.append((f"seed {seed}", cells + [wall], f"{matched} of {len(rows)}"))
    known = [[cells[i] for _, cells, _ in lines if cells[i]] for i in range(len(columns) + 1)]
    lines.append(("median", [statistics.median(v) if v else None for v in known], ""))
    head = ["geomean over workloads"] + [name for name, _, _ in columns] + ["Evo s / TLM s", "matched"]
    text = lambda c: f"{c:.2f}" if c else "-"  # noqa: E731
    return "\n".join(_aligned(head, [[name] + [text(c) for c in cells[:-1]] + [f"{cells[-1]:.0f}" if cells[-1] else "-", m]
                                      for name, cells, m in lines]))


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:] or ["-h"]:
        print(report(name) if name not in ("-h", "--help") else "usage: python -m benchmarks.tlm_eval RESULTS.json ...")
