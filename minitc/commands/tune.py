"""`minitc tune <op> --shape ...`: tune one operator call, then compare the tuned kernel with the
hand template, numpy and torch.

The op and its shape are parsed by spec.py; the workload (inputs, numpy and torch baselines)
comes from benchmarks/baselines.py, and tuning plus timing from benchmarks/tuning.py, the same
code the `cpu-tune` benchmark suite runs.
"""

from __future__ import annotations

import datetime
import json
import time

import click

import minitc as tc
from minitc.autotune.database import default_path
from minitc.autotune.registry import strategy_names
from minitc.autotune.workload_key import workload_key
from minitc.benchmarks import report
from minitc.benchmarks.baselines import workload_for
from minitc.benchmarks.cli import command_line, versions
from minitc.benchmarks.progress import TuneProgress
from minitc.benchmarks.tuning import tune_workload
from minitc.benchmarks.tuning_report import impl_rate, plot_curves
from minitc.commands.spec import command_args, op_options, parse_call, pop_op_options, shape_help
from minitc.errors import MinitcError
from minitc.target import is_gpu, parse_target, target_kind

HELP = f"""Tune an operator: search for a fast schedule of `tc.ops.OP` with SHAPE.

Builds the placeholders and the output with tc.ops, runs `tc.tune` (every candidate is
measured in a separate process and recorded in the records database, so running the same
command again resumes), shows a live progress bar on stderr, then times the tuned kernel,
the hand template (`tc.build(out, db=False)`), numpy and torch, interleaved, and prints a
table. The default strategy, tlm, samples programs from the language model shipped with
minitc (constrained to legal decisions) and measures the ones the cost model ranks best;
evolutionary search ranks mutated candidates with `default_cost_model()` (or random scores
with --cost-model random).

{shape_help()}

\b
Examples:
  minitc tune matmul --shape 1024,1024,1024 --trials 16
  minitc tune matmul --shape 512,512,512 --trials 64 --strategy evolutionary
  minitc tune dense --shape 128,768,3072 --bias --activation relu --trials 32
  minitc tune conv2d --shape 1,64,56,56,64,3,3 --stride 1 --padding 1 --json conv.json
  minitc tune softmax --shape 1536,128 --strategy random --plot curve.png
"""


