"""The `minitc` command line: a click group whose subcommands live in their own modules.

    minitc bench --suite cpu-core --threads 1,2 --json out.json
    minitc tune matmul --shape 512,512,512 --trials 64 --strategy evolutionary
    minitc show                      # the workloads in the tuning records database

To add a command, write a click command anywhere and name it in COMMANDS as
"module:attribute"; it is imported only when used (so `minitc --help` stays fast and one
command's heavy imports do not slow down another).

No command prints a Python traceback: a MinitcError is shown as its message, a warning as one
line, and an unexpected exception as a short note whose traceback is saved to a file to report.
"""

from __future__ import annotations

import contextlib
import importlib
import tempfile
import traceback
import warnings

import click

from minitc.errors import MinitcError

COMMANDS = {
    "bench": ("minitc.benchmarks.cli:bench", "Benchmark minitc against numpy and torch on a suite."),
    "tune": ("minitc.commands.tune:tune", "Tune an operator (tc.tune) and compare with numpy and torch."),
    "compile": (
        "minitc.commands.compile:compile_cmd",
        "Compile (and tune) a whole PyTorch model; time it against torch.",
    ),
    "generate": (
        "minitc.commands.generate:generate",
        "Generate text greedily through the minitc backend; time prefill and decode against eager.",
    ),
    "explain": (
        "minitc.commands.explain:explain_cmd",
        "Explain a schedule step by step: each primitive, why, the loop nest after it.",
    ),
    "explore": (
        "minitc.commands.explore:explore",
        "A local compiler-explorer page: schedule, loop nest, IR, assembly, timing.",
    ),
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

    def invoke(self, ctx):
        with plain_warnings():
            try:
                return super().invoke(ctx)
            except (click.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except MinitcError as e:
                raise click.ClickException(str(e)) from None
            except OSError as e:  # a file or folder the user named
                where = f"{e.filename}: " if e.filename else ""
                raise click.ClickException(f"{where}{e.strerror or e}; check the path and its permissions") from None
            except MemoryError:
                raise click.ClickException("out of memory: use smaller shapes, or free memory and retry") from None
            except Exception as e:  # noqa: BLE001 - a bug: report it without a traceback on screen
                path = _save_traceback()
                raise click.ClickException(
                    f"internal error ({type(e).__name__}: {e}); this is a bug in minitc, please report it "
                    f"with the command line and the traceback saved in {path}"
                ) from None

    def format_commands(self, ctx, formatter):
        # Listing help text must not import every command: use the short help in COMMANDS.
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        rows += [(n, c.get_short_help_str()) for n, c in sorted(self.commands.items()) if n not in COMMANDS]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@contextlib.contextmanager
def plain_warnings():
    """Show warnings as one line on stderr (`warning: ...`), without the source line of the
    code that issued them."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        click.echo(f"warning: {message}", err=True)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _save_traceback() -> str:
    with tempfile.NamedTemporaryFile("w", prefix="minitc-error-", suffix=".txt", delete=False) as f:
        f.write(traceback.format_exc())
    return f.name


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="minitc")
def main():
    """minitc: a small tensor compiler."""
