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
import time
from pathlib import Path

import click

from minitc.autotune.workload_key import describe
from minitc.errors import MinitcError
from minitc.lm.cli_data import COMMANDS
from minitc.lm.cli_options import dataset_options, name_list, records_db, say, workload_names, writable
from minitc.lm.measure import measure, measure_on_ray
from minitc.lm.training_set import HELD_OUT, TRAINING


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
@click.argument("out", type=click.Path(dir_okay=False), callback=writable)
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
        workload_names(workloads, TRAINING),
        per_workload,
        seed,
        near_template=near_template,
        progress=lambda i, t, name: say(f"[{i}/{t}] {name}"),
        target=target,
    )
    click.echo(f"wrote {n} sentences to {out} in {time.perf_counter() - start:.1f} s")


@lm.command("pretrain")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=writable)
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
            say(f"step {step}/{total}  loss {loss:.3f}  {time.perf_counter() - start:.0f} s")

    return progress


@lm.command("measure")
@click.option(
    "--db", required=True, type=click.Path(dir_okay=False), callback=records_db, help="Records database to fill."
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
@dataset_options
def measure_cmd(db, per_workload, strategy, lm_path, workloads, seed, target, ray_address, dataset, no_dataset):
    """Measure programs of each workload into the records database (each with its sentence), and
    append them to the dataset."""
    from minitc.lm.training_set import TRAINING

    names = workload_names(workloads, TRAINING)
    if ray_address is None:
        return measure(db, names, per_workload, strategy, lm_path, seed, target=target, dataset=dataset)
    try:
        measure_on_ray(ray_address, db, names, per_workload, strategy, lm_path, seed, target, dataset)
    except MinitcError as e:  # no cluster at that address, or Ray missing
        raise click.ClickException(str(e)) from None


@lm.command("finetune")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--db", type=click.Path(exists=True, dir_okay=False), callback=records_db, help="A records database.")
@click.option("--data", type=click.Path(exists=True), help="Or a dataset folder (lm/data) or shard.")
@click.option("--hardware", help="With --data: only these hardware fingerprints (comma-separated).")
@click.option("--leave-out", help="With --data: without this hardware fingerprint (to evaluate on it).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=writable)
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
        hardware=name_list(hardware),
        leave_out=leave_out,
        epochs=epochs,
        sharpness=sharpness,
        threads=threads,
        progress=_every(20),
    )
    click.echo(json.dumps({k: v for k, v in meta.items() if k != "history"}, indent=1))


@lm.command("loop")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("--db", required=True, type=click.Path(dir_okay=False), callback=records_db)
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
@dataset_options
def loop_cmd(checkpoint, db, rounds, per_round, workloads, out_dir, dataset, no_dataset):
    """Iterate: the current model proposes programs, they are measured, the model is fine-tuned on
    all measurements, and the next round uses it. Resumable: a finished round is skipped."""
    from minitc.lm.pipeline import finetune
    from minitc.lm.training_set import TRAINING

    names = workload_names(workloads, TRAINING)
    folder = Path(out_dir or Path(checkpoint).parent)
    folder.mkdir(parents=True, exist_ok=True)
    current = Path(checkpoint)
    for r in range(1, rounds + 1):
        nxt = folder / f"{Path(checkpoint).stem}-round{r}.pt"
        if nxt.exists():
            say(f"round {r}: {nxt} exists, skipping")
            current = nxt
            continue
        say(f"round {r}: measuring {per_round} programs per workload proposed by {current}")
        measure(db, names, per_round, "tlm", str(current), seed=r, add=True, dataset=dataset, source="minitc lm loop")
        meta = finetune(current, db, nxt, progress=_every(50))
        say(f"round {r}: fine-tuned on {meta['demonstrations']} measured programs -> {nxt}")
        current = nxt
    click.echo(str(current))


for command in COMMANDS:
    lm.add_command(command)
