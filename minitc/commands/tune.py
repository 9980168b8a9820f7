"""`minitc tune <op> --shape ...`: tune one operator call, then compare the tuned kernel with the
hand template, numpy and torch.

The op and its shape are parsed by spec.py; the workload (inputs, numpy and torch baselines)
comes from benchmarks/baselines.py, and tuning plus timing from benchmarks/tuning.py, the same
code the `cpu-tune` benchmark suite runs.
"""

from __future__ import annotations

import json
import os
import time

import click

import minitc as tc
from minitc.autotune.registry import strategy_names
from minitc.autotune.tuner import recorded_trials
from minitc.autotune.workload_key import workload_key
from minitc.backends.llvm.thread_pool_ir import MAX_THREADS
from minitc.benchmarks.baselines import workload_for
from minitc.benchmarks.plots import plot_curves, require_matplotlib
from minitc.benchmarks.progress import TuneProgress
from minitc.benchmarks.provenance import command_line, run_stamp
from minitc.benchmarks.report import rate as impl_rate
from minitc.benchmarks.tuning import resume_note, tune_workload
from minitc.commands import checks
from minitc.commands.spec import op_options, parse_call, pop_op_options, shape_help
from minitc.errors import MinitcError
from minitc.ops.calls import command_args
from minitc.target import is_gpu, parse_target, target_kind

HELP = f"""Tune an operator: search for a fast schedule of `tc.ops.OP` with SHAPE.

Builds the placeholders and the output with tc.ops, runs `tc.tune` (every candidate is
measured in a separate process and recorded in the records database, so running the same
command again resumes), shows a live progress bar on stderr, then times the tuned kernel,
the hand template (`tc.build(out, db=False)`), numpy and torch, interleaved, and prints a
table. The default strategy, tlm, samples programs from the language model shipped with
minitc (constrained to legal decisions) and measures the ones the cost model ranks best (the
cost model pretrained for this machine's hardware description, as `tc.tune` uses);
evolutionary search ranks mutated candidates with `default_cost_model()`. --cost-model random
gives either random scores.

{shape_help()}

\b
Examples:
  minitc tune matmul --shape 1024,1024,1024 --trials 16
  minitc tune matmul --shape 512,512,512 --trials 64 --strategy evolutionary
  minitc tune dense --shape 128,768,3072 --bias --activation relu --trials 32
  minitc tune conv2d --shape 1,64,56,56,64,3,3 --stride 1 --padding 1 --json conv.json
  minitc tune softmax --shape 1536,128 --strategy random --plot curve.png
  minitc tune matmul --shape 512,512,512 --ray 10.0.0.1:6379   # measure on a Ray cluster
"""


def _ms(ms, spread=None) -> str:
    if ms is None:
        return "-"
    text = f"{ms:.4g}"
    return text + (f" ±{spread / 2:.0f}%" if spread is not None else "")


def _ratio(num, den) -> str:
    return f"{num / den:.2f}x" if num and den else "-"


ROWS = (("tuned", "tuned ({})"), ("default", "template (tc.build)"), ("numpy", "numpy"), ("torch", "torch"))


