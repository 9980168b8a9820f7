"""`minitc lm` commands about machines and the kept data: adapt the model to this machine, ship a
checkpoint, pretrain the cost models, summarise the dataset, export a records database into it.
(cli.py holds the group and the commands that make models.)"""

from __future__ import annotations

from pathlib import Path

import click

from minitc.autotune.database import Database
from minitc.lm.adapt import DEFAULT_MINUTES
from minitc.lm.cli_options import dataset_folder, dataset_options, name_list, records_db, say, workload_names, writable
from minitc.lm.cost import MEMBERS as COST_MEMBERS
from minitc.lm.training_set import HELD_OUT


@click.command("adapt")
@click.option(
    "--lm",
    "lm_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Checkpoint to start from (default: the shipped model).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    callback=writable,
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
    callback=records_db,
    help="Records database of the measurements (default: adapt-records.db in your cache directory).",
)
@click.option("--threads", type=click.IntRange(min=1), help="torch threads for fine-tuning (default: all CPUs).")
@click.option(
    "--seed", type=int, help="Sampling seed (default: a fresh one, printed, so each run measures new programs)."
)
@dataset_options
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
    names = workload_names(workloads, TRAINING)
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
        say=say,
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


@click.command("ship")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    callback=writable,
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


@click.command("cost-model")
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
@click.option("--mtl-only", is_flag=True, help="Train only the MTL-TLP model (mtl.pt), leaving the others.")
def cost_model_cmd(data_dir, out_dir, epochs, min_programs, members, mtl_only):
    """Pretrain the TLP cost models the tlm strategy ranks its first rounds with: one per CPU
    hardware description with at least --min-programs programs in the dataset
    (<fingerprint>.pt), one on every CPU description (cpu.pt), and MTL-TLP (mtl.pt: one
    backbone, a head per description); each an ensemble of --members trainings."""
    from minitc.lm.cost import ALL_CPUS, COST_DIR, train_cost_model
    from minitc.lm.dataset import load
    from minitc.lm.hardware import of_kind
    from minitc.lm.mtl import MTL, train_mtl_model

    entries = of_kind(load(data_dir), "llvm")
    folder = Path(out_dir) if out_dir else COST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    counts: dict = {}
    for e in entries:
        counts[e.fingerprint] = counts.get(e.fingerprint, 0) + 1
    jobs = [(fp, [e for e in entries if e.fingerprint == fp]) for fp, n in sorted(counts.items()) if n >= min_programs]
    jobs = [] if mtl_only else jobs + [(ALL_CPUS, entries)]
    for name, chosen in jobs + [(MTL, entries)]:
        train = train_mtl_model if name == MTL else train_cost_model
        model, used, skipped = train(chosen, epochs=epochs, members=members)
        path = folder / f"{name}.pt"
        model.save(path)
        click.echo(f"wrote {path}: {used} programs ({skipped} no longer replay)")


@click.command("data")
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
    entries = load(folder, hardware=name_list(hardware), workloads=name_list(workloads), sentences=check)
    click.echo(summary(folder, entries, shards(folder)))
    if check:
        click.echo(f"check: all {len(entries)} entries valid (fields, sentences, no duplicates)")


@click.command("export-db")
@click.argument("db", type=click.Path(exists=True, dir_okay=False), callback=records_db)
@click.option(
    "--dataset", type=click.Path(file_okay=False), callback=dataset_folder, help="Dataset folder (default: lm/data)."
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


COMMANDS = [adapt_cmd, ship_cmd, cost_model_cmd, data_cmd, export_db_cmd]
