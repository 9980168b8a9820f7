"""The `bench` command: `python -m minitc.benchmarks ...` and `minitc bench ...` are the same."""

from __future__ import annotations

import datetime
import platform
import shlex
import time
from pathlib import Path

import click

from minitc.autotune.registry import strategy_names
from minitc.benchmarks import report, tlm_eval, tlm_report
from minitc.benchmarks.gpu_suites import GPU_SUITES
from minitc.benchmarks.machine import measure_machine
from minitc.benchmarks.machine import measure_machine as measure
from minitc.benchmarks.runner import HOST_TARGET, bench_target, run_suite
from minitc.benchmarks.suites import SUITES, select
from minitc.benchmarks.timing import torch_module, wait_for_quiet
from minitc.benchmarks.tuning import TUNE_SUITES, run_tune_suite
from minitc.benchmarks.tuning_report import format_table, plot_curves
from minitc.errors import MinitcError

DEFAULT_SUITE = "cpu-core"
TUNE_ONLY = ("trials", "strategies", "db", "seed", "cost_model")  # options of the tuning suites
CPU_ONLY = ("threads", "wait_quiet_s", "no_machine", "target")  # options the GPU suites have no use for
GPU_REPEATS = 100  # the GPU suites' default --repeats (samples are cheap there)


def _threads(ctx, param, value: str) -> list:
    try:
        counts = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers like 1,2, got {value!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise click.BadParameter(f"thread counts must be integers >= 1, got {value!r}")
    return list(dict.fromkeys(counts))


def _strategies(ctx, param, value: str) -> list:
    names = [x.strip() for x in value.split(",") if x.strip()]
    unknown = [n for n in names if n not in strategy_names()]
    if not names or unknown:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(strategy_names())}, got {value!r}")
    return list(dict.fromkeys(names))


def versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    import numpy

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

        blas = [
            f"{i['internal_api']} {i['version']} ({i.get('architecture')})"
            for i in threadpool_info()
            if i["user_api"] == "blas"
        ]
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


