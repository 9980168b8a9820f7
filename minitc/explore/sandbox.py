"""Where the explorer runs code typed into the page: never in the server, always in a child of
a worker process (zygote.py) with a time limit and a memory cap.

    box = Sandbox()
    box.run("view", {"expression": ..., "schedule": ..., "view": "loops"}, timeout=10)
    -> {"ok": True, "text": ...}  or  {"ok": False, "error": {"kind": "TimeLimit", ...}}
    box.close()

The sandbox keeps `workers` worker processes, each answering one request at a time. A worker
enforces the time limit itself (it kills the job's child); should a worker not answer a few
seconds after that, it is killed and a fresh one started.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import time

from minitc.explore.zygote import error

DEFAULT_MEMORY = 4 << 30  # bytes of address space a job may add to what its worker started with
GRACE_S = 20.0  # beyond the time limit before a silent worker is replaced (covers its start-up)


class _Worker:
    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minitc.explore.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C in the terminal stops the server, which closes our stdin
        )
        self.buffer = b""

    def ask(self, request: dict, deadline: float):
        """The answer line, or None when the worker died or missed the deadline."""
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class Sandbox:
    """Runs explorer jobs in worker processes, at most `workers` at a time."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY, workers: int = 2):
        self.memory_bytes = memory_bytes
        self._idle = queue.Queue()
        self._workers = [_Worker() for _ in range(workers)]
        for w in self._workers:
            self._idle.put(w)

    def run(self, job: str, payload: dict, timeout: float) -> dict:
        """The job's result, or an error saying it ran out of time or died."""
        request = {"job": job, "payload": payload, "timeout": timeout, "memory": self.memory_bytes}
        worker = self._idle.get()
        answer = None
        try:
            answer = worker.ask(request, time.monotonic() + timeout + GRACE_S)
        finally:
            if answer is None:  # dead or stuck: replace it
                worker.close()
                self._workers.remove(worker)
                worker = _Worker()
                self._workers.append(worker)
            self._idle.put(worker)
        if answer is None:
            return error("WorkerDied", "the worker process stopped answering; a fresh one was started, try again")
        return answer

    def close(self) -> None:
        """Stop the worker processes, busy or not."""
        for w in list(self._workers):
            w.close()
