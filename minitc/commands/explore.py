"""`minitc explore`: a local compiler-explorer page for schedules (minitc/explore/)."""

from __future__ import annotations

import errno
import webbrowser

import click

HELP = """Open a local compiler-explorer page for schedules.

Pick an operator and shape (or type a tensor expression), edit the schedule as Python on the
left, and see its loop nest, LLVM IR, assembly or CUDA C on the right as you type. Run
compiles the kernel, checks it against numpy and times both, showing the rate as a share of
this machine's peak. docs/explore.md describes the page.

The server listens on 127.0.0.1 only and answers only API calls that carry its token, a
random secret made at each start and part of the URL it prints and opens (open that URL, with
its #token=...); the code typed into the page runs in a separate process with a time limit and
a memory cap. Stop it with Ctrl-C.

\b
Examples:
  minitc explore                     # http://127.0.0.1:8765/ in the browser
  minitc explore --port 0 --no-browser
  minitc explore --token my-secret   # a fixed token, for scripts
"""


@click.command("explore", help=HELP, short_help="A local compiler-explorer page: schedule, loop nest, IR, timing.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port; 0 picks a free one."
)
@click.option("--no-browser", is_flag=True, help="Print the URL without opening a browser.")
@click.option(
    "--token",
    metavar="TEXT",
    help="The secret every API call must carry (for scripts and tests); default: a new random one at each start.",
)
def explore(port, no_browser, token):
    from minitc.explore.server import ExploreServer

    if token is not None and not token.strip():
        raise click.BadParameter("must not be empty", param_hint="--token")
    try:
        server = ExploreServer(port=port, token=token)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise click.ClickException(f"port {port} is in use; pass --port 0 for a free one") from None
        raise
    click.echo(f"minitc explore: {server.token_url}  (Ctrl-C to stop)")
    if not no_browser:
        webbrowser.open(server.token_url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()