def check_output(path, flag: str) -> None:
    """`path` can be written (its folder exists, it is not a folder): checked by opening it for
    appending, which creates no content and leaves an existing file as it is."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise click.BadParameter(f"{path} is a folder; give a file name", param_hint=flag)
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise click.BadParameter(
            f"cannot write {path} ({e.strerror}); give a path in an existing, writable folder", param_hint=flag
        ) from None
    if not existed:
        p.unlink()


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--suite",
    default=DEFAULT_SUITE,
    show_default=True,
    help=f"Suite to run: {', '.join(SUITES)}; models; tuning: {', '.join(TUNE_SUITES)}; "
    f"GPU: {', '.join(GPU_SUITES)}; tlm-eval; runner-scaling.",
)
@click.option("--workloads", default="", help="Comma-separated workload names of the suite (default: all).")
@click.option(
    "--target",
    default=HOST_TARGET,
    show_default=True,
    help=f"Suites {', '.join(SUITES)}: the LLVM target minitc's kernels are built for, e.g. "
    "'llvm -mcpu=znver2' (AVX2 code on an AVX-512 host); this host must be able to run its code. "
    "tlm-eval: also 'cuda' (the GPU here).",
)
@click.option("--threads", default="1,2", show_default=True, callback=_threads, help="Thread counts to run.")
@click.option(
    "--repeats",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Timed samples per implementation (slow calls get fewer, never under 3).",
)
@click.option(
    "--budget",
    "budget_s",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds of timing per implementation, workload and thread count.",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write the records as JSON.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write a bar chart (PNG); needs matplotlib: pip install 'minitc[plot]'.",
)
@click.option(
    "--wait-quiet",
    "wait_quiet_s",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="On a shared machine: before the machine measurement and each row, wait up to this many "
    "seconds for other processes to go quiet.",
)
@click.option("--no-machine", is_flag=True, help="Skip measuring peak FMA, bandwidth and launch overhead.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option(
    "--trials",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tuning suites: measured candidates per workload and strategy.",
)
@click.option(
    "--strategies",
    default="random,evolutionary,tlm",
    show_default=True,
    callback=_strategies,
    help=f"Tuning suites: search strategies to compare, of {', '.join(strategy_names())}.",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="Tuning suites, and the GPU suites with --tune: one records database for all runs, kept "
    "(default: a fresh temporary one per run).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Tuning suites: search seed.")
@click.option(
    "--cost-model",
    type=click.Choice(("default", "random")),
    default="default",
    show_default=True,
    help="Tuning suites: the evolutionary search's cost model (default_cost_model() or random scores).",
)
@click.option(
    "--tune",
    "tune_trials",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="GPU suites: tune each minitc kernel with this many trials (tc.tune, target cuda) first.",
)
@click.option("--tlm-k", default="1,10,32,64", show_default=True, help="tlm-eval: measured programs of TLM to report.")
@click.option(
    "--evo-trials", default="64,256,1000", show_default=True, help="tlm-eval: evolutionary budgets to compare with."
)
@click.option(
    "--tlm-seeds",
    default="",
    help="tlm-eval: run TLM with each of these comma-separated seeds (evolutionary "
    "search once, with --seed) and add a table of the geomeans per seed and their median.",
)
@click.option(
    "--lm",
    "lm_path",
    type=click.Path(exists=True, dir_okay=False),
    help="tlm-eval: the model (default: the shipped one).",
)
@click.option(
    "--evo-from",
    type=click.Path(exists=True, dir_okay=False),
    help="tlm-eval: reuse the evolutionary runs of an earlier --json file; run only TLM again.",
)
@click.option(
    "--leave-out-hardware",
    is_flag=True,
    help="tlm-eval: first fine-tune a copy of the model (--lm, default the shipped one) on the dataset "
    "(lm/data) without this host's hardware description, then evaluate that copy.",
)
def bench(
    suite,
    workloads,
    target,
    threads,
    repeats,
    budget_s,
    json_path,
    plot_path,
    wait_quiet_s,
    no_machine,
    quiet,
    trials,
    strategies,
    db,
    seed,
    cost_model,
    tune_trials,
    tlm_k,
    evo_trials,
    tlm_seeds,
    lm_path,
    evo_from,
    leave_out_hardware,
):
    """Benchmark minitc against numpy and torch (CPU) on a suite of workloads.

    Each workload runs minitc's default schedule (`tc.build(tensor)`), numpy and torch in the
    same process, interleaved, for each thread count; the minitc result is checked against
    numpy first (a wrong kernel is an error row). Prints a table; --json writes the records.

    Tuning suites (cpu-tune, smoke-tune; see benchmarks/tuning.py) tune each workload with
    --trials candidates per strategy of --strategies, then time the tuned kernels, the hand
    template, numpy and torch; --plot draws best-so-far curves. Their thread count defaults
    to all CPUs.

    GPU suites (gpu-core, gpu-smoke; see benchmarks/gpu_core.py) time minitc's CUDA kernels
    against torch (cuBLAS/cuDNN) and Triton in float32 without TF32 (--repeats defaults to 100
    there; --tune N tunes the minitc kernels first). They need an NVIDIA GPU, CuPy and torch's
    CUDA build, and stop with a message saying what is missing otherwise.

    --target builds minitc's kernels of the suites cpu-core and smoke for another CPU target
    than the host's (code the host can run, such as AVX2 code on an AVX-512 machine); every
    record names the target and the host CPU.
    """
    ctx = click.get_current_context()
    check_output(json_path, "--json")
    check_output(plot_path, "--plot")
    given_target = ctx.get_parameter_source("target") == click.core.ParameterSource.COMMANDLINE
    if given_target and suite not in SUITES and suite not in GPU_SUITES and suite != "tlm-eval":
        raise click.UsageError(f"--target applies to the suites {', '.join(SUITES)} and tlm-eval, not {suite}")
    if leave_out_hardware and suite != "tlm-eval":
        raise click.UsageError("--leave-out-hardware applies to the suite tlm-eval")
    if suite == "tlm-eval":
        return bench_tlm_eval(
            workloads,
            tlm_k,
            evo_trials,
            seed,
            json_path,
            plot_path,
            lm_path,
            quiet,
            evo_from,
            tlm_seeds,
            leave_out_hardware,
            target if given_target else "llvm",
        )
    if suite == "runner-scaling":
        from minitc.benchmarks.runner_scaling import bench_runner_scaling

        return bench_runner_scaling(ctx, trials, json_path, quiet)
    if suite == "models":
        from minitc.benchmarks.models import bench_models

        return bench_models(ctx)
    if suite in GPU_SUITES:
        return bench_gpu(ctx, suite, workloads, repeats, budget_s, tune_trials, json_path, plot_path, quiet, db)
    if ctx.get_parameter_source("tune_trials") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError(f"--tune only applies to the GPU suites ({', '.join(GPU_SUITES)})")
    tuning = suite in TUNE_SUITES
    if not tuning:
        given = [o for o in TUNE_ONLY if ctx.get_parameter_source(o) == click.core.ParameterSource.COMMANDLINE]
        if given:
            flags = ", ".join("--" + o.replace("_", "-") for o in given)
            raise click.UsageError(f"{flags} only apply to the tuning suites ({', '.join(TUNE_SUITES)})")
    names = [n.strip() for n in workloads.split(",") if n.strip()]
    try:
        chosen = select_tuning(suite, names) if tuning else select(suite, names)
    except KeyError as e:
        raise click.UsageError(e.args[0]) from None
    try:
        build_target = bench_target(target)
    except MinitcError as e:
        raise click.BadParameter(str(e), param_hint="--target") from None
    if plot_path:
        try:
            report.require_matplotlib()
        except RuntimeError as e:
            raise click.UsageError(str(e)) from None
    say = (lambda msg: None) if quiet else (lambda msg: click.echo(msg, err=True))
    if tuning:
        if ctx.get_parameter_source("threads") != click.core.ParameterSource.COMMANDLINE:
            import minitc as tc

            threads = [tc.get_num_threads()]
        options = dict(trials=trials, strategies=strategies, db=db, seed=seed, cost_model=cost_model)
        return bench_tuning(
            chosen, suite, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine, say, options
        )
    command = _command_line(
        suite, names, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine, target
    )
    records = run(chosen, suite, threads, repeats, budget_s, not no_machine, say, command, wait_quiet_s, build_target)
    ctx_machine = records[0]["machine"] if records else None
    click.echo("\n".join(report.target_lines(build_target) + report.machine_lines(ctx_machine)))
    click.echo(report.format_table(records))
    if json_path:
        report.write_json(records, json_path)
        say(f"wrote {json_path}")
    if plot_path:
        report.plot(records, plot_path)
        say(f"wrote {plot_path}")


def bench_gpu(ctx, suite, workloads, repeats, budget_s, tune_trials, json_path, plot_path, quiet, db=None) -> None:
    """`--suite gpu-core` and `gpu-smoke` (benchmarks/gpu_core.py); without a usable GPU: one
    line naming what is missing, exit status 1. With --tune, --db keeps the tuning records."""
    from minitc.benchmarks import gpu_core, gpu_suites, report

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
            report.require_matplotlib()
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
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command_line(click.get_current_context()),
            "versions": versions(),
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
        tlm_report.plot(rows, plot_path)
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
    context = {
        "machine": machine.to_json() if machine else None,
        "run": {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command,
            "suite": suite,
            "threads": list(threads),
            "repeats": repeats,
            "wait_quiet_s": wait_quiet_s,
            "versions": versions(),
            **options,
        },
    }
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
    click.echo(format_table(records))
    if json_path:
        report.write_json(records, json_path)
        say(f"wrote {json_path}")
    if plot_path:
        plot_curves(records, plot_path, title=f"{suite}: best-so-far latency vs trials")
        say(f"wrote {plot_path}")


def command_line(ctx) -> str:
    """The command as given (its arguments, then the options set on the command line), for the
    records: click keeps no copy of argv, and sys.argv is not ours under CliRunner."""
    from click.core import ParameterSource

    argv = ctx.command_path.split()
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if isinstance(p, click.Argument):
            argv += [str(value)] if value is not None else []
        elif ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE and value is not None:
            flag = max(p.opts, key=len)
            argv += (
                [flag] if p.is_flag else [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
            )
    return " ".join(shlex.quote(a) for a in argv)


def _command_line(
    suite, names, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s, no_machine, target=HOST_TARGET
) -> str:
    """The command that reproduces this run (recorded in the JSON)."""
    args = ["--suite", suite]
    args += ["--workloads", ",".join(names)] if names else []
    args += ["--target", target] if target != HOST_TARGET else []
    args += ["--threads", ",".join(map(str, threads)), "--repeats", str(repeats), "--budget", f"{budget_s:g}"]
    args += ["--json", json_path] if json_path else []
    args += ["--plot", plot_path] if plot_path else []
    args += ["--wait-quiet", f"{wait_quiet_s:g}"] if wait_quiet_s else []
    args += ["--no-machine"] if no_machine else []
    return " ".join([click.get_current_context().command_path] + [shlex.quote(a) for a in args])


def run(
    workloads,
    suite,
    threads,
    repeats,
    budget_s,
    measure_machine=True,
    progress=None,
    command=None,
    wait_quiet_s=0.0,
    target=HOST_TARGET,
) -> list:
    """Measure the machine (optionally), then run the workloads with their kernels built for
    `target`; returns the records."""

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
            "versions": versions(),
        },
    }
    records = run_suite(workloads, threads, suite, machine, repeats, budget_s, say, context, wait_quiet_s, target)
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    return records


def main() -> None:
    bench(prog_name="python -m minitc.benchmarks")
