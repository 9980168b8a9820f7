"""The `bench` command: `python -m benchmarks ...` and `minitc bench ...` are the same."""
from __future__ import annotations

import datetime
import platform
import shlex
import time

import click

from .workloads import SUITES

DEFAULT_SUITE = "cpu-core"


def _threads(ctx, param, value: str) -> list:
    try:
        counts = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers like 1,2, got {value!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise click.BadParameter(f"thread counts must be integers >= 1, got {value!r}")
    return list(dict.fromkeys(counts))


def _versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    import numpy

    from .measure import torch_module

    torch = torch_module()
    versions = {
        "python": platform.python_version(),
        "minitc": _dist_version("minitc"),
        "numpy": numpy.__version__,
        "torch": torch.__version__ if torch else None,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
    }
    try:
        from threadpoolctl import threadpool_info

        blas = [f"{i['internal_api']} {i['version']} ({i.get('architecture')})" for i in threadpool_info()
                if i["user_api"] == "blas"]  # fmt: skip
        versions["numpy_blas"] = ", ".join(blas) or None
    except Exception:  # noqa: BLE001 - versions are informative only
        versions["numpy_blas"] = None
    return versions


def _dist_version(name: str):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--suite", default=DEFAULT_SUITE, show_default=True, help=f"Suite to run: {', '.join(SUITES)}.")
@click.option("--workloads", default="", help="Comma-separated workload names of the suite (default: all).")
@click.option("--threads", default="1,2", show_default=True, callback=_threads, help="Thread counts to run.")
@click.option("--repeats", default=10, show_default=True, type=click.IntRange(min=1),
              help="Timed samples per implementation (slow calls get fewer, never under 3).")  # fmt: skip
@click.option("--budget", "budget_s", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds of timing per implementation, workload and thread count.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write the records as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True),
              help="Write a bar chart (PNG); needs matplotlib: pip install 'minitc[plot]'.")  # fmt: skip
@click.option("--wait-quiet", "wait_quiet_s", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="On a shared machine: before the machine measurement and each row, wait up to this many "
                   "seconds for other processes to go quiet.")  # fmt: skip
@click.option("--no-machine", is_flag=True, help="Skip measuring peak FMA, bandwidth and launch overhead.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def bench(suite, workloads, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine, quiet):
    """Benchmark minitc against numpy and torch (CPU) on a suite of workloads.

    Each workload runs minitc's default schedule (`tc.build(tensor)`), numpy and torch in the
    same process, interleaved, for each thread count; the minitc result is checked against
    numpy first (a wrong kernel is an error row). Prints a table; --json writes the records.
    """
    from . import report
    from .workloads import select

    names = [n.strip() for n in workloads.split(",") if n.strip()]
    try:
        chosen = select(suite, names)
    except KeyError as e:
        raise click.UsageError(e.args[0]) from None
    if plot_path:
        try:
            report.require_matplotlib()
        except RuntimeError as e:
            raise click.UsageError(str(e)) from None
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    command = _command_line(suite, names, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine)
    records = run(chosen, suite, threads, repeats, budget_s, not no_machine, say, command, wait_quiet_s)
    ctx_machine = records[0]["machine"] if records else None
    click.echo("\n".join(report.machine_lines(ctx_machine)))
    click.echo(report.format_table(records))
    if json_path:
        report.write_json(records, json_path)
        say(f"wrote {json_path}")
    if plot_path:
        report.plot(records, plot_path)
        say(f"wrote {plot_path}")


def _command_line(suite, names, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine) -> str:
    """The command that reproduces this run (recorded in the JSON)."""
    args = ["--suite", suite]
    args += ["--workloads", ",".join(names)] if names else []
    args += ["--threads", ",".join(map(str, threads)), "--repeats", str(repeats), "--budget", f"{budget_s:g}"]
    args += ["--json", json_path] if json_path else []
    args += ["--plot", plot_path] if plot_path else []
    args += ["--wait-quiet", f"{wait_quiet_s:g}"] if wait_quiet_s else []
    args += ["--no-machine"] if no_machine else []
    return " ".join([click.get_current_context().command_path] + [shlex.quote(a) for a in args])


def run(workloads, suite, threads, repeats, budget_s, measure_machine=True, progress=None, command=None,
        wait_quiet_s=0.0) -> list:
    """Measure the machine (optionally), then run the workloads; returns the records."""
    from .machine import measure_machine as measure
    from .measure import wait_for_quiet
    from .runner import run_suite

    start = time.perf_counter()
    say = progress or (lambda msg: None)
    if measure_machine and wait_quiet_s > 0:
        say(f"machine: waiting up to {wait_quiet_s:g} s for other processes to go quiet")
        wait_for_quiet(wait_quiet_s)
    machine = measure(threads, progress=say) if measure_machine else None
    if machine is not None:
        say(f"machine measured in {machine.seconds:.1f} s")
    context = {
        "machine": machine.to_json() if machine else None,
        "run": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command,
            "suite": suite,
            "threads": list(threads),
            "repeats": repeats,
            "wait_quiet_s": wait_quiet_s,
            "versions": _versions(),
        },
    }
    records = run_suite(workloads, threads, suite, machine, repeats, budget_s, say, context, wait_quiet_s)
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    return records


def main() -> None:
    bench(prog_name="python -m benchmarks")
