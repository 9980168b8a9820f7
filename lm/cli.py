"""`minitc lm ...`: build the language model's data, train it, and improve it with measurements.

minitc lm gen-data pretrain.jsonl --per-workload 512        # random programs as sentences
minitc lm pretrain pretrain.jsonl --out lm.pt                # loss on decision tokens only
minitc lm measure --db lm-records.db --per-workload 32       # measured programs (random)
minitc lm finetune lm.pt --db lm-records.db --out lm-ft.pt   # throughput-weighted
minitc lm loop lm-ft.pt --db lm-records.db --rounds 2        # measure with the model, fine-tune, repeat
minitc lm workloads                                          # the training and held-out sets
minitc lm data --check                                       # the kept dataset (lm/data): summary, check
minitc lm export-db ~/.cache/minitc/records.db               # keep a records database's programs in it
minitc lm finetune lm.pt --data lm/data --out lm-ft.pt       # fine-tune on the dataset
minitc lm adapt                                              # this machine: measure a sample, fine-tune a copy

`measure`, `loop` and `adapt` add what they measure to the dataset (`--dataset`, default the package's
lm/data: a checkout's new shards show in `git status`, to commit; `--no-dataset` to keep
nothing but the records database).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from minitc.autotune.database import Database, DatabaseError
from minitc.autotune.workload_key import describe
from minitc.errors import MinitcError
from minitc.lm.adapt import DEFAULT_MINUTES
from minitc.lm.cost import MEMBERS as COST_MEMBERS
from minitc.lm.measure import measure, measure_on_ray
from minitc.lm.training_set import HELD_OUT, TRAINING


def _names(value: str | None, default) -> list:

    if not value:
        return list(default)
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAINING and n not in HELD_OUT]
    if unknown:
        raise click.BadParameter(f"unknown workloads {unknown}; see `minitc lm workloads`", param_hint="--workloads")
    return names


def _list(value: str | None) -> list | None:
    return [n.strip() for n in value.split(",") if n.strip()] if value else None


def _writable(ctx, param, value):
    """click callback: refuse an output file that cannot be written before any work starts
    (opened for appending, so an existing file keeps its content)."""
    if value is None:
        return value
    path = Path(value)
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise click.BadParameter(f"cannot write {value} ({e.strerror}); give a path in a writable folder") from None
    if not existed:
        path.unlink()
    return value


def _records(ctx, param, value):
    """click callback: open (or create) the records database now, so a bad file fails first."""
    if value is None:
        return None
    try:
        Database(value).close()
    except DatabaseError as e:
        raise click.BadParameter(str(e)) from None
    return value


def _dataset(ctx, param, value):
    """click callback for --dataset: the folder new shards go to (default: the package's
    lm/data), checked writable and its existing shards valid before any measuring."""
    from minitc.lm.dataset import DATA_DIR, DatasetError
    from minitc.lm.export import Exporter

    if ctx.params.get("no_dataset"):
        return None
    folder = Path(value) if value else DATA_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise click.BadParameter(f"cannot create {folder} ({e.strerror}); pass --dataset DIR or --no-dataset") from None
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write to {folder}; pass --dataset DIR or --no-dataset")
    try:
        Exporter(folder, source="check")  # loads the dataset: a damaged one fails now, not after measuring
    except DatasetError as e:
        raise click.BadParameter(str(e)) from None
    return folder


def _dataset_options(f):
    """--dataset DIR / --no-dataset, for the commands that measure."""
    f = click.option(
        "--dataset",
        type=click.Path(file_okay=False),
        callback=_dataset,
        help="Dataset folder the measured programs are appended to, as new shards (default: the package's lm/data).",
    )(f)
    return click.option(
        "--no-dataset", is_flag=True, is_eager=True, help="Keep the measurements in the records database only."
    )(f)


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.group("lm", context_settings={"help_option_names": ["-h", "--help"]})
def lm():
    """The tensor language model: data, training, fine-tuning."""


@lm.command("workloads")
def workloads_cmd():
    """List the training and held-out workloads."""
    for title, table in (("training", TRAINING), ("held out (never trained on)", HELD_OUT)):
        click.echo(f"{title}: {len(table)}")
        for name, make in table.items():
            click.echo(f"  {name:24s} {describe(make())}")


@lm.command("gen-data")
@click.argument("out", type=click.Path(dir_okay=False), callback=_writable)
@click.option("--per-workload", default=512, show_default=True, type=click.IntRange(min=1))
@click.option("--workloads", help="Comma-separated names (default: the training set).")
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--near-template",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of each templated workload's programs drawn near the template's default program "
    "(the prompt's `default` line) rather than uniformly.",
)
@click.option(
    "--target",
    default="llvm",
    show_default=True,
    help="The design space to sample: a CPU target, or 'cuda' / 'cuda -arch=sm_XX' for GPU programs (no GPU needed).",
)
def gen_data_cmd(out, per_workload, workloads, seed, near_template, target):
    """Append random legal programs of each workload, as sentences, to OUT (JSON lines)."""
    from minitc.lm.data import gen_data
    from minitc.lm.training_set import TRAINING

    start = time.perf_counter()
    n = gen_data(
        out,
        _names(workloads, TRAINING),
        per_workload,
        seed,
        near_template=near_template,
        progress=lambda i, t, name: _say(f"[{i}/{t}] {name}"),
        target=target,
    )
    click.echo(f"wrote {n} sentences to {out} in {time.perf_counter() - start:.1f} s")


@lm.command("pretrain")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=_writable)
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--max-minutes",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Stop training after this long.",
)
@click.option("--d-model", default=192, show_default=True, type=click.IntRange(min=4))
@click.option("--layers", default=4, show_default=True, type=click.IntRange(min=1))
@click.option("--lr", default=1e-3, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="torch threads (1 is fastest on a busy 2-core machine).",
)
@click.option(
    "--init",
    type=click.Path(exists=True, dir_okay=False),
    help="Start from this checkpoint's weights (--d-model and --layers are then its own).",
)
def pretrain_cmd(data, out, epochs, max_minutes, d_model, layers, lr, threads, init):
    """Train a new model on gen-data sentences."""
    from minitc.lm.pipeline import pretrain

    config = {"d_model": d_model, "n_layers": layers, "n_heads": 4, "d_ff": 4 * d_model}
    meta = pretrain(
        list(data),
        out,
        config=config,
        epochs=epochs,
        lr=lr,
        max_seconds=max_minutes * 60,
        threads=threads,
        progress=_every(20),
        init=init,
    )
    click.echo(json.dumps({k: v for k, v in meta.items() if k != "history"}, indent=1))


def _every(n: int):
    start = time.perf_counter()

    def progress(step, total, loss):
        if step % n == 0 or step == total:
            _say(f"step {step}/{total}  loss {loss:.3f}  {time.perf_counter() - start:.0f} s")

    return progress


@lm.command("measure")
@click.option(
    "--db", required=True, type=click.Path(dir_okay=False), callback=_records, help="Records database to fill."
)
@click.option(
    "--per-workload",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Measured programs per workload (counting those already there: re-running resumes).",
)
@click.option(
    "--strategy",
    type=click.Choice(("random", "near-template", "tlm")),
    default="random",
    show_default=True,
    help="random: uniform samples; near-template: the hand template's program and its near variants "
    "(random where a workload has none); tlm: the language model's.",
)
@click.option("--lm", "lm_path", type=click.Path(exists=True, dir_okay=False), help="Checkpoint for --strategy tlm.")
@click.option("--workloads", help="Comma-separated names (default: the training set).")
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--target",
    default="llvm",
    show_default=True,
    help="CPU target to measure for, e.g. 'llvm -mcpu=haswell' (AVX2 code on an AVX-512 host) or "
    "'llvm -num-cores=1'; each is its own hardware description in the dataset.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    metavar="[ADDRESS]",
    help="Measure on a Ray cluster (its head's ADDRESS, else the one started on this machine): --target "
    "on the nodes like this machine, and every other kind of node for its own CPU, each kind its own "
    "hardware description (docs/distributed.md).",
)
@_dataset_options
def measure_cmd(db, per_workload, strategy, lm_path, workloads, seed, target, ray_address, dataset, no_dataset):
    """Measure programs of each workload into the records database (each with its sentence), and
    append them to the dataset."""
    from minitc.lm.training_set import TRAINING

    names = _names(workloads, TRAINING)
    if ray_address is None:
        return measure(db, names, per_workload, strategy, lm_path, seed, target=target, dataset=dataset)
    try:
        measure_on_ray(ray_address, db, names, per_workload, strategy, lm_path, seed, target, dataset)
    except MinitcError as e:  # no cluster at that address, or Ray missing
        raise click.ClickException(str(e)) from None


@lm.command("finetune")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--db", type=click.Path(exists=True, dir_okay=False), callback=_records, help="A records database.")
@click.option("--data", type=click.Path(exists=True), help="Or a dataset folder (lm/data) or shard.")
@click.option("--hardware", help="With --data: only these hardware fingerprints (comma-separated).")
@click.option("--leave-out", help="With --data: without this hardware fingerprint (to evaluate on it).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=_writable)
@click.option("--epochs", default=4, show_default=True, type=click.IntRange(min=1))
@click.option("--sharpness", default=4.0, show_default=True, help="Weight = (best ms / ms) ** sharpness.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1))
def finetune_cmd(checkpoint, db, data, hardware, leave_out, out, epochs, sharpness, threads):
    """Fine-tune CHECKPOINT on the measured programs in --db or in --data."""
    from minitc.lm.pipeline import finetune

    if (db is None) == (data is None):
        raise click.UsageError("give one of --db RECORDS or --data DATASET")
    if (hardware or leave_out) and data is None:
        raise click.UsageError("--hardware and --leave-out select dataset entries: use them with --data")
    meta = finetune(
        checkpoint,
        db,
        out,
        data=data,
        hardware=_list(hardware),
        leave_out=leave_out,
        epochs=epochs,
        sharpness=sharpness,
        threads=threads,
        progress=_every(20),
    )
    click.echo(json.dumps({k: v for k, v in meta.items() if k != "history"}, indent=1))


@lm.command("loop")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--db", required=True, type=click.Path(dir_okay=False), callback=_records)
@click.option("--rounds", default=2, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--per-round",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Programs per workload the model proposes and has measured each round.",
)
@click.option("--workloads", help="Comma-separated names (default: the training set).")
@click.option(
    "--out-dir", type=click.Path(file_okay=False), help="Where round checkpoints go (default: next to CHECKPOINT)."
)
@_dataset_options
def loop_cmd(checkpoint, db, rounds, per_round, workloads, out_dir, dataset, no_dataset):
    """Iterate: the current model proposes programs, they are measured, the model is fine-tuned on
    all measurements, and the next round uses it. Resumable: a finished round is skipped."""
    from minitc.lm.pipeline import finetune
    from minitc.lm.training_set import TRAINING

    names = _names(workloads, TRAINING)
    folder = Path(out_dir or Path(checkpoint).parent)
    folder.mkdir(parents=True, exist_ok=True)
    current = Path(checkpoint)
    for r in range(1, rounds + 1):
        nxt = folder / f"{Path(checkpoint).stem}-round{r}.pt"
        if nxt.exists():
            _say(f"round {r}: {nxt} exists, skipping")
            current = nxt
            continue
        _say(f"round {r}: measuring {per_round} programs per workload proposed by {current}")
        measure(db, names, per_round, "tlm", str(current), seed=r, add=True, dataset=dataset, source="minitc lm loop")
        meta = finetune(current, db, nxt, progress=_every(50))
        _say(f"round {r}: fine-tuned on {meta['demonstrations']} measured programs -> {nxt}")
        current = nxt
    click.echo(str(current))


@lm.command("adapt")
@click.option(
    "--lm",
    "lm_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Checkpoint to start from (default: the shipped model).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    callback=_writable,
    help="Where the adapted model goes (default: lm-adapted-<hardware>.pt in your cache directory).",
)
@click.option(
    "--minutes",
    default=float(DEFAULT_MINUTES),
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Time for the whole run: three quarters measuring, the rest fine-tuning.",
)
@click.option(
    "--per-workload",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="At most this many new programs per workload: half the model's, a quarter near the template's "
    "program, a quarter random.",
)
@click.option("--workloads", help="Comma-separated names (default: the training set).")
@click.option(
    "--others",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Programs of other machines (from the dataset) fine-tuned on per program of this one.",
)
@click.option("--target", default="llvm", show_default=True, help="CPU target to adapt to, as for `measure`.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    callback=_records,
    help="Records database of the measurements (default: adapt-records.db in your cache directory).",
)
@click.option("--threads", type=click.IntRange(min=1), help="torch threads for fine-tuning (default: all CPUs).")
@click.option(
    "--seed", type=int, help="Sampling seed (default: a fresh one, printed, so each run measures new programs)."
)
@_dataset_options
def adapt_cmd(lm_path, out, minutes, per_workload, workloads, others, target, db, threads, seed, dataset, no_dataset):
    """Measure a sample of the training workloads on this machine and fine-tune a copy of the
    model for it, in about --minutes (the shipped checkpoint is never changed). The measured
    programs are appended to the dataset (--dataset, default lm/data), whose other machines'
    programs are fine-tuned on too; the new model is used with --lm PATH or MINITC_LM."""
    from minitc.lm.adapt import adapt, refuse_shipped
    from minitc.lm.training_set import TRAINING
    from minitc.target import parse_target

    if out:
        refuse_shipped(out)
    parse_target(target)  # a bad target fails before anything is measured
    names = _names(workloads, TRAINING)
    held_out = [n for n in names if n in HELD_OUT]
    if held_out:  # tlm-eval's claims hold only for workloads the model never learned from
        raise click.BadParameter(
            f"{', '.join(held_out)}: held out of training for tlm-eval; adapt on training workloads",
            param_hint="--workloads",
        )
    result = adapt(
        checkpoint=lm_path,
        out=out,
        names=names,
        minutes=minutes,
        per_workload=per_workload,
        others=others,
        target=target,
        db=db,
        dataset=dataset,
        keep=not no_dataset,
        seed=seed,
        threads=threads,
        say=_say,
    )
    click.echo(
        f"adapted to {result.fingerprint}: measured {result.measured} programs in {result.measure_seconds:.0f} s, "
        f"fine-tuned on {result.here} of this machine and {result.others} of others in "
        f"{result.finetune_seconds:.0f} s"
    )
    click.echo(f"wrote {result.path}")
    click.echo(f"use it: minitc tune ... --lm {result.path}    (or: export MINITC_LM={result.path})")
    click.echo(
        f"wrote the cost model {result.cost_path} (the tlm strategy ranks with it here unless MINITC_COST_MODEL is set)"
    )


@lm.command("ship")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    callback=_writable,
    help="Default: the package's lm/checkpoints/gpu.pt for a model trained on GPU sentences, else cpu.pt.",
)
def ship_cmd(checkpoint, out):
    """Store CHECKPOINT (weights as float16) as the model minitc ships and uses by default."""
    from minitc.lm.model import load_checkpoint, save_checkpoint
    from minitc.lm.pipeline import SHIPPED, SHIPPED_GPU
    from minitc.lm.strategy import trained_on_gpu

    model, vocab, meta = load_checkpoint(checkpoint)
    target = Path(out or (SHIPPED_GPU if trained_on_gpu(meta) else SHIPPED))
    target.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(target, model, vocab, meta, half=True)
    click.echo(f"wrote {target} ({target.stat().st_size / 2**20:.1f} MiB, {model.num_parameters()} parameters)")


@lm.command("cost-model")
@click.option("--data", "data_dir", type=click.Path(exists=True, file_okay=False), help="Default: lm/data.")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Default: the package's lm/checkpoints/cost.")
@click.option("--epochs", default=30, show_default=True, type=click.IntRange(min=1))
@click.option("--min-programs", default=400, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--members",
    default=COST_MEMBERS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Trainings (seeds) per ensemble.",
)
def cost_model_cmd(data_dir, out_dir, epochs, min_programs, members):
    """Pretrain the TLP cost models the tlm strategy ranks its first rounds with: one per CPU
    hardware description with at least --min-programs programs in the dataset
    (<fingerprint>.pt), and one on every CPU description (cpu.pt); each an ensemble of
    --members trainings."""
    from minitc.lm.cost import ALL_CPUS, COST_DIR, train_cost_model
    from minitc.lm.dataset import load
    from minitc.lm.hardware import is_gpu_line

    entries = [e for e in load(data_dir) if not is_gpu_line(e.hardware)]
    folder = Path(out_dir) if out_dir else COST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    counts: dict = {}
    for e in entries:
        counts[e.fingerprint] = counts.get(e.fingerprint, 0) + 1
    jobs = [(fp, [e for e in entries if e.fingerprint == fp]) for fp, n in sorted(counts.items()) if n >= min_programs]
    for name, chosen in jobs + [(ALL_CPUS, entries)]:
        model, used, skipped = train_cost_model(chosen, epochs=epochs, members=members)
        path = folder / f"{name}.pt"
        model.save(path)
        click.echo(f"wrote {path}: {used} programs ({skipped} no longer replay)")


@lm.command("data")
@click.argument("path", required=False, type=click.Path(exists=True))
@click.option("--check", is_flag=True, help="Also parse every sentence (about 3 ms each).")
@click.option("--hardware", help="Only these hardware fingerprints (comma-separated).")
@click.option("--workloads", help="Only these workloads: names or keys (comma-separated).")
def data_cmd(path, check, hardware, workloads):
    """Summarise the measurement dataset at PATH (default: the package's lm/data): programs per
    hardware description and per workload, failures, dates, shards. Every entry's fields are
    checked and duplicates refused; --check also parses the sentences."""
    from minitc.lm.dataset import DATA_DIR, load, shards, summary

    folder = Path(path) if path else DATA_DIR
    entries = load(folder, hardware=_list(hardware), workloads=_list(workloads), sentences=check)
    click.echo(summary(folder, entries, shards(folder)))
    if check:
        click.echo(f"check: all {len(entries)} entries valid (fields, sentences, no duplicates)")


@lm.command("export-db")
@click.argument("db", type=click.Path(exists=True, dir_okay=False), callback=_records)
@click.option(
    "--dataset", type=click.Path(file_okay=False), callback=_dataset, help="Dataset folder (default: lm/data)."
)
def export_db_cmd(db, dataset):
    """Append the measured programs of the records database DB to the dataset, as new shards
    (programs already there are skipped), so that measurements made earlier are kept."""
    from minitc.lm.export import Exporter

    with Database(db) as database:
        result = Exporter(dataset, source=f"minitc lm export-db {Path(db).name}").export(database)
    click.echo(str(result))
    for shard in result.shards:
        click.echo(f"  {shard}")
