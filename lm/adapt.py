"""`minitc lm adapt`: fit the language model to this machine in about a quarter of an hour.

    result = adapt()                      # the shipped model, the training workloads, 12 minutes
    minitc tune ... --lm <result.path>    # or MINITC_LM=<result.path>

1. **Measure a sample.** The training workloads (`minitc lm workloads`) are measured in passes:
   each pass adds a few programs of every workload, half proposed by the model (the hand
   template's program first), a quarter near the template's program (one to four decisions
   away: on a new kind of machine its best programs are there more often than where other
   machines' were) and a quarter random, until each workload has `per_workload` new
   programs or three quarters of the time is spent. Passes rather than one workload after
   another, so a time limit leaves a sample of every workload. The programs go to a records
   database and, as `minitc lm measure` does, to the dataset.
2. **Fine-tune a copy.** The starting model (the shipped one, or `checkpoint`) is fine-tuned
   on every program of this machine (the dataset's and the records database's) plus a random
   sample of the dataset's other machines, at most `others` per program of this machine: the
   model leans towards this machine but keeps what it knows of the rest, and the fine-tuning
   time does not grow with the dataset. It gets the rest of the time.
3. **Keep it** in the user's cache directory, next to the `--learn` model
   (pipeline.adapted_model_path); the shipped checkpoint is never written.
4. **Give the cost model this machine's head**: the shipped MTL-TLP model (lm/mtl.py, one
   backbone trained on every CPU of the dataset; or the MTL model MINITC_COST_MODEL names, the
   one the tlm strategy ranks with then) learns a head for this hardware description
   from this machine's programs, the backbone unchanged. Without a shipped MTL model, a
   separate model is trained on the same programs as the language model (an ensemble, as
   `minitc lm cost-model` ships). Either is kept in the cache directory too
   (cost.adapted_cost_model_path), whatever `out` is: it belongs to the machine, not to one
   language model. The tlm strategy ranks with it on this machine.

Measuring uses tuning sessions directly (minitc.autotune.tuner.TuningSession), one round per
workload and strategy, sharing one builder and one runner: `tune` would also re-measure each
call's finalists and build its best kernel, which training data does not need.
"""

from __future__ import annotations

import math
import os
import secrets
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_MINUTES = 12
MEASURE_SHARE = 0.75  # of the time; fine-tuning gets the rest
SOURCE = "minitc lm adapt"


@dataclass
class AdaptResult:
    path: Path  # the adapted checkpoint
    fingerprint: str  # the hardware description adapted to
    measured: int  # programs measured by this run
    here: int  # programs of this machine fine-tuned on (this run's and earlier ones)
    others: int  # programs of other machines fine-tuned on
    measure_seconds: float
    finetune_seconds: float
    meta: dict
    cost_path: Path  # the cost model trained on the same programs (lm/cost.py)


