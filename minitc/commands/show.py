"""`minitc show [WORKLOAD]`: what the tuning records database knows.

minitc show                                   # workloads, record counts, best ms
minitc show 1a2b3c                            # a workload by (a unique prefix of) its key
minitc show matmul --shape 512,512,512        # the same by op and shape, as for tune
minitc show 1a2b3c --llvm | --asm             # plus the optimized LLVM IR / assembly
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import NamedTuple

import click

import minitc as tc
from minitc.autotune.database import Database, DatabaseError, default_path
from minitc.autotune.space import Space
from minitc.autotune.tuner import decode_trace
from minitc.autotune.workload_decode import DecodeError, decode
from minitc.autotune.workload_key import describe, workload_key
from minitc.commands.spec import op_options, parse_call, pop_op_options, shape_help
from minitc.ops.calls import FAMILY_OF, OpCall, command_args
from minitc.schedule.recorder import Schedule
from minitc.schedule.trace import json_arg, step_call
from minitc.target import hardware_fingerprint, parse_target
from minitc.te import ComputeOp, graph

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
    """Named decisions (replayed in the design space), a template parameter's with its meaning,
    or the bare values if that fails."""
    try:
        space = Space(out, target)
        cand = space.replay(values, strict=True)
    except Exception:  # noqa: BLE001 - an older record or another design space
        return [f"  values: {values}"]
    meanings = {d.name: f": {p.meaning}" for p, d in space.parameters(cand)}
    return [
        f"  {d.name} = {json_arg(d.value)}   ({len(d.domain)} choices){meanings.get(d.name, '')}"
        for d in cand.decisions
    ]


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


class Resolved(NamedTuple):
    """A workload named on the command line: its output tensor (None where the database's form
    could not be decoded, `problem` says why), the `tc.ops` call that makes it where there is
    one, its key and description."""

    out: object
    call: OpCall | None
    key: str
    description: str
    problem: str | None = None


def resolve_workload(path: Path, workload: str, shape, options, hint: str) -> Resolved:
    """The workload given as an op with --shape and options, or as a key prefix of the records
    database (its tensors then decoded from the canonical form the database stores)."""
    if shape or options:
        call = parse_call(workload, shape, options, hint=hint)
        out = call.build()
        return Resolved(out, call, workload_key(out), describe(out))
    key, desc = resolve_key(path, workload)
    with open_records(path) as db:
        form = db.canonical(key)
    try:
        outs = decode(form)
    except DecodeError as e:
        return Resolved(None, None, key, desc, f"the stored form of workload {key[:12]} does not decode: {e}")
    out = outs[0] if len(outs) == 1 else outs
    return Resolved(out, call_of(out, key), key, desc)


def _pair(v):
    """An attrs pair as the command line writes it: one int where both are equal."""
    return v[0] if isinstance(v, tuple) and len(v) == 2 and v[0] == v[1] else v


def _call_params(tag: str, attrs: dict, ndim: int):
    """(op, params) of the `tc.ops` call a compute's tag and attrs name, or None."""
    if tag in ("matmul", "batch_matmul"):
        return tag, (("transpose_a", attrs.get("transpose_a")), ("transpose_b", attrs.get("transpose_b")))
    if tag in ("dense", "dense_epilogue"):
        return "dense", (("activation", attrs.get("activation")),)
    if tag in ("conv2d", "depthwise_conv2d"):
        return tag, tuple((p, _pair(attrs.get(p))) for p in ("stride", "padding", "dilation"))
    if tag in ("max_pool2d", "avg_pool2d"):
        return tag, tuple((p, _pair(attrs.get(p))) for p in ("kernel", "stride", "padding"))
    if tag == "softmax" and "axis" in attrs:
        return tag, (("axis", attrs["axis"] - ndim),)
    if tag == "layer_norm":
        return tag, (("eps", attrs.get("eps")),)
    if tag == "elementwise" and attrs.get("op") == "bias_add":
        return "bias_add", (("axis", attrs.get("axis")),)
    if tag == "elementwise" and FAMILY_OF.get(attrs.get("op")) in ("unary", "binary"):
        return attrs["op"], ()
    if tag == "reduce" and "axis" in attrs:
        axes = tuple(attrs["axis"])
        axis = None if len(axes) == ndim else axes[0] if len(axes) == 1 else axes
        return attrs.get("op"), (("axis", axis), ("keepdims", bool(attrs.get("keepdims"))))
    return None


def call_of(out, key: str) -> OpCall | None:
    """The `minitc tune OP --shape ...` call that makes a decoded workload, read from its output's
    tag and attrs (not searched for) and kept only where it makes the workload `key`."""
    if isinstance(out, list) or not isinstance(out.op, ComputeOp):
        return None
    inputs = [t for t in graph([out]) if not isinstance(t.op, ComputeOp)]
    named = _call_params(out.op.tag, out.op.attrs, len(inputs[0].shape) if inputs else 0)
    if named is None or named[0] not in FAMILY_OF:
        return None
    call = OpCall(named[0], tuple(t.shape for t in inputs), named[1])
    try:
        return call if workload_key(call.build()) == key else None
    except Exception:  # noqa: BLE001 - attrs tc.ops does not take: not made by this call
        return None


def show_workload(path, workload, shape, options, target, show_llvm, show_asm) -> None:

    tstring, hw = machine_key(target)
    out, call, key, desc, problem = resolve_workload(path, workload, shape, options, "WORKLOAD")
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
        click.echo(f"loop nest: unavailable: {problem}")
        return
    if schedule is None:
        try:
            schedule = tc.lower(out, target=target, db=False)
        except Exception as e:  # noqa: BLE001 - a workload decoded without the attrs its template reads
            if call is not None:
                raise
            why = f"{type(e).__name__}: {e}"
            click.echo(f"loop nest: unavailable: the template does not take the decoded workload ({why})")
            return
        click.echo("loop nest of the hand template (tc.build(out, db=False)):")
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