def format_result(rec: dict, key: str, target: str) -> str:
    """The table `minitc tune` prints for one tuned workload. Every time and ratio in it comes
    from one measurement per kernel: the final interleaved timing of the four side by side."""
    unit = "GFLOP/s" if rec["kind"] == "compute" else "GB/s"
    ms = {impl: rec.get(f"{impl}_ms") for impl, _ in ROWS}
    lib = rec.get("best_library")
    head = ["", "ms", unit, "vs template", "vs best library"]
    cells = []
    for impl, label in ROWS:
        rate = impl_rate(rec, impl)
        cells.append(
            [
                label.format(rec["strategy"]),
                _ms(ms[impl], (rec.get("spread_pct") or {}).get(impl)),
                "-" if rate is None else f"{rate:.1f}",
                _ratio(ms["default"], ms[impl]),
                _ratio(ms.get(lib), ms[impl]) if lib else "-",
            ]
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    out = [
        f"{rec['description']}: workload {key[:12]}, {target}, {rec['threads']} thread(s)",
        line(head),
        "  ".join("-" * w for w in widths),
        *(line(c) for c in cells),
        "ms: median ± half the IQR, all four timed together in this process, interleaved; "
        "ratios: that row's speed over the template's or the faster library's (> 1: faster)",
        _tuning_line(rec),
    ]
    out += _verdict(rec, ms, lib)
    if rec.get("cost_model"):
        out.append(f"cost model: {rec['cost_model']}")
    if rec.get("background_cpus") and rec["background_cpus"] >= 0.25:
        out.append(
            f"warning: other processes kept {rec['background_cpus']:.1f} CPUs busy while timing; "
            "the numbers are unreliable"
        )
    out += [f"note: {note}" for note in rec.get("notes") or []]
    return "\n".join(out)


def _tuning_line(rec: dict) -> str:
    resumed, now = rec.get("trials_resumed") or 0, rec["trials"]
    overhead = f" ({rec['overhead_s_per_trial'] or 0:.2f} s overhead per trial)" if now else ""
    took = f"{rec['errors']} errors, {rec['seconds'] or 0:.1f} s{overhead}"
    done = f"tuning: {resumed + now}/{rec['trials_requested']} trials"
    if resumed:
        return f"{done}: {resumed} recorded by an earlier run, {now} measured now; {took}"
    return f"{done}, {took}"


def _slower_note(rec: dict, tuned: float, template: float) -> str:
    spread = rec.get("spread_pct") or {}
    noise = max(spread.get("tuned") or 0, spread.get("default") or 0) / 2  # half the IQR, in %
    slower = 100 * (tuned / template - 1)
    if slower <= noise:
        return f"note: the template timed {slower:.0f}% faster here, within the timing noise (±{noise:.0f}%)"
    return (
        "note: the template timed faster here, though the search's own timings ranked the tuned program "
        "faster; rerun the command to see which holds"
    )


def _verdict(rec: dict, ms: dict, lib) -> list:
    """The outcome in words, from the table's numbers only."""
    tuned, template = ms["tuned"], ms["default"]
    if tuned is None:
        return []
    vs_lib = f"{ms[lib] / tuned:.2f}x the speed of {lib} (the faster library)" if lib and ms.get(lib) else None
    if rec.get("same_as_template"):
        lines = ["result: the best program found is the hand template's own, which tc.build already runs"]
        lines[0] += f"; it runs at {vs_lib}" if vs_lib else ""
    else:
        clauses = ([f"{template / tuned:.2f}x the template's speed"] if template else []) + ([vs_lib] if vs_lib else [])
        lines = [f"result: the tuned kernel runs at {' and '.join(clauses)}"] if clauses else []
        if template and tuned > template:
            lines.append(_slower_note(rec, tuned, template))
    if tuned < 0.05:
        lines.append("note: at this size the Python call of tc.Function (~20 us) is a large part of each minitc time")
    return lines


@click.command("tune", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("op", metavar="OP")
@op_options
@click.option(
    "--trials",
    default=64,
    show_default=True,
    type=checks.Count(1),
    help="Candidates to measure in all: rerunning the same command measures only those still missing.",
)
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
@click.option("--threads", type=checks.Count(1, MAX_THREADS), help="Threads for tuning and timing (default: all CPUs).")
@click.option("--batch", default=16, show_default=True, type=checks.Count(1), help="Candidates per round.")
@click.option(
    "--cost-model",
    type=click.Choice(("default", "random")),
    default="default",
    show_default=True,
    help="default: tlm's pretrained cost model, evolutionary search's default_cost_model(); random: random scores.",
)
@click.option(
    "--budget",
    "budget_s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds of timing per implementation in the final comparison.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    metavar="[ADDRESS]",
    help="Build and measure the candidates on a Ray cluster: the one whose head is at ADDRESS, else the "
    "one started on this machine (docs/distributed.md).",
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
    ray_address,
    quiet,
    **kwargs,
):
    start = time.perf_counter()
    shape, options = pop_op_options(kwargs)
    call = parse_call(op, shape, options)
    _check_target(target)
    db_path = _check_all(call, target, strategy, lm_path, db, json_path, plot_path)
    run = f"seed={seed} cost_model={cost_model} threads={threads or 'all'}" + (
        f" lm={os.path.abspath(lm_path)}" if lm_path else ""
    )
    args = command_args(call)
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    cluster = _ray_runner(ray_address, target, threads, say)
    try:
        if is_gpu(target):
            return _tune_gpu(
                call, " ".join(args), trials, strategy, target, db_path, json_path, seed, batch, run, say, quiet
            )
        w = workload_for(call, name=" ".join(args))
        key = workload_key(w.make_minitc())
        threads = threads or tc.get_num_threads()
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
            builder=cluster,
            runner=cluster,
            lm=lm_path,
            learn=learn,
            run=run,
            strict=True,
            template_kernel=False,
        )
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted: the trials measured so far are kept in {db_path}; "
            "run the same command again to measure only the rest",
            err=True,
        )
        raise click.exceptions.Exit(130) from None
    except MinitcError as e:
        raise click.ClickException(str(e)) from None
    finally:
        if cluster is not None:
            cluster.close()
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
        _write_json(json_path, data)
        say(f"wrote {json_path}")
    if plot_path:
        plot_curves([rec], plot_path, title=f"{rec['description']} ({target}, {threads} threads)")
        say(f"wrote {plot_path}")
    if rec["tuned_ms"] is None:
        raise click.ClickException(rec["error"] or "no tuned kernel")


