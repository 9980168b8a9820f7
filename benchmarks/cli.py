"""The `bench` command: `python -m minitc.benchmarks ...` and `minitc bench ...` are the same.

    python -m minitc.benchmarks --suite NAME [OPTIONS]     # or: ... NAME [OPTIONS]
    python -m minitc.benchmarks --suite NAME --help        # the suite's options
    python -m minitc.benchmarks [OPTIONS]                  # the suite cpu-core

Each suite of suite_commands.SUITE_TABLE is a command of its own with only its options: every
option is written once here (OPTIONS), and a suite's entry picks the ones it takes (with its
own default or help where they differ). An option of another suite is refused with the names
of the suites that take it.
"""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path

import click

from minitc.autotune.registry import strategy_names
from minitc.benchmarks.plots import require_matplotlib
from minitc.benchmarks.provenance import command_line
from minitc.benchmarks.runner import HOST_TARGET
from minitc.benchmarks.suite_commands import SUITE_TABLE, Suite
from minitc.errors import MinitcError

DEFAULT_SUITE = "cpu-core"
CONTEXT = {"help_option_names": ["-h", "--help"]}


def _integers(minimum: int = 1, empty: bool = False):
    """A callback reading comma-separated integers, each at least `minimum` (--threads, --batch)."""

    def parse(ctx, param, value) -> list:
        try:
            numbers = [int(x) for x in str(value).split(",") if x.strip()]
        except ValueError:
            raise click.BadParameter(f"expected comma-separated integers like 1,2, got {value!r}") from None
        if (not numbers and not empty) or any(n < minimum for n in numbers):
            raise click.BadParameter(f"{param.name} must be integers >= {minimum}, got {value!r}")
        return list(dict.fromkeys(numbers))

    return parse


def _strategies(ctx, param, value: str) -> list:
    names = [x.strip() for x in value.split(",") if x.strip()]
    unknown = [n for n in names if n not in strategy_names()]
    if not names or unknown:
        raise click.BadParameter(f"expected a comma-separated list of {', '.join(strategy_names())}, got {value!r}")
    return list(dict.fromkeys(names))


def _option(*declarations, help: str = "", **settings) -> tuple:
    """(declarations, settings) of a click.Option; a default is shown in --help."""
    if settings.get("default") not in (None, "") and not settings.get("is_flag"):
        settings["show_default"] = True
    return list(declarations), dict(settings, help=help)


INTS, FLOATS = click.IntRange(min=1), click.FloatRange(min=0)
FILE, OLD_FILE = click.Path(dir_okay=False, writable=True), click.Path(exists=True, dir_okay=False)

