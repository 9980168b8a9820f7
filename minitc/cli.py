"""The `minitc` command line: a click group whose subcommands live in their own modules.

    minitc bench --suite cpu-core --threads 1,2 --json out.json
    minitc tune matmul --shape 512,512,512 --trials 64 --strategy evolutionary
    minitc show                      # the workloads in the tuning records database

To add a command, write a click command anywhere and name it in COMMANDS as
"module:attribute"; it is imported only when used (so `minitc --help` stays fast and one
command's heavy imports do not slow down another).
"""

from __future__ import annotations

import importlib

import click

COMMANDS = {
    "bench": ("minitc.benchmarks.cli:bench", "Benchmark minitc against numpy and torch on a suite."),
    "tune": ("minitc.commands.tune:tune", "Tune an operator (tc.tune) and compare with numpy and torch."),
    "show": ("minitc.commands.show:show", "Show tuning records: workloads, best schedule, loop nest, code."),
    "lm": ("minitc.lm.cli:lm", "The tensor language model: generate data, pretrain, measure, fine-tune."),
}


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when the subcommand is run."""

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx, name):
        if name in COMMANDS:
            module, _, attr = COMMANDS[name][0].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        # Listing help text must not import every command: use the short help in COMMANDS.
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        rows += [(n, c.get_short_help_str()) for n, c in sorted(self.commands.items()) if n not in COMMANDS]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="minitc")
def main():
    """minitc: a small tensor compiler."""
