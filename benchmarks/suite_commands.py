"""The suites of the `bench` command as data: `SUITE_TABLE` maps each suite's name to what it
runs (its workloads and its runner) and the options it takes; cli.py makes one command of each
entry, with only those options. A runner takes the chosen workloads and the suite's options and
goes from them to the table, the JSON and the plot:

    run(suite, workloads, say, command, **options)   # say: progress lines; command: for the records

To add a suite, write its runner and add an entry.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable
from unittest.mock import patch

import click

from minitc.benchmarks import report, tlm_eval, tlm_report
from minitc.benchmarks.handwritten import HANDWRITTEN
from minitc.benchmarks.machine import measure_machine
from minitc.benchmarks.plots import models_plot, plot, plot_curves, tlm_curves
from minitc.benchmarks.provenance import run_context, run_stamp
from minitc.benchmarks.runner import bench_target, run_suite
from minitc.benchmarks.suites import pick, select
from minitc.benchmarks.tuning import TUNE_SUITES, run_tune_suite
from minitc.errors import MinitcError
from minitc.timing import wait_for_quiet


@dataclass(frozen=True)
class Suite:
    """One suite of the bench command."""

    summary: str  # one line for `bench --help`
    run: Callable  # run(suite, workloads, say, command, **options)
    options: tuple  # the options it takes (names of cli.OPTIONS), in the order --help lists them
    select: Callable | None = None  # names -> workloads, all when none (KeyError naming what exists)
    defaults: dict = field(default_factory=dict)  # option -> this suite's default
    helps: dict = field(default_factory=dict)  # option -> this suite's help text


def _publish(say, lines: list, records, json_path, plot_path, draw) -> None:
    """Print the header and table lines; write the records as JSON and `draw(records, path)`."""
    click.echo("\n".join(lines))
    if json_path:
        report.write_json(records, json_path)
        say(f"wrote {json_path}")
    if plot_path:
        draw(records, plot_path)
        say(f"wrote {plot_path}")


def _machine(threads, no_machine: bool, wait_quiet_s: float, say):
    """The machine's peaks at the thread counts (machine.py), or None with --no-machine."""
    if no_machine:
        return None
    if wait_quiet_s > 0:
        say(f"machine: waiting up to {wait_quiet_s:g} s for other processes to go quiet")
        wait_for_quiet(wait_quiet_s)
    machine = measure_machine(threads, progress=say)
    say(f"machine measured in {machine.seconds:.1f} s")
    return machine


# ---------------------------------------------------------------------------------------------
# the runners


def run_cpu(suite, workloads, say, command, *, target, threads, repeats, budget_s, json_path, plot_path,
            wait_quiet_s, no_machine) -> None:  # fmt: skip
    """cpu-core and smoke (runner.py): minitc's default schedules built for `target`, numpy and
    torch, interleaved, at each thread count."""
    try:
        build_target = bench_target(target)
    except MinitcError as e:
        raise click.BadParameter(str(e), param_hint="--target") from None
    start = time.perf_counter()
    machine = _machine(threads, no_machine, wait_quiet_s, say)
    context = run_context(machine, command, suite, threads, repeats, wait_quiet_s)
    records = run_suite(workloads, threads, suite, machine, repeats, budget_s, say, context, wait_quiet_s, build_target)
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    lines = report.target_lines(build_target) + report.machine_lines(context["machine"])
    _publish(say, lines + [report.format_table(records)], records, json_path, plot_path, plot)


def run_tuning(suite, workloads, say, command, *, threads, repeats, budget_s, json_path, plot_path, wait_quiet_s,
               no_machine, **tuning) -> None:  # fmt: skip
    """cpu-tune and smoke-tune (tuning.py): tune each workload with each strategy, then time the
    tuned kernels, the template, numpy and torch; `tuning`: trials, strategies, db, seed and
    cost_model."""
    start = time.perf_counter()
    machine = _machine(threads, no_machine, wait_quiet_s, say)
    context = run_context(machine, command, suite, threads, repeats, wait_quiet_s, **tuning)
    records = run_tune_suite(
        workloads, suite, threads, tuning["strategies"], tuning["trials"], db=tuning["db"], seed=tuning["seed"],
        cost_model=tuning["cost_model"], repeats=repeats, budget_s=budget_s, machine=machine, progress=say,
        context=context, wait_quiet_s=wait_quiet_s,
    )  # fmt: skip
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    lines = report.machine_lines(context["machine"]) + [report.tuning_table(records)]
    title = f"{suite}: best-so-far latency vs trials"
    _publish(say, lines, records, json_path, plot_path, partial(plot_curves, title=title))


