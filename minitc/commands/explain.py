"""`minitc explain`: a schedule step by step (tc.explain): each primitive, why it matters, and the
loop nest after it; with --measure the time and GFLOP/s after each step.

minitc explain examples/quickstart.py          # the Schedule a script builds (or FILE.py:NAME)
minitc explain matmul --shape 512,512,512      # the operator template's schedule
minitc explain --db records.db --workload matmul --shape 512,512,512   # the best record, and
                                               # how it differs from the template
"""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import click

import minitc as tc
from minitc.autotune.tuner import decode_trace
from minitc.commands.show import machine_key, open_records, resolve_workload
from minitc.commands.spec import op_options, parse_call, pop_op_options, shape_help
from minitc.explanation import trace_differences
from minitc.schedule.recorder import Schedule
from minitc.templates import template_schedule

HELP = f"""Explain a schedule step by step: each primitive of its trace, why it matters, and the
loop nest after it.

SOURCE is a Python script that builds a tc.Schedule (FILE.py, or FILE.py:NAME to pick the
variable NAME). The script runs with __name__ set to something other than "__main__", so code
under `if __name__ == "__main__":` is skipped, and what it prints is not shown. SOURCE can also
be an op with --shape as for `minitc tune` (the operator template's schedule). With --db, the
best record of the workload (an op with --shape, or a workload key as `minitc show` lists them)
is explained instead, followed by the steps in which it differs from the template.

{shape_help()}

\b
Examples:
  minitc explain examples/quickstart.py --measure
  minitc explain matmul --shape 512,512,512 --diff
  minitc explain --db records.db --workload matmul --shape 512,512,512
"""


@click.command("explain", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", required=False, metavar="[SOURCE]")
@op_options
@click.option("--workload", help="With --db: the workload (op or key prefix); the same as SOURCE.")
@click.option("--db", type=click.Path(dir_okay=False), help="Explain the best record of this records database.")
@click.option("--target", default="llvm", show_default=True, help="Target to lower, build and time for.")
@click.option("--measure", is_flag=True, help="Build, check against numpy and time the program after each step.")
@click.option("--diff", is_flag=True, help="Show each loop nest as the lines the step changed.")
def explain_cmd(source, workload, db, target, measure, diff, **kwargs):
    shape, options = pop_op_options(kwargs)
    if source and workload and source != workload:
        raise click.UsageError("give the workload once: as SOURCE or as --workload")
    source = source or workload
    if not source:
        raise click.UsageError("give a script (FILE.py), an op with --shape, or --db with --workload")
    flops, differences, decisions = None, None, None
    if db is not None:
        schedule, flops, differences, decisions = _best_record(Path(db), source, shape, options, target)
    elif _is_script(source):
        if shape or options:
            raise click.UsageError("--shape and op options go with an op, not with a script")
        schedule = _script_schedule(source)
    else:
        call = parse_call(source, shape, options, hint="SOURCE")
        schedule, flops = template_schedule(call.build(), target), call.flops()
        click.echo(f"the template schedule of {call.label()} for {target}:")
    explanation = tc.explain(schedule, target=target, measure=measure, flops=flops, decisions=decisions)
    click.echo(explanation.text(diff=diff), nl=False)
    if differences is not None:
        click.echo("\nhow the best record differs from the template (- template only, + record only):")
        for line in differences or ["  (the same steps)"]:
            click.echo(f"  {line}")


def _is_script(source: str) -> bool:
    return source.partition(":")[0].endswith(".py")


def _script_schedule(source: str) -> Schedule:
    """The Schedule a script leaves in its globals: the one named after the colon, else the only
    one (or the one named `s` among several)."""
    path, _, name = source.partition(":")
    if not Path(path).is_file():
        raise click.BadParameter(f"no such file: {path}", param_hint="SOURCE")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the script's own prints are not the explanation
            names = runpy.run_path(path, run_name="__minitc_explain__")
    except tc.MinitcError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's script failed: say where, not a minitc bug
        raise click.ClickException(f"{path} raised {type(e).__name__}: {e}") from None
    found = {k: v for k, v in names.items() if isinstance(v, Schedule)}
    if name:
        if name not in found:
            listed = ", ".join(sorted(found)) or "none"
            raise click.BadParameter(
                f"{path} has no Schedule named {name!r} (its Schedules: {listed})", param_hint="SOURCE"
            )
        return found[name]
    if len(found) == 1:
        return next(iter(found.values()))
    if "s" in found:
        return found["s"]
    if not found:
        raise click.BadParameter(f"{path} builds no tc.Schedule at module level", param_hint="SOURCE")
    raise click.BadParameter(
        f"{path} has several Schedules ({', '.join(sorted(found))}): pick one as {path}:NAME", param_hint="SOURCE"
    )


def _best_record(path: Path, source: str, shape, options, target: str) -> tuple:
    """(schedule of the best record, FLOPs or None, its differences from the template, its
    decision values or None)."""
    tstring, hw = machine_key(target)
    out, call, key, desc, problem = resolve_workload(path, source, shape, options, "--workload")
    if out is None:
        raise click.ClickException(problem)
    if not path.exists():
        raise click.ClickException(f"no tuning records: {path} does not exist")
    label = call.label() if call else desc
    with open_records(path) as db:
        best = db.best(key, tstring, hw) or db.best(key, tstring)
    if not best:
        raise click.ClickException(f"no successful record of {label} in {path} for {tstring}")
    decisions, trace = decode_trace(best[0].trace)
    click.echo(f"the best record of {label} in {path}: {best[0].median_ms:.4g} ms (#{best[0].id})")
    schedule = Schedule(out).replay(trace)
    try:
        differences = trace_differences(trace, template_schedule(out, target).trace)
    except Exception as e:  # noqa: BLE001 - a workload decoded without the attrs its template reads
        click.echo(f"(no comparison with the template, which does not take the decoded workload: {e!r})")
        differences = None
    return schedule, call.flops() if call else None, differences, decisions
