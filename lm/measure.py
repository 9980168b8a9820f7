"""Measuring programs of the training workloads for the language model's data: `measure`
(this machine, or a Ray cluster's builders and runners) and `measure_on_ray` (once per kind of
node of a cluster, each with its own hardware line). `minitc lm measure`, `loop` and `adapt`
call them; so does experiments/gpu_collect.py."""

from __future__ import annotations

import contextlib
import time

import click

from minitc.autotune.database import Database
from minitc.autotune.tuner import tune
from minitc.autotune.workload_key import workload_key
from minitc.errors import MinitcError
from minitc.lm.training_set import workload


def say(msg: str) -> None:
    click.echo(msg, err=True)


def measure_on_ray(address, db, names, per_workload, strategy, lm_path, seed, target, dataset) -> None:
    """`measure` once per kind of node of a Ray cluster: `target` on the kind its records are
    keyed by (nodes like this machine), every other kind for its own CPU, with the hardware
    line one of its nodes gives itself (this machine's caches and rates are not theirs)."""
    from minitc.autotune.ray_runner import RayRunner
    from minitc.lm.hardware import hardware

    runner = RayRunner(None if address == "auto" else address)
    with runner:
        try:
            own = runner.kind_for(target)
        except MinitcError as e:
            own = None
            say(f"not measuring {target}: {e}")
        for kind in runner.kinds():
            kind_target = target if kind == own else kind.target
            say(f"nodes {kind}: measuring {kind_target}")
            try:
                line = None if kind == own else runner.call(kind, hardware, kind.target)
                with sentences_of(line):
                    measure(
                        db,
                        names,
                        per_workload,
                        strategy,
                        lm_path,
                        seed,
                        target=kind_target,
                        dataset=dataset,
                        runner=runner,
                    )
            except MinitcError as e:
                say(f"nodes {kind.fingerprint}: {e}")


@contextlib.contextmanager
def sentences_of(line):
    """Records' sentences written with the hardware line `line` (another machine's) instead of
    this machine's, for the duration; None changes nothing."""
    if line is None:
        yield
        return
    from minitc.autotune.registry import RECORD_EXTRAS, register_record_extras, strategy_names
    from minitc.lm.language import SentenceWriter

    strategy_names()  # loads the plug-ins first, so that theirs cannot replace this one
    before = RECORD_EXTRAS["sentence"]

    def extras(space):
        write = SentenceWriter(space, line)
        return lambda candidate: {"sentence": str(write(candidate.decisions))}

    register_record_extras("sentence", extras)
    try:
        yield
    finally:
        register_record_extras("sentence", before)


def measure(
    db,
    names,
    per_workload,
    strategy="random",
    lm_path=None,
    seed=0,
    add=False,
    target="llvm",
    dataset=None,
    source="minitc lm measure",
    runner=None,
) -> None:
    """Measure each workload up to `per_workload` programs of `target` in `db` (with `add`: that
    many more); with `dataset` (a folder), append each workload's new programs to it. `runner`:
    a runner that also builds (RayRunner), else this machine's processes."""
    from minitc.lm.dataset import minitc_version
    from minitc.lm.export import Exporter
    from minitc.target import parse_target

    exporter = Exporter(dataset, version=minitc_version(), source=source) if dataset else None
    target_string = parse_target(target).string
    for n, name in enumerate(names):
        out = workload(name)
        key = workload_key(out)
        with Database(db) as d:
            have = len(d.programs(key, target_string))
            last = max((r.id for r in d.records(key)), default=0)
        todo = per_workload if add else per_workload - have
        if todo <= 0:
            say(f"[{n + 1}/{len(names)}] {name}: {have} programs already measured")
            continue
        start = time.perf_counter()
        r = tune(
            out,
            trials=todo,
            strategy=strategy,
            target=target,
            db=db,
            seed=seed + have,
            lm=lm_path,
            builder=runner,
            runner=runner,
        )
        kept = ""
        if exporter:
            with Database(db) as d:
                kept = f"; dataset: {exporter.export(d, workloads={key}, after_id=last)}"
        say(
            f"[{n + 1}/{len(names)}] {name}: {r.trials} measured, {r.errors} errors, best {r.best_ms} ms, "
            f"{time.perf_counter() - start:.0f} s{kept}"
        )
