"""`minitc show [WORKLOAD]`: what the tuning records database knows.

minitc show                                   # workloads, record counts, best ms
minitc show 1a2b3c                            # a workload by (a unique prefix of) its key
minitc show matmul --shape 512,512,512        # the same by op and shape, as for tune
minitc show 1a2b3c --llvm | --asm             # plus the optimized LLVM IR / assembly
"""

from __future__ import annotations

import datetime
from pathlib import Path

import click

import minitc as tc
from minitc.autotune.database import Database, DatabaseError, default_path
from minitc.autotune.space import Space
from minitc.autotune.tuner import decode_trace
from minitc.autotune.workload_key import describe, workload_key
from minitc.commands.recover import recover
from minitc.commands.spec import op_options, parse_call, pop_op_options, shape_help
from minitc.ops.calls import FAMILY_OF, command_args
from minitc.schedule.recorder import Schedule
from minitc.schedule.trace import json_arg, step_call
from minitc.target import hardware_fingerprint, parse_target

HELP = f"""Show tuning records.

With no WORKLOAD, list the workloads of the records database with their record counts and
best latency on this machine. With WORKLOAD, a workload key (or a unique prefix of one, as
listed) or an op with --shape as for `minitc tune`, print the workload, its best record
(median ms, date, the trace steps, the decisions), the loop nest of that schedule
(`tc.lower`), and with --llvm / --asm the generated code. Without records, the loop nest is
the hand template's.

{shape_help()}

\b
Examples:
  minitc show
  minitc show 3f9a0c
  minitc show matmul --shape 512,512,512 --asm
"""


def _date(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).astimezone().isoformat(sep=" ", timespec="seconds")


def _db_path(db) -> Path:

    return Path(db) if db else default_path()


def open_records(path: Path):
    """The records database at `path`; a corrupt one is a usage error, not a crash."""
    try:
        return Database(path)
    except DatabaseError as e:
        raise click.ClickException(str(e)) from None


def machine_key(target: str) -> tuple:
    """(normalised target string, hardware fingerprint): what records are keyed by."""
    try:
        t = parse_target(target)
    except Exception as e:  # noqa: BLE001
        raise click.BadParameter(str(e), param_hint="--target") from None
    return t.string, hardware_fingerprint(t)


