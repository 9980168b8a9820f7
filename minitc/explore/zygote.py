"""The explorer's worker process (`python -m minitc.explore.zygote`, started by sandbox.py): it
imports minitc once, then for each request on stdin forks a child that runs one job
(worker.py) under a memory cap and a time limit, and writes the answer as one JSON line.

Request: {"job": "view", "payload": {...}, "timeout": 10, "memory": 4294967296}
Answer:  the job's result, or {"ok": false, "error": {"kind": "TimeLimit", ...}}

Forking per job keeps the worker clean (nothing the user's code changes survives the job) and
makes a job start in milliseconds. The child starts a session of its own so that the whole
process group, with anything the code started, is killed at the time limit.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import signal
import sys
import time

from minitc.explore.worker import run_job  # imported once here, inherited by every child

_answers_fd = None  # the worker's answer stream, closed in each child


def _address_space() -> int:
    """This process's virtual memory size in bytes (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _finite(value):
    """JSON for a browser: no NaN or infinity (JSON.parse refuses them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _plain(value):
    """numpy scalars as Python numbers; anything else as its text."""
    return value.item() if hasattr(value, "item") else str(value)


def error(kind: str, message: str) -> dict:
    return {"ok": False, "error": {"kind": kind, "message": message, "part": None, "line": None}}


def _child(request: dict, out_fd: int) -> None:
    """In the forked child: limits, the job, the answer on out_fd; never returns."""
    code = 0
    try:
        os.setsid()
        if _answers_fd is not None:
            os.close(_answers_fd)  # the user's code must not write into the answers either
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the user's code must not read the request stream
        os.dup2(devnull, 1)
        limit = _address_space() + int(request.get("memory") or 4 << 30)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        answer = run_job(request["job"], request.get("payload") or {})
        data = json.dumps(_finite(answer), default=_plain).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view) :]
    except BaseException:  # noqa: BLE001 - the parent reports a child that gives no answer
        code = 1
    os._exit(code)


def _read_all(fd: int, deadline: float):
    """Bytes from fd until EOF, or None when the deadline passes first."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def run_forked(request: dict) -> dict:
    timeout = float(request.get("timeout") or 10)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(request, w)
    os.close(w)
    try:
        data = _read_all(r, time.monotonic() + timeout)
    finally:
        os.close(r)
        try:
            os.killpg(pid, signal.SIGKILL)  # the child and whatever it started
        except (ProcessLookupError, PermissionError):
            pass
        _, status = os.waitpid(pid, 0)
    if data is None:
        return error(
            "TimeLimit",
            f"stopped after the time limit of {timeout:g} s: an endless loop in the code, "
            "or a kernel or shape too large for the explorer",
        )
    if data:
        return json.loads(data)
    if os.WIFSIGNALED(status):
        memory = int(request.get("memory") or 4 << 30) / 2**30
        return error(
            "WorkerDied",
            f"the job died ({signal.Signals(os.WTERMSIG(status)).name}) before answering; it may have run out "
            f"of memory (the limit is {memory:g} GiB) or crashed",
        )
    return error("WorkerDied", f"the job exited (code {os.WEXITSTATUS(status)}) before answering")


def main() -> None:
    global _answers_fd
    _answers_fd = os.dup(1)
    out = os.fdopen(_answers_fd, "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # only answers go to the answer stream
    for line in sys.stdin.buffer:
        try:
            answer = run_forked(json.loads(line))
        except Exception as e:  # noqa: BLE001 - a malformed request must not end the worker
            answer = error("WorkerError", f"{type(e).__name__}: {e}")
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us by closing stdin
    main()
