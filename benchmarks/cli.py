"""The `bench` command: `python -m minitc.benchmarks ...` and `minitc bench ...` are the same."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import click

from minitc.autotune.registry import strategy_names
from minitc.benchmarks import plots, report
from minitc.benchmarks.gpu_suites import GPU_SUITES
from minitc.benchmarks.machine import measure_machine as measure
from minitc.benchmarks.provenance import run_context
from minitc.benchmarks.runner import HOST_TARGET, bench_target, run_suite
from minitc.benchmarks.suite_commands import TUNE_ONLY, bench_gpu, bench_tlm_eval, bench_tuning, select_tuning
from minitc.benchmarks.suites import SUITES, select
from minitc.benchmarks.timing import wait_for_quiet
from minitc.benchmarks.tuning import TUNE_SUITES
from minitc.errors import MinitcError

DEFAULT_SUITE = "cpu-core"


def _threads(ctx, param, value: str) -> list:
    """Comma-separated counts (--threads, --batch), each at least 1."""
    try:
        counts = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers like 1,2, got {value!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise click.BadParameter(f"{param.name} must be integers >= 1, got {value!r}")
    return list(dict.fromkeys(counts))


def _strategies(ctx, param, value: str) -> list:
    names = [x.strip() for x in value.split(",") if x.strip()]
    unknown = [n for n in names if n not in strategy_names()]
    if not names or unknown:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(strategy_names())}, got {value!r}")
    return list(dict.fromkeys(names))


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
    "--batch", default="1", show_default=True, callback=_threads, help="Suite models: batch sizes to run, e.g. 1,8."
)
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
    batch,
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
    if given_target and suite not in SUITES and suite not in GPU_SUITES and suite not in ("tlm-eval", "models"):
        raise click.UsageError(f"--target applies to the suites {', '.join(SUITES)}, models and tlm-eval, not {suite}")
    if ctx.get_parameter_source("batch") == click.core.ParameterSource.COMMANDLINE and suite != "models":
        raise click.UsageError("--batch applies to the suite models")
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
            plots.require_matplotlib()
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
        plots.plot(records, plot_path)
        say(f"wrote {plot_path}")


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
    context = run_context(machine, command, suite, threads, repeats, wait_quiet_s)
    records = run_suite(workloads, threads, suite, machine, repeats, budget_s, say, context, wait_quiet_s, target)
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    return records


def main() -> None:
    bench(prog_name="python -m minitc.benchmarks")