def _ms(ms, spread=None) -> str:
    if ms is None:
        return "-"
    text = f"{ms:.4g}"
    return text + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def format_result(rec: dict, key: str, target: str) -> str:
    """The table `minitc tune` prints for one tuned workload."""
    unit = "GFLOP/s" if rec["kind"] == "compute" else "GB/s"
    best_lib = rec.get("best_library")
    best_ms = rec.get(f"{best_lib}_ms") if best_lib else None
    rows = [
        ("tuned (" + rec["strategy"] + ")", "tuned"),
        ("template (tc.build)", "default"),
        ("numpy", "numpy"),
        ("torch", "torch"),
    ]
    head = ["", "ms", unit, "vs best library"]
    cells = []
    for label, impl in rows:
        ms = rec.get(f"{impl}_ms")
        rate = impl_rate(rec, impl)
        cells.append(
            [
                label,
                _ms(ms, (rec.get("spread_pct") or {}).get(impl)),
                "-" if rate is None else f"{rate:.1f}",
                f"{best_ms / ms:.2f}x" if ms and best_ms else "-",
            ]
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    out = [
        f"{rec['description']}: workload {key[:12]}, {target}, {rec['threads']} thread(s)",
        line(head),
        "  ".join("-" * w for w in widths),
    ] + [line(c) for c in cells]
    out.append(
        f"tuning: {rec['trials']}/{rec['trials_requested']} trials, {rec['errors']} errors, "
        f"{rec['seconds'] or 0:.1f} s ({rec['overhead_s_per_trial'] or 0:.2f} s overhead per trial); "
        f"the tuner's re-measured best: {_ms(rec.get('best_ms'))} ms"
    )
    if rec.get("default_kernel_ms"):
        speedup = rec.get("kernel_speedup_vs_default")
        out.append(
            f"the template timed the same way (bare kernel): {_ms(rec['default_kernel_ms'])} ms"
            + (f"; speedup of the tuned kernel over it: {speedup:.2f}x" if speedup else "")
        )
    if rec.get("cost_model"):
        out.append(f"cost model: {rec['cost_model']}")
    out.append("vs best library = best of numpy/torch ms / ms (> 1: faster than both); ms = median ± half the IQR")
    if rec.get("speedup_vs_default"):
        out.append(f"speedup over the template, in-process calls: {rec['speedup_vs_default']:.2f}x")
    tuned, best = rec.get("tuned_ms"), rec.get("best_ms")
    if tuned and best and tuned > 2 * best:
        out.append(
            "note: the table times calls through tc.Function, whose Python call overhead (~20 us) dominates "
            "here; the tuner times the bare kernel"
        )
    if rec.get("background_cpus") and rec["background_cpus"] >= 0.25:
        out.append(
            f"warning: other processes kept {rec['background_cpus']:.1f} CPUs busy while timing; "
            "the numbers are unreliable"
        )
    for note in rec.get("notes") or []:
        out.append(f"note: {note}")
    return "\n".join(out)


@click.command("tune", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("op", metavar="OP")
@op_options
@click.option("--trials", default=64, show_default=True, type=click.IntRange(min=1), help="Candidates to measure.")
@click.option(
    "--strategy",
    type=click.Choice(strategy_names()),
    default="tlm",
    show_default=True,
    help="tlm: the language model proposes, the cost model re-ranks, edits polish the best; "
    "evolutionary: MetaSchedule's search.",
)
@click.option(
    "--lm",
    "lm_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Language-model checkpoint for tlm (default: $MINITC_LM, your --learn model, the shipped one).",
)
@click.option(
    "--learn", is_flag=True, help="tlm: fine-tune the model on this run's measurements and keep it as your default."
)
@click.option(
    "--target",
    default="llvm",
    show_default=True,
    help="'llvm' (host CPU), 'llvm -mcpu=...', 'cuda' (an NVIDIA GPU) or 'cuda-sim' (the numpy simulator).",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Records database (default: $MINITC_DB, else ~/.cache/minitc/records.db).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write the result as JSON.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write best-so-far latency vs trials (PNG; needs matplotlib).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Search seed.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads for tuning and timing (default: all CPUs).")
@click.option("--batch", default=16, show_default=True, type=click.IntRange(min=1), help="Candidates per round.")
@click.option(
    "--cost-model",
    type=click.Choice(("default", "random")),
    default="default",
    show_default=True,
    help="Evolutionary search: default_cost_model() or random scores.",
)
@click.option(
    "--budget",
    "budget_s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds of timing per implementation in the final comparison.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def tune(
    op,
    trials,
    strategy,
    lm_path,
    learn,
    target,
    db,
    json_path,
    plot_path,
    seed,
    threads,
    batch,
    cost_model,
    budget_s,
    quiet,
    **kwargs,
):

    start = time.perf_counter()
    shape, options = pop_op_options(kwargs)
    call = parse_call(op, shape, options)
    _check_target(target)
    if plot_path:
        try:
            report.require_matplotlib()
        except RuntimeError as e:
            raise click.UsageError(str(e)) from None
    args = command_args(call)
    if is_gpu(target):
        return _tune_gpu(call, " ".join(args), trials, strategy, target, db, json_path, seed, batch, quiet)
    w = workload_for(call, name=" ".join(args))
    key = workload_key(w.make_minitc())
    db_path = str(db or default_path())
    threads = threads or tc.get_num_threads()
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    say(f"{w.description}: workload {key[:12]}; records in {db_path}")
    bar = TuneProgress(trials, w.work, w.unit, enabled=not quiet, every=batch)
    (rec,) = tune_workload(
        w,
        [strategy],
        trials,
        threads,
        db=db_path,
        target=target,
        seed=seed,
        batch=batch,
        cost_model=cost_model,
        budget_s=budget_s,
        say=say,
        progress_factory=lambda s: bar,
        lm=lm_path,
        learn=learn,
    )
    click.echo(format_result(rec, key, target))
    wall = time.perf_counter() - start
    click.echo(f"wall time: {wall:.1f} s (tuning {rec['seconds'] or 0:.1f} s, then timing)")
    if json_path:
        data = {
            **rec,
            "workload": key,
            "name": rec["workload"],
            "op": op,
            "shape": shape,
            "params": _plain(call.kwargs),
            "target": target,
            "seed": seed,
            "batch": batch,
            "wall_s": round(wall, 2),
            "run": _run_info(),
        }
        data.pop("workload_key", None)
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        say(f"wrote {json_path}")
    if plot_path:
        plot_curves([rec], plot_path, title=f"{rec['description']} ({target}, {threads} threads)")
        say(f"wrote {plot_path}")
    if rec["tuned_ms"] is None:
        raise click.ClickException(rec["error"] or "no tuned kernel")


def _tune_gpu(call, name, trials, strategy, target, db, json_path, seed, batch, quiet) -> None:
    """Tune on the GPU: the tuner's own CUDA-event timings of the template (measured first) and
    of the best program; torch's kernels are compared by `python -m minitc.benchmarks --suite gpu-core`."""
    out = call.build()
    db_path = str(db or default_path())
    progress = (
        None
        if quiet
        else (
            lambda done, total, errors, best: click.echo(
                f"\r{done}/{total} trials, {errors} errors, best {best if best is None else f'{best:.4f} ms'}",
                err=True,
                nl=done == total,
            )
        )
    )
    try:
        r = tc.tune(
            out, trials=trials, strategy=strategy, target=target, db=db_path, seed=seed, batch=batch, progress=progress
        )
    except MinitcError as e:
        raise click.ClickException(str(e)) from None
    template_ms = r.history[0] if r.history else None
    lines = [
        f"{name} on {target}: {r.trials} trials, {r.errors} errors, {r.seconds:.1f} s; records in {db_path}",
        f"template (measured first): {template_ms if template_ms is None else f'{template_ms:.4f} ms'}",
        f"tuned (re-measured best):  {r.best_ms if r.best_ms is None else f'{r.best_ms:.4f} ms'}",
    ]
    if target_kind(target) == "cuda-sim":
        lines.append("note: cuda-sim times the numpy simulator, not a GPU; the numbers only show the pipeline works")
    click.echo("\n".join(lines))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(
                {
                    "name": name,
                    "target": target,
                    "strategy": strategy,
                    "trials": r.trials,
                    "errors": r.errors,
                    "seconds": r.seconds,
                    "template_ms": template_ms,
                    "best_ms": r.best_ms,
                    "history": r.history,
                    "run": _run_info(),
                },
                f,
                indent=1,
            )
            f.write("\n")
    if r.best_ms is None:
        raise click.ClickException("no candidate ran correctly")


def _check_target(target: str) -> None:
    try:
        parse_target(target)
    except Exception as e:  # noqa: BLE001 - any target error is the user's to fix
        raise click.BadParameter(str(e), param_hint="--target") from None


def _plain(params: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _run_info() -> dict:

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command_line(click.get_current_context()),
        "versions": versions(),
    }
