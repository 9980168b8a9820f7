"""The suite-specific parts of the `bench` command (benchmarks/cli.py): the GPU suites, tlm-eval
and the tuning suites, each from its options to its table, JSON and plot."""

from __future__ import annotations

import time

import click

from minitc.benchmarks import report, tlm_eval, tlm_report
from minitc.benchmarks.gpu_suites import GPU_SUITES
from minitc.benchmarks.machine import measure_machine
from minitc.benchmarks.plots import plot_curves, require_matplotlib, tlm_curves
from minitc.benchmarks.provenance import command_line, run_context, run_stamp
from minitc.benchmarks.tuning import TUNE_SUITES, run_tune_suite
from minitc.errors import MinitcError

TUNE_ONLY = ("trials", "strategies", "db", "seed", "cost_model")  # options of the tuning suites
CPU_ONLY = ("threads", "wait_quiet_s", "no_machine", "target")  # options the GPU suites have no use for
GPU_REPEATS = 100  # the GPU suites' default --repeats (samples are cheap there)


def bench_gpu(ctx, suite, workloads, repeats, budget_s, tune_trials, json_path, plot_path, quiet, db=None) -> None:
    """`--suite gpu-core` and `gpu-smoke` (benchmarks/gpu_core.py); without a usable GPU: one
    line naming what is missing, exit status 1. With --tune, --db keeps the tuning records."""
    from minitc.benchmarks import gpu_core, gpu_suites

    source = ctx.get_parameter_source
    unused = [o for o in CPU_ONLY + TUNE_ONLY if not (o == "db" and tune_trials)]
    given = [o for o in unused if source(o) == click.core.ParameterSource.COMMANDLINE]
    if given:
        opts = {p.name: max(p.opts, key=len) for p in ctx.command.params}
        flags = ", ".join(opts[o] for o in given)
        raise click.UsageError(f"{flags}: not used by the GPU suites ({', '.join(GPU_SUITES)})")
    if source("repeats") != click.core.ParameterSource.COMMANDLINE:
        repeats = GPU_REPEATS
    names = [n.strip() for n in workloads.split(",") if n.strip()]
    try:
        gpu_suites.select(suite, names)
        if plot_path:
            require_matplotlib()
    except (KeyError, RuntimeError) as e:
        raise click.UsageError(e.args[0]) from None
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    try:
        gpu_core.bench(
            suite,
            names,
            repeats,
            budget_s,
            tune_trials,
            json_path,
            plot_path,
            say,
            command_line(ctx),
            echo=click.echo,
            db=db,
        )
    except gpu_core.GpuUnavailable as e:
        raise click.ClickException(str(e)) from None


def bench_tlm_eval(
    workloads,
    tlm_k,
    evo_trials,
    seed,
    json_path,
    plot_path,
    lm_path,
    quiet,
    evo_from=None,
    tlm_seeds="",
    leave_out_hardware=False,
    target="llvm",
) -> None:
    """`--suite tlm-eval`: the language model against evolutionary search on held-out workloads
    (with `leave_out_hardware`: a copy of it fine-tuned without this host's measurements)."""
    import json

    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    try:
        ks = [int(x) for x in tlm_k.split(",") if x.strip()]
        budgets = [int(x) for x in evo_trials.split(",") if x.strip()]
        seeds = [int(x) for x in tlm_seeds.split(",") if x.strip()] or [seed]
    except ValueError:
        raise click.UsageError("--tlm-k, --evo-trials and --tlm-seeds take comma-separated integers") from None
    names = [n.strip() for n in workloads.split(",") if n.strip()]
    start = time.perf_counter()
    left_out = None
    if leave_out_hardware:
        lm_path, left_out = _leave_out_model(lm_path, say)
    try:
        by_seed = tlm_eval.run_seeds(names, ks, budgets, seeds, say, lm_path, evo_from, target)
    except KeyError as e:
        raise click.UsageError(e.args[0]) from None
    except MinitcError as e:  # no GPU, no CuPy, an unknown target
        raise click.ClickException(str(e)) from None
    rows = by_seed[seeds[0]]
    click.echo(tlm_report.table(rows, ks, budgets))
    if len(seeds) > 1:
        click.echo(f"\nTLM with {len(seeds)} seeds (the tables above: seed {seeds[0]}):")
        click.echo(tlm_report.seeds_table(by_seed, ks, budgets))
    say(f"tlm-eval done in {time.perf_counter() - start:.0f} s")
    if json_path:
        run = {
            **run_stamp(command_line(click.get_current_context())),
            **({"leave_out_hardware": left_out} if left_out else {}),
        }
        shared = ("evo_history", "evo_times")  # the later seeds' rows share the first's evolutionary run
        more = {
            str(s): [{k: v for k, v in row.items() if k not in shared} for row in r]
            for s, r in by_seed.items()
            if s != seeds[0]
        }
        with open(json_path, "w") as f:
            json.dump({"run": run, "rows": rows, **({"more_seeds": more} if more else {})}, f, indent=1)
        say(f"wrote {json_path}")
    if plot_path:
        tlm_curves(rows, plot_path)
        say(f"wrote {plot_path}")


def _leave_out_model(base, say) -> tuple:
    """(path, what was left out) of a copy of `base` fine-tuned without this host's hardware
    description (tlm_eval.leave_out_model), kept in the user's cache directory."""
    from minitc.lm.pipeline import user_model_path
    from minitc.target import hardware_fingerprint

    fingerprint = hardware_fingerprint("llvm")
    out = user_model_path().parent / f"lm-without-{fingerprint}.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = tlm_eval.leave_out_model(base, out, say=say)
    say(f"leave-out: wrote {out} ({meta['demonstrations']} programs, {meta['seconds']:.0f} s)")
    return str(out), {"fingerprint": fingerprint, "base": str(base or "shipped"), "checkpoint": str(out)}


def select_tuning(suite: str, names) -> list:
    """The workloads of a tuning suite, or only those named (KeyError listing what exists)."""
    by_name = {w.name: w for w in TUNE_SUITES[suite]}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise KeyError(
            f"unknown workload(s) {', '.join(map(repr, unknown))} in suite {suite!r}; available: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names] if names else list(by_name.values())


def bench_tuning(
    chosen, suite, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine, say, options
) -> None:
    """`--suite cpu-tune` and friends: tune, compare, print, write JSON and curves."""

    start = time.perf_counter()
    command = command_line(click.get_current_context())
    machine = None if no_machine else measure_machine(threads, progress=say)
    context = run_context(machine, command, suite, threads, repeats, wait_quiet_s, **options)
    records = run_tune_suite(
        chosen,
        suite,
        threads,
        options["strategies"],
        options["trials"],
        db=options["db"],
        seed=options["seed"],
        cost_model=options["cost_model"],
        repeats=repeats,
        budget_s=budget_s,
        machine=machine,
        progress=say,
        context=context,
        wait_quiet_s=wait_quiet_s,
    )
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    click.echo("\n".join(report.machine_lines(context["machine"])))
    click.echo(report.tuning_table(records))
    if json_path:
        report.write_json(records, json_path)
        say(f"wrote {json_path}")
    if plot_path:
        plot_curves(records, plot_path, title=f"{suite}: best-so-far latency vs trials")
        say(f"wrote {plot_path}")
