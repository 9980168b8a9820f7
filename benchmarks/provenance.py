"""What a benchmark record says about its run: the versions of the software that made it and
the command that reproduces it."""

from __future__ import annotations

import datetime
import platform
import shlex

import click

from minitc.timing import torch_module


def versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    import numpy

    torch = torch_module()
    versions = {
        "python": platform.python_version(),
        "minitc": dist_version("minitc"),
        "numpy": numpy.__version__,
        "torch": torch.__version__ if torch else None,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
    }
    try:
        from threadpoolctl import threadpool_info

        blas = [
            f"{i['internal_api']} {i['version']} ({i.get('architecture')})"
            for i in threadpool_info()
            if i["user_api"] == "blas"
        ]
        versions["numpy_blas"] = ", ".join(blas) or None
    except Exception:  # noqa: BLE001 - versions are informative only
        versions["numpy_blas"] = None
    return versions


def dist_version(name: str):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def command_line(ctx) -> str:
    """The command as given (its arguments, then the options set on the command line), for the
    records: click keeps no copy of argv, and sys.argv is not ours under CliRunner. A suite of
    `bench` is named as `--suite NAME`."""
    from click.core import ParameterSource

    argv = ctx.command_path.split()
    if ctx.parent is not None and ctx.parent.command.name == "bench":
        argv[-1:] = ["--suite", argv[-1]]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if isinstance(p, click.Argument):
            argv += [str(value)] if value is not None else []
        elif ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE and value is not None:
            argv += [max(p.opts, key=len)] if p.is_flag else [max(p.opts, key=len), _text(value)]
    return " ".join(shlex.quote(a) for a in argv)


def _text(value) -> str:
    """An option's value as typed: lists comma-separated, floats without a needless `.0`."""
    if isinstance(value, list):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_stamp(command: str, versions_of: dict | None = None) -> dict:
    """When a run was made, by which command, with which software (`versions()` unless given)."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "versions": versions_of or versions(),
    }


def run_context(
    machine, command, suite: str, threads, repeats: int, wait_quiet_s: float, versions_of=None, **extra
) -> dict:
    """The `machine` and `run` entries every record of a suite's run carries."""
    return {
        "machine": machine.to_json() if machine else None,
        "run": {
            **run_stamp(command, versions_of),
            "suite": suite,
            "threads": list(threads),
            "repeats": repeats,
            "wait_quiet_s": wait_quiet_s,
            **extra,
        },
    }