def adapt(
    *,
    checkpoint=None,
    out=None,
    names=None,
    minutes: float = DEFAULT_MINUTES,
    per_workload: int = 16,
    step: int = 4,
    others: float = 2.0,
    target: str = "llvm",
    db=None,
    dataset=None,
    keep: bool = True,
    seed: int | None = None,
    threads: int | None = None,
    say=None,
) -> AdaptResult:
    """Measure a sample of the training workloads `names` on `target`, then fine-tune
    `checkpoint` (default: the shipped model) into `out` (default: adapted_model_path of this
    machine). `dataset` (default: the package's lm/data) is read for the other machines'
    programs and, with `keep`, appended to. `db` is the records database (default: next to the
    user's model). See the module docstring."""
    from minitc.lm.cost import MEMBERS, adapted_cost_model_path, train_cost_model
    from minitc.lm.dataset import DATA_DIR
    from minitc.lm.language import parse
    from minitc.lm.model import LMError
    from minitc.lm.mtl import adapted_mtl_model
    from minitc.lm.pipeline import SHIPPED, adapted_model_path, user_model_path
    from minitc.lm.training_set import TRAINING
    from minitc.target import hardware_fingerprint, is_gpu, parse_target

    say = say or (lambda msg: None)
    if seed is None:  # a fresh sample: seed 0 would repeat the random programs `measure` keeps
        seed = secrets.randbelow(2**31)
        say(f"sampling with --seed {seed}")
    start = time.monotonic()
    budget = minutes * 60
    if is_gpu(target):
        raise LMError(f"`minitc lm adapt` adapts the model to a CPU target, not {target!r}")
    fingerprint = hardware_fingerprint(parse_target(target))
    checkpoint = Path(checkpoint or SHIPPED)
    out = Path(out or adapted_model_path(fingerprint))
    refuse_shipped(out)
    db = Path(db or user_model_path().parent / "adapt-records.db")
    dataset = Path(dataset or DATA_DIR)
    measured = measure_sample(
        list(names or TRAINING),
        db,
        checkpoint,
        target=target,
        per_workload=per_workload,
        step=step,
        deadline=start + budget * MEASURE_SHARE,
        dataset=dataset if keep else None,
        seed=seed,
        say=say,
    )
    measure_seconds = time.monotonic() - start
    here_entries, rest_entries = mixture(db, dataset, target, others, np.random.default_rng(seed))
    here = [(parse(e.sentence), w) for e, w in here_entries]
    rest = [(parse(e.sentence), w) for e, w in rest_entries]
    say(f"fine-tuning {checkpoint.name} on {len(here)} programs of this machine and {len(rest)} of others")
    seconds = max(start + budget - time.monotonic(), budget * (1 - MEASURE_SHARE))
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = _finetune(checkpoint, out, here, rest, fingerprint, seconds, threads, say)
    started = time.monotonic()
    cost = adapted_mtl_model([e for e, _ in here_entries], fingerprint, path=os.environ.get("MINITC_COST_MODEL"))
    if cost is None:  # no MTL model to give a head: a model of its own, as before MTL-TLP
        cost = train_cost_model([e for e, _ in here_entries + rest_entries], members=MEMBERS)[0]
    cost_path = adapted_cost_model_path(fingerprint)
    cost.save(cost_path)
    say(f"trained the cost model {cost_path.name} in {time.monotonic() - started:.0f} s")
    return AdaptResult(
        out, fingerprint, measured, len(here), len(rest), measure_seconds, meta["seconds"], meta, cost_path
    )


def refuse_shipped(out) -> None:
    """An LMError if `out` is the package's own checkpoint, which adapting never overwrites."""
    from minitc.lm.model import LMError
    from minitc.lm.pipeline import SHIPPED

    if Path(out).resolve() == SHIPPED.resolve():
        raise LMError(
            f"{out} is the model minitc ships, which adapting never overwrites; leave --out out "
            "(the adapted model goes to your cache directory) or name another file"
        )


def measure_sample(
    names, db, checkpoint, *, target, per_workload, step, deadline, dataset=None, seed=0, say=None
) -> int:
    """Measure up to `per_workload` new programs of each workload, `step` per pass (half the
    model's, a quarter near the template's, a quarter random), until `deadline`
    (time.monotonic()); with `dataset`, append each workload's new programs to it. Returns how
    many programs were measured."""
    from minitc.autotune.registry import make_runner
    from minitc.autotune.runner import LocalBuilder
    from minitc.lm.dataset import minitc_version
    from minitc.lm.export import Exporter

    say = say or (lambda msg: None)
    exporter = Exporter(dataset, version=minitc_version(), source=SOURCE) if dataset else None
    done = dict.fromkeys(names, 0)
    builder, runner = LocalBuilder(workers=2), make_runner("local", target)
    try:
        for n in range(math.ceil(per_workload / step)):
            for name in names:
                if time.monotonic() > deadline:
                    say(f"measuring stopped at its time limit, in pass {n + 1}")
                    return sum(done.values())
                count = min(step, per_workload - done[name])
                measured, line = _measure_workload(
                    name, db, checkpoint, target, count, seed + n, (builder, runner), exporter
                )
                done[name] += measured
                say(f"[pass {n + 1}] {name}: {line}")
    finally:
        builder.close()
        runner.close()
    return sum(done.values())