def _ray_runner(address, target, threads, say):
    """The RayRunner of `--ray [ADDRESS]` (None without it), its nodes said."""
    if address is None:
        return None
    if is_gpu(target):
        raise click.BadParameter("the Ray runner measures CPU targets; tune a GPU without it", param_hint="--ray")
    from minitc.autotune.ray_runner import RayRunner

    try:
        runner = RayRunner(None if address == "auto" else address, threads=threads)
    except MinitcError as e:
        raise click.ClickException(str(e)) from None
    try:
        kind = runner.kind_for(target)  # a cluster without this hardware fails before tuning
    except MinitcError as e:
        runner.close()
        raise click.ClickException(str(e)) from None
    say(f"measuring on the Ray cluster at {runner.address}: {kind}")
    return runner


def _check_all(call, target, strategy, lm_path, db, json_path, plot_path) -> str:
    """Everything that can be checked before measuring; returns the records database's path."""
    checks.check_threads()
    checks.check_memory(call)
    checks.check_output(json_path, "--json")
    checks.check_output(plot_path, "--plot")
    if plot_path:
        try:
            require_matplotlib()
        except RuntimeError as e:
            raise click.BadParameter(str(e), param_hint="--plot") from None
    if strategy == "tlm" and not is_gpu(target):
        checks.check_model(lm_path)
    return checks.check_database(db)


def _write_json(path, data) -> None:
    try:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    except OSError as e:
        raise click.ClickException(f"cannot write {path} ({e.strerror}); the results are in the records database")


def _tune_gpu(call, name, trials, strategy, target, db_path, json_path, seed, batch, run, say, quiet) -> None:
    """Tune on the GPU and report the tuner's own CUDA-event timings: the template's (measured
    first) and the re-measured best's; torch's kernels are compared by `python -m
    minitc.benchmarks --suite gpu-core`."""
    out = call.build()
    run = f"{run} strategy={strategy}"  # the name tune_workload gives a CPU run
    earlier = recorded_trials(out, target, db_path, run)
    if earlier:
        say(resume_note(earlier, trials))

    bar = TuneProgress(trials, enabled=not quiet, every=batch)
    try:
        r = tc.tune(
            out,
            trials=trials,
            strategy=strategy,
            target=target,
            db=db_path,
            seed=seed,
            batch=batch,
            progress=bar,
            run=run,
        )
    finally:
        bar.close()
    template_ms = r.history[0] if r.history and not earlier else None
    resumed = f" ({r.resumed} recorded by an earlier run)" if r.resumed else ""
    lines = [
        f"{name} on {target}: {r.resumed + r.trials}/{trials} trials{resumed}, "
        f"{r.errors} errors, {r.seconds:.1f} s; records in {db_path}",
        f"template (measured first): {'in an earlier run' if earlier else _gpu_ms(template_ms)}",
        f"tuned (re-measured best):  {_gpu_ms(r.best_ms)}",
    ]
    if target_kind(target) == "cuda-sim":
        lines.append("note: cuda-sim times the numpy simulator, not a GPU; the numbers only show the pipeline works")
    click.echo("\n".join(lines))
    if json_path:
        data = {
            "name": name,
            "target": target,
            "strategy": strategy,
            "trials": r.trials,
            "trials_resumed": r.resumed,
            "errors": r.errors,
            "seconds": r.seconds,
            "template_ms": template_ms,
            "best_ms": r.best_ms,
            "history": r.history,
            "run": _run_info(),
        }
        _write_json(json_path, data)
    if r.best_ms is None:
        raise click.ClickException("no candidate ran correctly")


def _gpu_ms(ms) -> str:
    return "-" if ms is None else f"{ms:.4f} ms"


def _check_target(target: str) -> None:
    try:
        parse_target(target)
    except Exception as e:  # noqa: BLE001 - any target error is the user's to fix
        raise click.BadParameter(str(e), param_hint="--target") from None


def _plain(params: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _run_info() -> dict:
    return run_stamp(command_line(click.get_current_context()))
