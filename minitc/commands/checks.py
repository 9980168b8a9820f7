"""Checks `minitc tune` runs before it measures anything: the environment, the memory the
workload needs, the output paths, the records database and the language model. Each failure is
a click error whose message names the argument (or variable) at fault and what to do, so a bad
setting never surfaces as a traceback, or after minutes of tuning.

    check_threads()                             # MINITC_NUM_THREADS
    check_memory(call)                          # the tensors of `call`, and their copies
    check_output(json_path, "--json")           # creatable and writable, nothing written yet
    db_path = check_database(db)                # opens (or creates) the records file
    check_model(lm_path)                        # loads the tlm checkpoint
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from minitc.autotune.database import Database, DatabaseError, default_path
from minitc.backends.llvm.runtime import default_num_threads
from minitc.benchmarks.cli import check_output  # noqa: F401 - one of the checks, shared with minitc bench
from minitc.errors import MinitcError

GB = 1e9
# Tuning and the final timing hold about five copies of the workload's tensors at once (the
# runner process's inputs and outputs, the reference outputs, the pickles sent to it, the
# comparison's buffers); measured at 5.1x for relu 8192x8192. BASE_BYTES: the processes' own.
COPIES = 5
BASE_BYTES = 1 << 30


class Count(click.ParamType):
    """A whole number in [minimum, maximum] (click's IntRange calls '2.5' an invalid range)."""

    name = "integer"

    def __init__(self, minimum: int = 1, maximum: int | None = None):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        try:
            n = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
        except ValueError:
            n = None
        if n is None or n < self.minimum or (self.maximum is not None and n > self.maximum):
            upto = f" and <= {self.maximum}" if self.maximum is not None else ""
            self.fail(f"expected a whole number >= {self.minimum}{upto}, got {value!r}", param, ctx)
        return n


def check_threads() -> None:
    """MINITC_NUM_THREADS parses to a thread count (the runtime reads it on first use)."""
    try:
        default_num_threads()
    except MinitcError as e:
        raise click.UsageError(str(e)) from None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit, if it has one (v2, else v1)."""
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:
            return max(cap - used, 0)
    return None


def available_memory() -> int | None:
    """Bytes of memory available to new allocations: /proc/meminfo's MemAvailable (capped by a
    cgroup limit), else os.sysconf's available pages; None where neither is known."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    room = _cgroup_room()
    return avail if room is None else min(avail, room)


def memory_needed(call) -> tuple:
    """(bytes the run needs, bytes of the workload's own tensors) for a spec.OpCall."""
    tensors = call.bytes()
    return COPIES * tensors + BASE_BYTES, tensors


def check_memory(call, available: int | None = None) -> None:
    """Refuse a workload whose tensors (and the copies tuning and timing make) do not fit in
    the memory available now."""
    available = available_memory() if available is None else available
    need, tensors = memory_needed(call)
    if available is None or need <= available:
        return
    raise click.BadParameter(
        f"{call.label()} needs about {need / GB:.1f} GB of memory (its tensors take {tensors / GB:.1f} GB, and "
        f"tuning and timing hold about {COPIES} copies of them), but {available / GB:.1f} GB is available; "
        "use a smaller --shape",
        param_hint="--shape",
    )


def check_database(db) -> str:
    """Open (or create) the records database now; returns its path."""
    path = db or default_path()
    source = "--db" if db else ("MINITC_DB" if os.environ.get("MINITC_DB") else "the default records database")
    try:
        Database(path).close()
    except DatabaseError as e:
        raise click.BadParameter(str(e), param_hint=source) from None
    return str(path)


def check_model(lm_path) -> None:
    """Load the tlm strategy's checkpoint (--lm, $MINITC_LM, the user's or the shipped one)."""
    from minitc.lm.pipeline import load_model  # torch: only when the tlm strategy is used

    source = "--lm" if lm_path else ("MINITC_LM" if os.environ.get("MINITC_LM") else "the default language model")
    try:
        load_model(lm_path)
    except MinitcError as e:
        fix = "pass a working checkpoint with --lm, unset MINITC_LM (the shipped model), or use --strategy evolutionary"
        raise click.BadParameter(f"{e}; {fix}", param_hint=source) from None