def _measure_workload(name, db, checkpoint, target, count, seed, workers, exporter) -> tuple:
    """(programs measured, a progress line): `count` new programs of one workload, half by
    the tlm strategy (the template's program first, if not measured yet), a quarter near the
    template's program, a quarter random."""
    from minitc.autotune.database import Database
    from minitc.autotune.tuner import TuningSession
    from minitc.autotune.workload_key import workload_key
    from minitc.lm.hardware import HardwareWarning
    from minitc.lm.training_set import workload

    out = workload(name)
    key = workload_key(out)
    builder, runner = workers
    start = time.perf_counter()
    measured, errors, best = 0, 0, math.inf
    with Database(db) as database:
        last = max((r.id for r in database.records(key)), default=0)
        near = (count // 2 + 1) // 2
        for strategy, n in (("tlm", (count + 1) // 2), ("near-template", near), ("random", count // 2 - near)):
            if n == 0:
                continue
            with warnings.catch_warnings():  # the warning would advise what this run is doing
                warnings.simplefilter("ignore", HardwareWarning)
                session = TuningSession(
                    out, strategy, target, database, seed=seed, builder=builder, runner=runner, lm=str(checkpoint)
                )
            try:
                session.round(n)
            finally:
                session.close()
            measured, errors, best = measured + session.done, errors + session.errors, min(best, session.best)
        fastest = f"best {best:.4g} ms" if math.isfinite(best) else "none ran"
        line = f"{measured} measured, {errors} errors, {fastest}, {time.perf_counter() - start:.0f} s"
        if exporter:
            line += f"; dataset: {exporter.export(database, workloads={key}, after_id=last)}"
    return measured, line


def mixture(db, dataset, target, others: float, rng) -> tuple:
    """(this machine's (dataset entry, weight) pairs, a sample of the other machines'): every
    program of `target` on this machine in the dataset folder and the records database `db`,
    and at most `others` times as many programs of other machines from the dataset (chosen
    at random, weighted as they are in the whole dataset)."""
    from minitc.lm.data import weighted_entries
    from minitc.lm.dataset import load
    from minitc.lm.hardware import is_gpu_line
    from minitc.target import hardware_fingerprint, is_gpu, parse_target

    fingerprint = hardware_fingerprint(parse_target(target))
    entries = load(dataset, sentences=False) if Path(dataset).exists() else []
    known = {e.identity for e in entries}
    entries += [e for e in records_entries(db) if e.identity not in known]
    weighted = weighted_entries(entries)
    here = [(e, w) for e, w in weighted if e.fingerprint == fingerprint]
    # other machines of the same kind: a CPU model neither writes nor needs a GPU's sentences
    gpu = is_gpu(target)
    rest = [(e, w) for e, w in weighted if e.fingerprint != fingerprint and is_gpu_line(e.hardware) == gpu]
    keep = min(len(rest), math.floor(others * len(here)))
    rest = [rest[i] for i in sorted(rng.choice(len(rest), size=keep, replace=False))] if keep else []
    return here, rest


def records_entries(db) -> list:
    """Every program of the records database `db` as a dataset entry (lm/export.py), if it
    exists; programs without a sentence are left out."""
    from minitc.autotune.database import Database
    from minitc.lm.export import entry_from_record
    from minitc.lm.language import SentenceError

    if not Path(db).exists():
        return []
    out = []
    with Database(db) as database:
        for key, description in database.workloads():
            for record in database.programs(key):
                try:
                    entry = entry_from_record(record, description, version=None, source=SOURCE)
                except SentenceError:  # a record of an older minitc: not training data
                    continue
                if entry is not None:
                    out.append(entry)
    return out


def _finetune(checkpoint, out, here, rest, fingerprint, seconds, threads, say) -> dict:
    """Fine-tune `checkpoint` on this machine's and the others' programs into `out`, in at most
    `seconds`."""
    from minitc.lm.model import LMError
    from minitc.lm.pipeline import finetune

    if not here:
        raise LMError(
            "nothing of this machine was measured (every program failed, or the time ran out first): "
            "give `minitc lm adapt` more --minutes"
        )
    line = str(here[0][0].hardware)
    stage = {"stage": "adapt", "adapted_to": fingerprint, "hardware": line, "here": len(here), "others": len(rest)}
    started = time.monotonic()

    def progress(step, total, loss):
        if step % 20 == 0 or step == total:
            say(f"step {step}/{total}  loss {loss:.3f}  {time.monotonic() - started:.0f} s of at most {seconds:.0f} s")

    return finetune(
        checkpoint,
        None,
        out,
        demos=here + rest,
        source=SOURCE,
        stage=stage,
        max_seconds=seconds,
        threads=threads,
        progress=progress,
    )