# Every option of every suite, by name. A suite's entry may give its own default and help
# (suite_commands.Suite.defaults, .helps).
OPTIONS = {
    "workloads": _option("--workloads", default="", help="Comma-separated workload names of the suite (default: all)."),
    "target": _option("--target", default=HOST_TARGET),
    "threads": _option("--threads", default="1,2", callback=_integers(), help="Thread counts to run, comma-separated."),
    "batch": _option("--batch", default="1", callback=_integers(), help="Batch sizes to run, e.g. 1,8."),
    "dtype": _option(
        "--dtype",
        default="fp32",
        type=click.Choice(("fp32", "bf16", "int8")),
        help="Precision: bf16 (minitc dtype='bfloat16'; eager and Inductor under torch.autocast) or int8 "
        "(minitc dtype='int8'; ONNX Runtime after quantize_dynamic).",
    ),
    "repeats": _option(
        "--repeats",
        default=10,
        type=INTS,
        help="Timed samples per implementation (slow calls get fewer, never under 3).",
    ),
    "budget_s": _option(
        "--budget",
        "budget_s",
        default=2.0,
        type=FLOATS,
        help="Seconds of timing per implementation, workload and thread count.",
    ),
    "json_path": _option("--json", "json_path", type=FILE, help="Write the records as JSON."),
    "plot_path": _option(
        "--plot", "plot_path", type=FILE, help="Write a chart (PNG); needs matplotlib: pip install 'minitc[plot]'."
    ),
    "wait_quiet_s": _option(
        "--wait-quiet",
        "wait_quiet_s",
        default=0.0,
        type=FLOATS,
        help="On a shared machine: before the machine measurement and each row, wait up to this many seconds "
        "for other processes to go quiet.",
    ),
    "no_machine": _option("--no-machine", is_flag=True, help="Skip measuring peak FMA, bandwidth and launch overhead."),
    "quiet": _option("-q", "--quiet", is_flag=True, help="No progress lines on stderr."),
    "trials": _option("--trials", default=64, type=INTS, help="Measured candidates per workload and strategy."),
    "strategies": _option(
        "--strategies",
        default="random,evolutionary,tlm",
        callback=_strategies,
        help=f"Search strategies to compare, of {', '.join(strategy_names())}.",
    ),
    "db": _option("--db", type=click.Path(dir_okay=False), help="A records database, kept."),
    "seed": _option("--seed", default=0, type=int, help="Search seed."),
    "cost_model": _option(
        "--cost-model",
        type=click.Choice(("default", "random")),
        default="default",
        help="The evolutionary search's cost model (default_cost_model() or random scores).",
    ),
    "tune_trials": _option(
        "--tune",
        "tune_trials",
        default=0,
        type=click.IntRange(min=0),
        help="Tune each minitc kernel with this many trials (tc.tune, target cuda) first.",
    ),
    "tlm_k": _option("--tlm-k", default="1,10,32,64", callback=_integers(), help="Measured programs of TLM to report."),
    "evo_trials": _option(
        "--evo-trials", default="64,256,1000", callback=_integers(), help="Evolutionary budgets to compare with."
    ),
    "tlm_seeds": _option(
        "--tlm-seeds",
        default="",
        callback=_integers(minimum=0, empty=True),
        help="Run TLM with each of these comma-separated seeds (evolutionary search once, with --seed) and add "
        "a table of the geomeans per seed and their median.",
    ),
    "lm_path": _option("--lm", "lm_path", type=OLD_FILE, help="The model (default: the shipped one)."),
    "evo_from": _option(
        "--evo-from", type=OLD_FILE, help="Reuse the evolutionary runs of an earlier --json file; run only TLM again."
    ),
    "leave_out_hardware": _option(
        "--leave-out-hardware",
        is_flag=True,
        help="First fine-tune a copy of the model (--lm, default the shipped one) on the dataset (lm/data) "
        "without this host's hardware description, then evaluate that copy.",
    ),
    "rounds": _option(
        "--rounds", default=7, type=INTS, help="Rounds of the systems in turn; each figure is the median over them."
    ),
    "inductor": _option("--inductor", is_flag=True, help="Time torch.compile (Inductor, freezing) too."),
    "prompt_len": _option("--prompt-len", default=128, type=click.IntRange(min=1), help="Tokens of the prompt."),
    "new": _option("--new", default=64, type=click.IntRange(min=2), help="Tokens to generate."),
    "timing_rounds": _option(
        "--rounds", "timing_rounds", default=3, type=click.IntRange(min=0), help="Timing rounds (0: no timing)."
    ),
    "jobs": _option("--jobs", default=1, type=INTS, help="Worker processes at a time."),
    "timeout_s": _option(
        "--timeout",
        "timeout_s",
        default=180.0,
        type=FLOATS,
        help="Seconds a model may take before its worker is killed.",
    ),
    "check": _option("--check", is_flag=True, help="Exit 1 if an architecture of the pass list is lower now."),
    "update": _option("--update", is_flag=True, help="Write the pass list from this run."),
}


def flag_of(name: str) -> str:
    """The long flag of an option (`--budget` for budget_s)."""
    return max((d for d in OPTIONS[name][0] if d.startswith("-")), key=len)