def list_workloads(path: Path, target: str) -> None:
    if not path.exists():
        click.echo(f"no tuning records yet: {path} does not exist (run `minitc tune OP --shape ...` first)")
        return
    tstring, hw = machine_key(target)
    with open_records(path) as db:
        rows = []
        for key, desc in db.workloads():
            recs = db.records(key)
            errors = sum(not r.ok for r in recs)
            best = db.best(key, tstring, hw)
            programs = len(db.programs(key))  # finalists are measured again: more records than programs
            rows.append(
                [
                    key[:12],
                    str(programs),
                    str(len(recs)),
                    str(errors),
                    f"{best[0].median_ms:.4g}" if best else "-",
                    desc,
                ]
            )
    click.echo(f"records database: {path} ({len(rows)} workload{'s' if len(rows) != 1 else ''})")
    if not rows:
        return
    head = ["workload", "programs", "records", "errors", "best ms", "description"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    click.echo(fmt(head).rstrip())
    for r in rows:
        click.echo(fmt(r).rstrip())
    click.echo(f"best ms: this machine ({hw}, {tstring}); `minitc show WORKLOAD` for details")


def resolve_key(path: Path, prefix: str) -> tuple:
    """(key, description) of the only workload whose key starts with `prefix`."""
    if not path.exists():
        raise click.ClickException(f"no tuning records: {path} does not exist")
    with open_records(path) as db:
        matches = [(k, d) for k, d in db.workloads() if k.startswith(prefix.lower())]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        hint = f"; for the op, give its shape: minitc show {prefix} --shape ..." if prefix in FAMILY_OF else ""
        raise click.BadParameter(
            f"no workload key starts with {prefix!r} in {path} (`minitc show` lists them){hint}", param_hint="WORKLOAD"
        )
    listed = "; ".join(f"{k[:16]} ({d})" for k, d in matches[:6])
    raise click.BadParameter(
        f"{prefix!r} matches {len(matches)} workloads: {listed}; give more of the key", param_hint="WORKLOAD"
    )


def _decision_lines(out, values, target) -> list:
    """Named decisions (replayed in the design space), or the bare values if that fails."""
    try:
        cand = Space(out, target).replay(values, strict=True)
    except Exception:  # noqa: BLE001 - an older record or another design space
        return [f"  values: {values}"]
    return [f"  {d.name} = {json_arg(d.value)}   ({len(d.domain)} choices)" for d in cand.decisions]


@click.command("show", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("workload", required=False, metavar="[WORKLOAD]")
@op_options
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Records database (default: $MINITC_DB, else ~/.cache/minitc/records.db).",
)
@click.option("--target", default="llvm", show_default=True, help="Target whose records to show.")
@click.option("--llvm", "show_llvm", is_flag=True, help="Also print the optimized LLVM IR.")
@click.option("--asm", "show_asm", is_flag=True, help="Also print the assembly.")
def show(workload, db, target, show_llvm, show_asm, **kwargs):
    shape, options = pop_op_options(kwargs)
    path = _db_path(db)
    if workload is None:
        if shape or options:
            raise click.UsageError("give the op before --shape, e.g. minitc show matmul --shape 512,512,512")
        list_workloads(path, target)
        return
    show_workload(path, workload, shape, options, target, show_llvm, show_asm)


def resolve_workload(path: Path, workload: str, shape, options, hint: str) -> tuple:
    """(OpCall or None, key, description) of a workload given as an op with --shape and
    options, or as a key prefix of the records database (the call then recovered from its
    description; None when no op this command knows made it)."""
    if shape or options:
        call = parse_call(workload, shape, options, hint=hint)
        out = call.build()
        return call, workload_key(out), describe(out)
    key, desc = resolve_key(path, workload)
    return recover(key, desc), key, desc


def show_workload(path, workload, shape, options, target, show_llvm, show_asm) -> None:

    tstring, hw = machine_key(target)
    call, key, desc = resolve_workload(path, workload, shape, options, "WORKLOAD")
    out = call.build() if call else None
    click.echo(f"workload {key}: {desc}")
    if call:
        click.echo(f"  op: {' '.join(command_args(call))}")
    recs, best, other_hw = [], [], False
    if path.exists():
        with open_records(path) as db:
            recs = db.records(key, tstring, hw)
            best = db.best(key, tstring, hw)
            if not best:
                best, other_hw = db.best(key, tstring), True
            total = len(db.records(key))
    else:
        total = 0
    errors = sum(not r.ok for r in recs)
    click.echo(f"  records: {len(recs)} on this machine ({hw}, {tstring}), {errors} of them errors; {total} in all")
    schedule = None
    if best:
        rec = best[0]
        values, steps = decode_trace(rec.trace)
        where = f" (recorded on {rec.hardware}, not this machine)" if other_hw else ""
        click.echo(
            f"best record #{rec.id}: {rec.median_ms:.4g} ms median of {len(rec.latencies_ms)}, "
            f"{_date(rec.created)}{where}"
        )
        click.echo(f"trace ({len(steps)} steps):")
        for i, step in enumerate(steps, 1):
            click.echo(f"  {i:3d}. {step_call(step)}")
        if values is not None:
            click.echo("decisions:")
            for line in _decision_lines(out, values, target) if out is not None else [f"  values: {values}"]:
                click.echo(line)
        if out is not None:
            try:
                schedule = Schedule(out).replay(steps)
            except tc.ScheduleError as e:
                click.echo(f"(this minitc cannot replay the record: {e})")
    elif path.exists() and not total:
        click.echo("no records for this workload yet")
    if out is None:
        click.echo(
            "loop nest: unavailable: the workload was not made by a `minitc tune OP --shape ...` call this "
            "command recognises; run `minitc show OP --shape ...` with its op and shape"
        )
        return
    if schedule is None:
        click.echo("loop nest of the hand template (tc.build(out, db=False)):")
        schedule = tc.lower(out, target=target, db=False)
        kernel_of = lambda: tc.build(out, target=target, db=False)  # noqa: E731
    else:
        click.echo("loop nest of the best record:")
        s = schedule
        schedule = tc.lower(s)
        kernel_of = lambda: tc.build(s, target=target)  # noqa: E731
    click.echo(str(schedule))
    if show_llvm or show_asm:
        f = kernel_of()
        if show_llvm:
            click.echo("optimized LLVM IR:")
            click.echo(f.llvm_ir)
        if show_asm:
            click.echo("assembly:")
            click.echo(f.asm)
