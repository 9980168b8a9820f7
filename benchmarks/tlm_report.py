"""The tables of the `tlm-eval` suite (benchmarks/tlm_eval.py runs it): the speedup of TLM@k
over Evo@t per workload, as measured and side by side, the wall time each search needed to
reach Evo@max(trials)'s quality and the per-seed summary (the best-so-far chart is plots.tlm_curves).

    python -m minitc.benchmarks.tlm_report RESULTS.json ...   # a stored run's tables, under the current rules

A row is one workload's dict as evaluate_workload returns it, or as read back from the JSON
(whose per-budget keys are strings; `_at` reads either).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from minitc.benchmarks.report import aligned

# "Reached Evo@1000's quality" means timed side by side within this of its winner: one
# program's side-by-side timings in different runs spread by about 1% on the shared machine.
MATCH_TOLERANCE = 0.01


def geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


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
    lines.append(
        ["geomean"] + [f"{geomean(ratios[(k, t)]):.2f}" if ratios[(k, t)] else "-" for k in ks for t in evo_trials]
    )
    return aligned(head, lines)


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


def _matched_seconds(rows: list, ks, evo_trials) -> tuple:
    """(TLM s, Evo s, workloads): the tuning times summed over the workloads where both
    searches matched Evo@max(trials)'s quality, and how many those are."""
    both = [(t, e) for t, e in _matched(rows, ks, evo_trials) if _timed(t, e)]
    return sum(t["seconds"] for t, _ in both), sum(e["seconds"] for _, e in both), len(both)


def _timed(tlm: dict | None, evo: dict | None) -> bool:
    """Whether both searches matched, each with a known tuning time."""
    return bool(tlm and evo and tlm["seconds"] and evo["seconds"])


def _matches(rows: list, ks, evo_trials) -> list:
    """Lines: per workload, the tuning seconds each search needed until its winner, timed side
    by side, was within MATCH_TOLERANCE of Evo@max(trials)'s (at the budgets of the table)."""
    top = max(evo_trials)
    out = ["", f"tuning time until a search's winner is within {MATCH_TOLERANCE:.0%} of Evo@{top}'s, side by side:"]
    for r, (tlm, evo) in zip(rows, _matched(rows, ks, evo_trials)):
        if _timed(tlm, evo):
            out.append(
                f"  {r['workload']:16s} TLM@{tlm['k']} after {tlm['seconds']:.0f} s, Evo@{evo['k']} after "
                f"{evo['seconds']:.0f} s (Evo s / TLM s = {evo['seconds'] / tlm['seconds']:.2g})"
            )
        else:
            out.append(f"  {r['workload']:16s} TLM: not within its budget")
    tlm_s, evo_s, _ = _matched_seconds(rows, ks, evo_trials)
    if tlm_s:
        out.append(
            f"  the matched workloads together: TLM {tlm_s:.0f} s, Evo {evo_s:.0f} s "
            f"(Evo s / TLM s = {evo_s / tlm_s:.2g})"
        )
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
    head = ["workload", "template ms", *(f"TLM@{k} ms" for k in ks), *(f"Evo@{t} ms" for t in evo_trials)]
    cells = [
        [
            row["workload"],
            *(_fmt(ms, ".4g") for ms in [row["template_ms"], *(_at(row["tlm_ms"], k) for k in ks)]),
            *(_fmt(_at(row["evo_ms"], t), ".4g") for t in evo_trials),
            f"{_at(row['tlm_seconds'], max(ks)) or 0:.0f}",
            f"{_at(row['evo_seconds'], max(evo_trials)) or 0:.0f}",
            str(row["valid_rate"] if row["valid_rate"] is not None else "-"),
        ]
        for row in rows
    ]
    out += ["", *aligned(head + ["TLM s", "Evo s", "valid"], cells)]
    out += _under_load(rows)
    return "\n".join(out)


def _under_load(rows: list, busy: float = 0.3) -> list:
    """A line per workload whose searches or re-measurements ran while other processes took
    `busy` CPUs or more (tlm_eval.BUSY): its first-measured cells are suspect there, the side
    by side ones less so."""
    out = []
    for row in rows:
        hit = {k: v for k, v in row.get("foreign_cpus", {}).items() if v is not None and v >= busy}
        if hit:
            what = ", ".join(f"{k} {v:.2f}" for k, v in hit.items())
            out.append(f"  {row['workload']}: other processes took CPUs during {what}")
    return ["", "measured under someone else's load (CPUs):", *out] if out else []


def report(path) -> str:
    """The tables of a run stored with --json, under this code's rules (MATCH_TOLERANCE):
    `python -m minitc.benchmarks.tlm_report RESULTS.json`."""
    data = json.loads(Path(path).read_text())
    rows = data["rows"]
    ks, evo_trials = sorted(map(int, rows[0]["tlm_ms"])), sorted(map(int, rows[0]["evo_ms"]))
    out = table(rows, ks, evo_trials)
    if data.get("more_seeds"):
        first = _first_seed(data["run"]["command"])
        by_seed = {first: rows, **{int(s): r for s, r in data["more_seeds"].items()}}
        out += f"\n\nTLM with {len(by_seed)} seeds (the tables above: seed {first}):\n" + seeds_table(
            by_seed, ks, evo_trials
        )
    return out


def _first_seed(command: str) -> int:
    """The seed of a stored run's main rows, from its command line."""
    words = command.split()
    for flag in ("--tlm-seeds", "--seed"):
        if flag in words[:-1]:
            return int(words[words.index(flag) + 1].split(",")[0])
    return 0


def seeds_table(by_seed: dict, ks, evo_trials) -> str:
    """Geomean of Evo@max(trials) ms / TLM@k ms per seed, as measured and side by side, the
    wall-time ratio on the workloads both searches matched (_matches), and the median over
    the seeds."""
    top = f"Evo@{max(evo_trials)}"
    columns = [(f"TLM@{k}/{top}", f"TLM@{k}", _as_measured) for k in ks]
    columns += [(f"side by side @{k}", f"TLM@{k}", _side_by_side) for k in ks]
    ratios, walls, lines = [], [], []
    for seed, rows in by_seed.items():
        tlm_s, evo_s, matched = _matched_seconds(rows, ks, evo_trials)
        ratios.append([_geomean_ratio(rows, top, label, ms) for _, label, ms in columns])
        walls.append(evo_s / tlm_s if tlm_s else None)
        lines.append(
            [f"seed {seed}"]
            + [_fmt(r, ".2f") for r in ratios[-1]]
            + [_fmt(walls[-1], ".0f"), f"{matched} of {len(rows)}"]
        )
    medians = [_median([r[i] for r in ratios]) for i in range(len(columns))]
    lines.append(["median"] + [_fmt(m, ".2f") for m in medians] + [_fmt(_median(walls), ".0f"), ""])
    head = ["geomean over workloads"] + [name for name, _, _ in columns] + ["Evo s / TLM s", "matched"]
    return "\n".join(aligned(head, lines))


def _median(values: list):
    known = [v for v in values if v]
    return statistics.median(known) if known else None


def _fmt(value, spec: str) -> str:
    return format(value, spec) if value else "-"


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(
            "usage: python -m minitc.benchmarks.tlm_report RESULTS.json ...  "
            "(a stored run's tables, under the current rules)"
        )
    print("\n\n".join(report(path) for path in sys.argv[1:]))
