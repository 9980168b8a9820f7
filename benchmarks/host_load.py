"""CPU time other processes take while a block runs (Linux /proc; None elsewhere).

    with ForeignLoad() as load:
        measure()
    load.cpus        # CPUs' worth of time taken by processes outside this process tree

On a 2-core host one busy process of someone else doubles a 2-thread kernel's time. The
measuring runner is a child process and builds run in children too, so minitc.timing's
BackgroundLoad (all CPUs' busy time minus this process's own) would count them as load; this
counts only the processes that are not this one or its descendants. A process that ends within
the block is missed, so the figure is a lower bound.
"""

from __future__ import annotations

import os
import time


def _processes() -> dict | None:
    """{pid: (parent pid, CPU seconds)} of every process, or None without /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        out[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _descendants(procs: dict, root: int) -> set:
    children: dict = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    mine, todo = set(), [root]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += children.get(pid, [])
    return mine


class ForeignLoad:
    """`cpus`: CPU seconds per second of wall time that processes outside this process tree took
    during the block."""

    def __enter__(self):
        self.cpus = None
        self._start = (_processes(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        before, t0 = self._start
        after, wall = _processes(), time.perf_counter() - t0
        if before is not None and after is not None and wall > 0:
            mine = _descendants(after, os.getpid()) | _descendants(before, os.getpid())
            taken = sum(cpu - before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if pid not in mine)
            self.cpus = max(0.0, taken / wall)
        return False
