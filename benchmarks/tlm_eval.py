"""The `tlm-eval` suite: the language model against evolutionary search on workloads it never
saw in training (lm/workloads.py HELD_OUT), in the form of the TLM paper's Table 2.

    python -m benchmarks --suite tlm-eval [--tlm-k 1,10,32,64] [--evo-trials 64,256,1000]
                         [--workloads matmul-512,...] [--json out.json] [--plot curves.png]
                         [--evo-from earlier.json] [--tlm-seeds 0,1,2] [--lm CKPT]
                         [--leave-out-hardware]

`--workloads` may also name the handwritten suite's operators (benchmarks/handwritten.py).

For each workload, one `tlm` run measures max(k) programs and one `evolutionary` run measures
max(trials), each from a fresh records database and without the hand template measured first
(this evaluates the searches, not the template). TLM@k is what tuning with a budget of k
programs returns, Evo@t likewise: the tuner does not answer with the fastest first
measurement but re-measures the few fastest programs and answers with the best of those
(tuner.remeasure_best), since on a shared machine a single first measurement often crowns a
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
tuning time each search needed to come within 1% of Evo's largest budget side by side (the
same rule for both). The tables are made by benchmarks/tlm_report.py, which also re-reads a
stored run. The winners' traces are kept in the JSON (`winners`, `first_winners`), so
`--evo-from` reuses them too.

Leave-one-hardware-out (`--leave-out-hardware`, `leave_out_model`): a copy of the model is
first fine-tuned on the dataset (lm/data) without this host's hardware description, and that
copy is evaluated, so the table shows how the model does on a machine whose measurements it
never saw.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from minitc.autotune.database import Database
from minitc.autotune.registry import make_runner
from minitc.autotune.runner import Task
from minitc.autotune.space import Space
from minitc.autotune.tuner import decode_trace, tune
from minitc.benchmarks.host_load import ForeignLoad
from minitc.benchmarks.programs import kernels_ms, template_kernel_ms, template_trace
from minitc.benchmarks.tlm_report import _at, _matched
from minitc.benchmarks.tuning import cost_model_for
from minitc.lm.training_set import HELD_OUT
from minitc.target import is_gpu

# Foreign load (host_load.ForeignLoad, in CPUs) at or above which a measurement is suspect: on a
# 2-core host one other busy process doubles a 2-thread kernel's time.
BUSY = 0.3
RETRIES, QUIET_WAIT_S = 2, 30.0


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
    out = {}
    for k in budgets:
        ok = [r for r in records[:k] if r.ok]
        if ok:
            out[k] = decode_trace(min(ok, key=lambda r: r.median_ms).trace)[1].to_json()
    return out


def _confirmed_winners(out, records: list, result, budgets, loads=None) -> dict:
    """{k: (trace JSON, ms, seconds)}: what tuning with a budget of k returns, its re-measured
    latency and the tuning time to get there, from the run's `records` (its trials, in order).
    The full budget's answer is the run's own; a smaller budget's comes from re-measuring, as
    the tuner does, a copy of the first k records. A re-measurement during which other
    processes took BUSY CPUs or more is done again after waiting for quiet (RETRIES times at
    most); `loads` gets {k: the foreign CPUs of its last re-measurement}."""
    from minitc.autotune.tuner import decode_trace, remeasure_best
    from minitc.timing import wait_for_quiet

    loads = {} if loads is None else loads

    answers = {}
    if result.best_trace:
        answers[len(records)] = (decode_trace(result.best_trace)[1].to_json(), result.best_ms, result.seconds)
    smaller = [k for k in budgets if k < len(records) and any(r.ok for r in records[:k])]
    if smaller:
        space = Space(out, records[0].target)
        task, runner = Task.from_outputs(space.outputs, space.target.string), make_runner("local", space.target)
        try:
            for k in smaller:
                start = time.perf_counter()
                for attempt in range(1 + RETRIES):  # again when someone else's process took a core meanwhile
                    with (
                        tempfile.TemporaryDirectory(prefix="minitc-budget-") as tmp,
                        Database(os.path.join(tmp, "r.db")) as copy,
                        ForeignLoad() as load,
                    ):
                        for r in records[:k]:
                            copy.add(replace(r, id=None))
                        ms, trace = remeasure_best(copy, result.workload, space, records[0].hardware, task, runner)
                    loads[k] = load.cpus
                    if load.cpus is None or load.cpus < BUSY or attempt == RETRIES:
                        break
                    wait_for_quiet(QUIET_WAIT_S)
                answers[k] = (decode_trace(trace)[1].to_json(), ms, result.times[k - 1] + time.perf_counter() - start)
        finally:
            runner.close()
    return {k: answers[min(k, len(records))] for k in budgets if min(k, len(records)) in answers}


def retime(out, rows_traces: dict, rounds: int, target="llvm") -> dict:
    """{label: median ms}: each distinct winner (TLM@k, Evo@t) built once and timed side by side."""
    by_trace = {}
    for label, trace in rows_traces.items():
        by_trace.setdefault(trace, []).append(label)
    with _runner(target) as runner:
        timed = kernels_ms(out, {str(n): t for n, t in enumerate(by_trace)}, target, rounds, runner=runner)
    return {label: timed[str(n)] for n, labels in enumerate(by_trace.values()) for label in labels}


@contextmanager
def _runner(target):
    """The runner of `target`'s kind (None: kernels_ms's CPU default), closed afterwards."""
    runner = make_runner("local", target) if is_gpu(target) else None
    try:
        yield runner
    finally:
        if runner is not None:
            runner.close()


def _template_ms(out, target) -> float | None:
    with _runner(target) as runner:
        return template_kernel_ms(out, target, runner=runner)


def evaluate_workload(
    name: str,
    make,
    ks,
    evo_trials,
    seed: int = 0,
    say=None,
    lm=None,
    evo_from=None,
    retime_rounds: int = 5,
    target="llvm",
) -> dict:
    """One row of the table. `evo_from`: a row of an earlier run whose evolutionary search is
    reused (its budget must cover `evo_trials`): only TLM is run again. The winners at each
    budget are then timed again side by side (`retime_rounds`; 0 skips it)."""

    say = say or (lambda msg: None)
    out = make()
    runs, winners, first, measured, seconds = {}, {}, {}, {}, {}
    foreign = {}  # CPUs other processes took during each search and re-measurement (host_load)
    plan = [("tlm", max(ks))] + ([] if evo_from else [("evolutionary", max(evo_trials))])
    for strategy, trials in plan:
        say(f"{name}: {strategy}, {trials} trials")
        label, budgets = ("TLM", ks) if strategy == "tlm" else ("Evo", evo_trials)
        with tempfile.TemporaryDirectory(prefix="minitc-tlm-eval-") as tmp, ForeignLoad() as load:
            r = tune(
                out,
                trials=trials,
                strategy=strategy,
                db=os.path.join(tmp, "r.db"),
                seed=seed,
                cost_model=cost_model_for(strategy, target=target)[0],  # as `minitc tune` gives each
                template_first=False,
                lm=lm,
                target=target,
            )
            with Database(os.path.join(tmp, "r.db")) as db:
                records = db.records(r.workload)[: len(r.history)]  # the trials, not the re-measurements
        foreign[f"{label} search"] = load.cpus
        first.update({f"{label}@{k}": t for k, t in _first_winners(records, budgets).items()})
        loads: dict = {}
        for k, (trace, ms, s) in _confirmed_winners(out, records, r, budgets, loads).items():
            winners[f"{label}@{k}"], measured[f"{label}@{k}"], seconds[f"{label}@{k}"] = trace, ms, s
        foreign.update({f"{label}@{k}": c for k, c in loads.items()})
        runs[strategy] = r
    if evo_from:  # its evolutionary winners only: the TLM ones were another run's answers
        winners.update(_evo_labels(evo_from.get("winners", {})))
        first.update(_evo_labels(evo_from.get("first_winners", {})))
        for t in evo_trials:
            measured[f"Evo@{t}"], seconds[f"Evo@{t}"] = _at(evo_from["evo_ms"], t), _at(evo_from["evo_seconds"], t)
    tlm = runs["tlm"]
    evo = runs.get("evolutionary") or SimpleNamespace(
        history=evo_from["evo_history"],
        times=evo_from["evo_times"],
        errors=evo_from["evo_errors"],
        phases=evo_from.get("evo_phases", {}),
    )
    row = {
        "workload": name,
        "template_ms": _template_ms(out, target),
        "tlm_ms": {k: measured.get(f"TLM@{k}") for k in ks},
        "evo_ms": {t: measured.get(f"Evo@{t}") for t in evo_trials},
        "tlm_seconds": {k: seconds.get(f"TLM@{k}") for k in ks},
        "evo_seconds": {t: seconds.get(f"Evo@{t}") for t in evo_trials},
        "tlm_history": tlm.history,
        "evo_history": evo.history,
        "tlm_times": tlm.times,
        "evo_times": evo.times,
        "valid_rate": tlm.search_stats.get("valid_rate"),
        "tlm_stats": tlm.search_stats,
        # seconds of each run by phase (search, build, run, record, model, kernel, total)
        "tlm_phases": _rounded(tlm.phases),
        "evo_phases": _rounded(evo.phases),
        "tlm_errors": tlm.errors,
        "evo_errors": evo.errors,
        # an --evo-from run older than the finalists' confirmation has first-measurement winners only
        "evo_confirmed": not evo_from or "first_winners" in evo_from,
    }
    row["winners"], row["first_winners"] = winners, first
    if retime_rounds and winners:
        template = template_trace(out, target)  # timed with them: what the searches add to the hand schedule
        extra = {"template": template} if template is not None else {}
        timed = {**winners, **{f"{label} first": t for label, t in first.items()}, **extra}
        say(f"{name}: timing the {len(set(timed.values()))} winners again, side by side")
        with ForeignLoad() as load:
            row["retimed_ms"] = retime(out, timed, retime_rounds, target)
        foreign["side by side"] = load.cpus
    row["foreign_cpus"] = {k: None if v is None else round(v, 3) for k, v in foreign.items()}
    top = max(evo_trials)
    row["evo_best_s"] = _time_to(evo.history, evo.times, row["evo_ms"][top])
    row["tlm_time_to_evo_best_s"] = _time_to(tlm.history, tlm.times, row["evo_ms"][top])
    row["tlm_matches_evo"], row["evo_matches_evo"] = _matched([row], ks, evo_trials)[0]
    return row


def _rounded(phases: dict) -> dict:
    return {k: round(v, 3) for k, v in phases.items()}


def _evo_labels(by_label: dict) -> dict:
    return {label: v for label, v in by_label.items() if label.startswith("Evo@")}


def run(
    names=None, ks=(1, 10, 32, 64), evo_trials=(64, 256, 1000), seed=0, say=None, lm=None, evo_from=None, target="llvm"
) -> list:
    """Rows of the table; `evo_from` (the JSON path of an earlier run, or its rows) reuses its
    evolutionary runs. `target`: a CPU target of this host, or "cuda" (the GPU here)."""
    if is_gpu(target):
        from minitc.backends.cuda.device import device_target

        target = device_target(target).string  # the GPU here, as the tuner records it
    names = select(names)
    from_file = isinstance(evo_from, (str, os.PathLike))
    evo_from_rows = json.loads(Path(evo_from).read_text())["rows"] if from_file else evo_from or []
    earlier = {r["workload"]: r for r in evo_from_rows}
    if say and evo_from_rows and not all("first_winners" in r for r in evo_from_rows):
        say(
            f"note: {evo_from if from_file else 'the earlier run'} predates the finalists' re-measurement: "
            "its evolutionary winners are its fastest first measurements"
        )
    short = [n for n in names if evo_from and (n not in earlier or len(earlier[n]["evo_history"]) < max(evo_trials))]
    if short:
        raise KeyError(
            f"{evo_from if from_file else 'the earlier run'} has no evolutionary run of "
            f"{max(evo_trials)} trials for {', '.join(short)}"
        )
    warm_torch_optim()
    return [
        evaluate_workload(n, workloads()[n], list(ks), list(evo_trials), seed, say, lm, earlier.get(n), target=target)
        for n in names
    ]


def workloads() -> dict:
    """{name: make}: the held-out workloads, then the handwritten suite's operators (written
    with tc.compute, none of them a training workload), which run only when named."""
    from minitc.benchmarks.handwritten import HANDWRITTEN

    return {**HELD_OUT, **{w.name: w.make_minitc for w in HANDWRITTEN}}


def select(names) -> list:
    """The workloads named (the held-out ones when none are); KeyError naming them otherwise."""
    known = workloads()
    unknown = [n for n in names or () if n not in known]
    if unknown:
        handwritten = [n for n in known if n not in HELD_OUT]
        raise KeyError(
            f"tlm-eval runs held-out workloads only ({', '.join(HELD_OUT)}) and the handwritten suite's "
            f"operators ({', '.join(handwritten)}); unknown: {', '.join(unknown)}"
        )
    return list(names or HELD_OUT)


def warm_torch_optim() -> None:
    """Both searches' cost models train with a torch optimizer, whose first construction in a
    process imports torch._dynamo (3-4 s on a 2-core Zen 4): done once before any search is
    timed, so that the order of the searches does not decide which one pays it."""
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def run_seeds(names, ks, evo_trials, seeds, say=None, lm=None, evo_from=None, target="llvm") -> dict:
    """{seed: rows}: TLM once per seed, against one evolutionary run (that of `evo_from`, else
    the first seed's). The model's first samples decide much of a workload's result, so one
    seed's geomean moves by several percent; the seeds table shows how much."""
    by_seed = {}
    for seed in seeds:
        by_seed[seed] = run(names, ks, evo_trials, seed, say, lm, evo_from, target)
        evo_from = evo_from or by_seed[seed]
    return by_seed


def without_hardware(entries: list, fingerprint: str) -> tuple:
    """(the entries of every other hardware description, how many of `fingerprint` there were):
    the training side of a leave-one-hardware-out split. Unlike dataset.split_by_hardware, a
    dataset without `fingerprint` is no error: all of it is then already without it."""
    kept = [e for e in entries if e.fingerprint != fingerprint]
    return kept, len(entries) - len(kept)


def leave_out_model(base, out, *, data=None, target: str = "llvm", threads=None, say=None) -> dict:
    """Fine-tune a copy of the checkpoint `base` (default: the shipped one) on the dataset
    `data` (default: lm/data) without the hardware description of `target` on this host, into
    `out`; returns its meta. A base already fine-tuned on measurements of a machine like this
    one is refused: more fine-tuning would not make it forget them."""
    from minitc.lm.data import dataset_demonstrations
    from minitc.lm.dataset import DATA_DIR, load
    from minitc.lm.hardware import hardware, of_kind, same_machine, trained_hardware
    from minitc.lm.model import LMError
    from minitc.lm.pipeline import SHIPPED, finetune, load_model
    from minitc.target import hardware_fingerprint, parse_target

    say = say or (lambda msg: None)
    base, data = Path(base or SHIPPED), Path(data or DATA_DIR)
    fingerprint, here = hardware_fingerprint(parse_target(target)), hardware(target)
    seen = [line for line in trained_hardware(load_model(base)[2], measured=True) if same_machine(line, here)]
    if seen:
        raise LMError(
            f"{base} was fine-tuned on measurements of this machine (`{seen[0].split(' gflops ')[0]}`), so a "
            "copy of it cannot evaluate the model on hardware it has not seen: start from a checkpoint "
            "that was not (--lm, e.g. the one `minitc lm pretrain` wrote)"
        )
    entries, held = without_hardware(of_kind(load(data), target), fingerprint)
    if held:
        say(f"leave-out: fine-tuning {base.name} on {len(entries)} programs, without the {held} of {fingerprint}")
    else:
        say(f"leave-out: the dataset has no programs of {fingerprint}; fine-tuning {base.name} on all {len(entries)}")
    demos = dataset_demonstrations(entries)
    stage = {"left_out": fingerprint}
    return finetune(base, None, out, demos=demos, source=f"{data} without {fingerprint}", stage=stage, threads=threads)


def leave_out_cost_model(out, *, data=None, target: str = "llvm", members=None, epochs=30, say=None) -> dict:
    """Train the cost model the tlm strategy ranks with (MTL-TLP, lm/mtl.py, an ensemble as
    shipped) on the dataset without this host's hardware description, into `out`: a left-out
    evaluation must not rank with a cost model that learned this machine either (the shipped
    one has its head and its backbone saw its programs)."""
    from minitc.lm.cost import MEMBERS
    from minitc.lm.dataset import DATA_DIR, load
    from minitc.lm.hardware import of_kind
    from minitc.lm.mtl import train_mtl_model
    from minitc.target import hardware_fingerprint, parse_target

    say = say or (lambda msg: None)
    fingerprint = hardware_fingerprint(parse_target(target))
    entries, held = without_hardware(of_kind(load(Path(data or DATA_DIR)), target), fingerprint)
    start = time.perf_counter()
    say(f"leave-out: training the cost model on {len(entries)} programs, without the {held} of {fingerprint}")
    model, used, _ = train_mtl_model(entries, epochs=epochs, members=members or MEMBERS)
    model.save(out)
    return {"programs": used, "seconds": time.perf_counter() - start}