def run_gpu(suite, workloads, say, command, *, repeats, budget_s, tune_trials, db, json_path, plot_path) -> None:
    """gpu-core and gpu-smoke (gpu_core.py); without a usable GPU: one line naming what is
    missing, exit status 1. With --tune, --db keeps the tuning records."""
    from minitc.benchmarks import gpu_core
    from minitc.benchmarks.plots import gpu_plot

    if db and not tune_trials:
        raise click.UsageError("--db keeps the records of --tune: give --tune N too")
    start = time.perf_counter()
    try:
        records = gpu_core.run_suite(workloads, suite, repeats, budget_s, tune_trials, say, command, db)
    except gpu_core.GpuUnavailable as e:
        raise click.ClickException(str(e)) from None
    say(f"suite {suite} done in {time.perf_counter() - start:.1f} s")
    _publish(say, [report.gpu_table(records)], records, json_path, plot_path, gpu_plot)


def run_models(suite, specs, say, command, *, target, threads, batch, repeats, budget_s, trials, db, json_path,
               plot_path, wait_quiet_s, no_machine, dtype="fp32") -> None:  # fmt: skip
    """The models suite (models.py): whole models, minitc against eager, Inductor and ONNX
    Runtime; --trials and --db add the tuned minitc."""
    from minitc.benchmarks import models

    if db and not trials:
        raise click.UsageError("--db is for the tuned minitc: give --trials too")
    try:
        systems = models.chosen_systems()
    except ValueError as e:
        raise click.UsageError(e.args[0]) from None
    if trials and not models.compile_takes_trials():
        say("tc.compile takes no trials= yet: the tuned minitc is not run")
        trials = None
    start = time.perf_counter()
    machine = _machine(threads, no_machine, wait_quiet_s, say)
    versions = models.all_versions()
    context = run_context(machine, command, suite, threads, repeats, wait_quiet_s, versions, budget_s=budget_s,
                          systems=systems, dtype=dtype)  # fmt: skip
    records = models.run_models(specs, threads, systems, repeats, budget_s, trials, db, say, context, wait_quiet_s,
                                target, batch, dtype=dtype)  # fmt: skip
    say(f"suite {suite} done in {time.perf_counter() - start:.0f} s")
    lines = report.host_lines(records) + [report.models_table(records, models.SYSTEMS)]
    _publish(say, lines, records, json_path, plot_path, partial(models_plot, systems=models.SYSTEMS))


