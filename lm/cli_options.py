"""Options and helpers the `minitc lm` commands share (cli.py, cli_data.py): workload names,
output files checked writable, records databases and dataset folders opened before any work."""

from __future__ import annotations

import os
from pathlib import Path

import click

from minitc.autotune.database import Database, DatabaseError
from minitc.lm.training_set import HELD_OUT, TRAINING


def workload_names(value: str | None, default) -> list:
    """The workloads a comma-separated --workloads value names (default: `default`), each a
    training or held-out one."""
    if not value:
        return list(default)
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAINING and n not in HELD_OUT]
    if unknown:
        raise click.BadParameter(f"unknown workloads {unknown}; see `minitc lm workloads`", param_hint="--workloads")
    return names


def name_list(value: str | None) -> list | None:
    """A comma-separated option's items, or None when it is not given."""
    return [n.strip() for n in value.split(",") if n.strip()] if value else None


def writable(ctx, param, value):
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


def records_db(ctx, param, value):
    """click callback: open (or create) the records database now, so a bad file fails first."""
    if value is None:
        return None
    try:
        Database(value).close()
    except DatabaseError as e:
        raise click.BadParameter(str(e)) from None
    return value


def dataset_folder(ctx, param, value):
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


def dataset_options(f):
    """--dataset DIR / --no-dataset, for the commands that measure."""
    f = click.option(
        "--dataset",
        type=click.Path(file_okay=False),
        callback=dataset_folder,
        help="Dataset folder the measured programs are appended to, as new shards (default: the package's lm/data).",
    )(f)
    return click.option(
        "--no-dataset", is_flag=True, is_eager=True, help="Keep the measurements in the records database only."
    )(f)


def say(msg: str) -> None:
    click.echo(msg, err=True)