def make_option(name: str, suite: Suite) -> click.Option:
    """The click option `name` as `suite` takes it (its default and help where it has its own)."""
    declarations, settings = OPTIONS[name]
    settings = dict(settings)
    if name in suite.defaults:
        settings["default"] = suite.defaults[name]
    if name in suite.helps:
        settings["help"] = suite.helps[name]
    return click.Option(declarations, **settings)


def _and(names: list) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class SuiteCommand(click.Command):
    """One suite's command: an option that only other suites take is refused by name."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            takes = [n for n, s in SUITE_TABLE.items() if any(e.option_name in OPTIONS[o][0] for o in s.options)]
            if not takes:
                raise
            plural = "s" if len(takes) > 1 else ""
            raise click.UsageError(f"{e.option_name} applies to the suite{plural} {_and(takes)}, not {self.name}", ctx)


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


def _run(name: str, suite: Suite, **options) -> None:
    """What every suite's command does before its runner: check the output paths and the plot's
    matplotlib, pick the workloads named, and turn MinitcErrors into one-line messages."""
    ctx = click.get_current_context()
    check_output(options.get("json_path"), "--json")
    check_output(options.get("plot_path"), "--plot")
    names = [n.strip() for n in options.pop("workloads", "").split(",") if n.strip()]
    try:
        if options.get("plot_path"):
            require_matplotlib()
        workloads = suite.select(names) if suite.select else None
    except (KeyError, RuntimeError) as e:
        raise click.UsageError(e.args[0]) from None
    say = (lambda msg: None) if options.pop("quiet", False) else (lambda msg: click.echo(msg, err=True))
    try:
        suite.run(name, workloads, say, command_line(ctx), **options)
    except MinitcError as e:  # no GPU, no Ray, an unknown target, ...
        raise click.ClickException(str(e)) from None


def suite_command(name: str, suite: Suite) -> SuiteCommand:
    text = f"{suite.summary}\n\n{inspect.cleandoc(suite.run.__doc__ or '')}"
    params = [make_option(o, suite) for o in suite.options]
    return SuiteCommand(
        name,
        params=params,
        callback=partial(_run, name, suite),
        help=text,
        short_help=suite.summary,
        context_settings=CONTEXT,
    )


class SuiteGroup(click.Group):
    """`bench`: the suite named by `--suite NAME` (anywhere on the line) or first; cpu-core when
    none is named."""

    def parse_args(self, ctx, args):
        args = list(args)
        for i, arg in enumerate(args):
            if arg == "--suite" or arg.startswith("--suite="):
                name = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else None)
                if not name:
                    raise click.UsageError(f"--suite needs a name: {', '.join(self.commands)}", ctx)
                args = [name] + args[:i] + args[i + (1 if "=" in arg else 2) :]
                break
        else:
            if not args or (args[0].startswith("-") and args[0] not in CONTEXT["help_option_names"]):
                args = [DEFAULT_SUITE] + args
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx, args):
        if args[0] not in self.commands:
            raise click.UsageError(f"unknown suite {args[0]!r}; available: {', '.join(self.commands)}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        with formatter.section("Suites (--suite NAME --help: a suite's options)"):
            formatter.write_dl([(name, suite.summary) for name, suite in SUITE_TABLE.items()])
        with formatter.section("Options of each suite"):
            formatter.write_dl([(n, " ".join(flag_of(o) for o in s.options)) for n, s in SUITE_TABLE.items()])


@click.group(
    "bench",
    cls=SuiteGroup,
    context_settings=CONTEXT,
    options_metavar="",
    subcommand_metavar="[--suite] SUITE [OPTIONS]",
    commands=[suite_command(name, suite) for name, suite in SUITE_TABLE.items()],
)
def bench():
    """Benchmark minitc on a suite of workloads: against numpy and torch (cpu-core, the default,
    and smoke), tuned (cpu-tune, smoke-tune), on the GPU against torch and Triton (gpu-core,
    gpu-smoke), whole models (models, zoo), the language model's search (tlm-eval) and the
    runners (runner-scaling). Each suite takes only its own options; --json writes its
    records, --plot draws them."""


def main() -> None:
    bench(prog_name="python -m minitc.benchmarks")