def run_tlm_eval(suite, names, say, command, *, target, tlm_k, evo_trials, seed, tlm_seeds, lm_path, evo_from,
                 leave_out_hardware, json_path, plot_path) -> None:  # fmt: skip
    """tlm-eval (tlm_eval.py): the language model against evolutionary search on held-out
    workloads (with `leave_out_hardware`: a copy of it fine-tuned without this host's
    measurements); tlm_report.py makes the tables."""
    seeds = tlm_seeds or [seed]
    start = time.perf_counter()
    left_out = None
    if leave_out_hardware:
        lm_path, left_out = _leave_out_model(lm_path, say)
    cost_env = {"MINITC_COST_MODEL": left_out["cost_model"]} if left_out else {}
    try:
        with patch.dict(os.environ, cost_env):
            by_seed = tlm_eval.run_seeds(names, tlm_k, evo_trials, seeds, say, lm_path, evo_from, target)
    except KeyError as e:
        raise click.UsageError(e.args[0]) from None
    rows = by_seed[seeds[0]]
    click.echo(tlm_report.table(rows, tlm_k, evo_trials))
    if len(seeds) > 1:
        click.echo(f"\nTLM with {len(seeds)} seeds (the tables above: seed {seeds[0]}):")
        click.echo(tlm_report.seeds_table(by_seed, tlm_k, evo_trials))
    say(f"{suite} done in {time.perf_counter() - start:.0f} s")
    if json_path:
        run = {**run_stamp(command), **({"leave_out_hardware": left_out} if left_out else {})}
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
    description (tlm_eval.leave_out_model), kept in the user's cache directory. The tlm
    strategy then ranks with a cost model trained without it too (MINITC_COST_MODEL, unless the
    user set one)."""
    from minitc.lm.pipeline import user_model_path
    from minitc.target import hardware_fingerprint

    fingerprint = hardware_fingerprint("llvm")
    out = user_model_path().parent / f"lm-without-{fingerprint}.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = tlm_eval.leave_out_model(base, out, say=say)
    say(f"leave-out: wrote {out} ({meta['demonstrations']} programs, {meta['seconds']:.0f} s)")
    left_out = {"fingerprint": fingerprint, "base": str(base or "shipped"), "checkpoint": str(out)}
    if os.environ.get("MINITC_COST_MODEL"):
        say(f"leave-out: ranking with MINITC_COST_MODEL={os.environ['MINITC_COST_MODEL']}, as set")
        return str(out), {**left_out, "cost_model": os.environ["MINITC_COST_MODEL"]}
    cost = out.with_name(f"cost-without-{fingerprint}.pt")
    made = tlm_eval.leave_out_cost_model(cost, say=say)
    say(f"leave-out: wrote {cost} ({made['programs']} programs, {made['seconds']:.0f} s)")
    return str(out), {**left_out, "cost_model": str(cost)}


def run_runner_scaling(suite, workloads, say, command, *, trials, json_path) -> None:
    """runner-scaling (runner_scaling.py): programs measured per second, locally and on Ray."""
    from minitc.autotune.ray_nodes import import_ray
    from minitc.benchmarks import runner_scaling

    import_ray()  # no Ray: its message, before anything runs
    result = runner_scaling.run(trials, say)
    click.echo(report.scaling_table(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        say(f"wrote {json_path}")


def run_zoo(suite, names, say, command, *, threads, rounds, inductor) -> None:
    """The zoo (zoo_suite.py): each small model compiled, checked and timed; a markdown table."""
    import os

    from minitc.benchmarks.machine import cpu_name
    from minitc.benchmarks.zoo_suite import measure

    rows, load_before = [], os.getloadavg()[0]
    for name in names:
        rows.append(measure(name, threads, rounds, inductor))
        speeds = ", ".join(
            f"{n}T {t['speed']:.2f}x eager" + (f", {t['vs_inductor']:.2f}x Inductor" if "vs_inductor" in t else "")
            for n, t in rows[-1]["timing"].items()
        )
        click.echo(f"# {name}: {speeds}, {rows[-1]['error'] or 'ok'}")
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    when, counts = time.strftime("%Y-%m-%d"), ",".join(map(str, threads))
    click.echo(f"\n{cpu_name()}, threads {counts}, {when}, medians of {rounds} rounds, {load}\n")
    click.echo(report.zoo_table(rows, threads, inductor))


# ---------------------------------------------------------------------------------------------
# the table


def _select_models(names) -> list:
    from minitc.benchmarks import models_zoo

    return models_zoo.select(names)


def _select_gpu(suite: str, names) -> list:
    from minitc.benchmarks import gpu_suites

    return gpu_suites.select(suite, names)


def run_generate(suite, names, say, command, *, threads, rounds, inductor, prompt_len, new, json_path) -> None:
    """Greedy generation through the backend (generation.py): prefill and decode ms per token."""
    from minitc.benchmarks import generation
    from minitc.benchmarks.machine import cpu_name

    records = []
    for name in names:
        for n in threads:
            say(f"{name}: prompt {prompt_len}, {new} new tokens, {n} threads")
            records.append(generation.measure(name, prompt_len, new, n, rounds, inductor))
            ours = records[-1]["systems"]["minitc"]["decode_ms_per_token"]
            click.echo(f"# {name} at {n} threads: minitc decodes {ours:.2f} ms/token")
    click.echo(f"\n{cpu_name()}, {time.strftime('%Y-%m-%d')}, medians of {rounds} rounds\n")
    click.echo(generation.table(records))
    if json_path:
        stamp = {"cpu": cpu_name(), **run_stamp(command), "suite": suite}
        report.write_json([{**stamp, **r} for r in records], json_path)
        say(f"wrote {json_path}")


def run_sweep(suite, names, say, command, *, threads, timing_rounds, inductor, jobs, timeout_s, json_path, check,
              update) -> None:  # fmt: skip
    """The sweep (sweep.py): every architecture transformers registers, small, each exported,
    compiled with the templates, checked against eager and timed, in worker processes.
    --check compares with the pass list (benchmarks/sweep_pass.json), --update rewrites it;
    docs/sweep_page.py makes docs/sweep.md of the --json file."""
    import transformers

    from minitc.benchmarks import sweep
    from minitc.benchmarks.machine import cpu_name

    if len(threads) > 1:
        raise click.BadParameter("the sweep runs at one thread count", param_hint="--threads")
    start = time.perf_counter()
    rows = sweep.run(names, jobs, timeout_s, threads[0], timing_rounds, inductor, say)
    seconds = time.perf_counter() - start
    figures = sweep.summary(rows)
    click.echo(report.sweep_lines(figures, seconds))
    if json_path:
        run = {"cpu": cpu_name(), **run_stamp(command), "suite": suite, "threads": threads[0], "jobs": jobs}
        run["transformers"] = transformers.__version__
        with open(json_path, "w") as f:
            json.dump({"run": {**run, "seconds": round(seconds)}, "summary": figures, "rows": rows}, f, indent=1)
        say(f"wrote {json_path}")
    if update:
        sweep.write_pass_list(rows)
        say(f"wrote {sweep.PASS_LIST}")
    if check:
        if sweep.recorded_transformers() != transformers.__version__:
            say(f"the pass list is of transformers {sweep.recorded_transformers()}, this is {transformers.__version__}")
        recorded = sweep.read_pass_list()
        for model in sweep.gains(rows, recorded):
            say(f"{model} passes now: record it with --update")
        lost = sweep.regressions(rows, recorded)
        if lost:
            raise click.ClickException(f"{len(lost)} architecture(s) of the pass list fail now:\n" + "\n".join(lost))


def _select_sweep(names) -> list:
    from minitc.benchmarks.sweep_configs import architectures

    every = architectures()
    unknown = [n for n in names if n not in every]
    if unknown:
        raise KeyError(f"not model types of transformers' auto classes: {', '.join(unknown)}")
    return names or every


def _select_generate(names) -> list:
    from minitc.benchmarks import generation

    return generation.select(names)


def _select_zoo(names) -> list:
    from minitc.benchmarks import zoo_suite

    return zoo_suite.select(names)


def _runner_scaling_programs() -> int:
    from minitc.benchmarks.runner_scaling import PROGRAMS

    return PROGRAMS


def _all_cpus() -> str:
    import minitc as tc

    return str(tc.get_num_threads())


# the options of each kind of suite, in the order --help lists them (and the records name them)
CPU = ("workloads", "target", "threads", "repeats", "budget_s", "json_path", "plot_path", "wait_quiet_s", "no_machine")
CPU += ("quiet",)
TUNING = ("workloads", "threads", "trials", "strategies", "db", "seed", "cost_model", "repeats", "budget_s")
TUNING += ("json_path", "plot_path", "wait_quiet_s", "no_machine", "quiet")
GPU = ("workloads", "repeats", "budget_s", "tune_trials", "db", "json_path", "plot_path", "quiet")
MODELS = ("workloads", "target", "threads", "batch", "repeats", "budget_s", "trials", "db", "json_path", "plot_path")
MODELS += ("wait_quiet_s", "no_machine", "quiet", "dtype")
TLM_EVAL = ("workloads", "target", "tlm_k", "evo_trials", "seed", "tlm_seeds", "lm_path", "evo_from")
TLM_EVAL += ("leave_out_hardware", "json_path", "plot_path", "quiet")
CPU_TARGET = "The LLVM target minitc's kernels are built for, e.g. 'llvm -mcpu=znver2' (AVX2 code on an AVX-512 host); "
CPU_TARGET += "this host must be able to run its code."
TUNING_HELP = {"db": "One records database for all runs, kept (default: a fresh temporary one per run)."}
GPU_HELP = {"db": "With --tune: the records database the tuning writes, kept (default: a temporary one)."}
MODELS_HELP = {
    "workloads": "Comma-separated model names of models_zoo.py (default: resnet50, mobilenet_v2, bert-base, gpt2).",
    "target": "'llvm ...' (this CPU), or 'cuda' (every system on the GPU, float32 without TF32), 'cuda-sim'.",
    "trials": "Also run minitc tuned with this many trials (tc.compile(trials=N)).",
    "db": "With --trials: the records database of the tuned minitc, kept.",
}
TLM_HELP = {"target": "'llvm' (this CPU) or 'cuda' (the GPU here).", "seed": "Search seed (TLM's without --tlm-seeds)."}

SUITE_TABLE = {
    **{
        name: Suite(summary, run_cpu, CPU, partial(select, name), helps={"target": CPU_TARGET})
        for name, summary in (
            ("cpu-core", "minitc's default schedules against numpy and torch on the CPU (suites.py)."),
            ("smoke", "cpu-core's kinds of operator at small shapes, for a quick check."),
        )
    },
    "handwritten": Suite(
        "Operators written with tc.compute (no tc.ops): their default builds against numpy and torch (handwritten.py).",
        run_cpu,
        CPU,
        lambda names: pick(HANDWRITTEN, names, "handwritten"),
        helps={"target": CPU_TARGET},
    ),
    **{
        name: Suite(
            f"Tune {what} with each strategy; time the results against the template, numpy and torch.",
            run_tuning,
            TUNING,
            partial(lambda suite, names: pick(TUNE_SUITES[suite], names, suite), name),
            defaults={"threads": _all_cpus},
            helps=TUNING_HELP,
        )
        for name, what in (
            ("cpu-tune", "cpu-core's workloads"),
            ("smoke-tune", "three tiny workloads"),
            ("handwritten-tune", "the handwritten operators"),
        )
    },
    **{
        name: Suite(
            f"minitc's CUDA kernels against torch (cuBLAS/cuDNN) and Triton, float32 without TF32{what}.",
            run_gpu,
            GPU,
            partial(_select_gpu, name),
            defaults={"repeats": 100},
            helps=GPU_HELP,
        )
        for name, what in (("gpu-core", ""), ("gpu-smoke", ", tiny shapes"))
    },
    "models": Suite(
        "Whole models: minitc against PyTorch eager, torch.compile (Inductor) and ONNX Runtime.",
        run_models,
        MODELS,
        _select_models,
        defaults={"threads": "2", "trials": None},
        helps=MODELS_HELP,
    ),
    "tlm-eval": Suite(
        "The language model against evolutionary search on held-out workloads (docs/evaluation.md).",
        run_tlm_eval,
        TLM_EVAL,
        tlm_eval.select,
        helps=TLM_HELP,
    ),
    "runner-scaling": Suite(
        "Candidates measured per second by the local runner and by a Ray cluster of 1 and 2 nodes.",
        run_runner_scaling,
        ("trials", "json_path", "quiet"),
        defaults={"trials": _runner_scaling_programs},
        helps={"trials": "Programs measured per run."},
    ),
    "generate": Suite(
        "Greedy text generation through torch.compile(backend='minitc', dynamic=True) against eager (and Inductor).",
        run_generate,
        ("workloads", "threads", "rounds", "inductor", "prompt_len", "new", "json_path"),
        _select_generate,
        defaults={"threads": "2", "rounds": 3},
        helps={"inductor": "Time torch.compile(dynamic=True) (Inductor) too."},
    ),
    "sweep": Suite(
        "Every architecture transformers registers, small: exported, compiled, checked and timed (docs/sweep.md).",
        run_sweep,
        (
            "workloads",
            "threads",
            "timing_rounds",
            "inductor",
            "jobs",
            "timeout_s",
            "json_path",
            "check",
            "update",
            "quiet",
        ),
        _select_sweep,
        defaults={"threads": "2"},
        helps={
            "workloads": "Comma-separated model types (default: all that transformers registers).",
            "threads": "The thread count of each worker.",
        },
    ),
    "zoo": Suite(
        "The zoo's small models: compiled, checked and timed against eager (docs/models.md's table).",
        run_zoo,
        ("workloads", "threads", "rounds", "inductor"),
        _select_zoo,
        defaults={"threads": "2"},
    ),
}
