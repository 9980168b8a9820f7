"""The sweep (issue 53): every architecture transformers registers (sweep_configs.py), each
in a worker process (sweep_row.py), so that a crash or a hang is one row, not the end of the
sweep.

    rows = run(names, jobs=2, timeout_s=120, threads=1, rounds=3, inductor=False, say=print)
    lost = regressions(rows, read_pass_list())   # [] where nothing passing before fails now

Each worker compiles model after model (minitc's kernel cache makes the later ones faster);
one that crashes or runs past `timeout_s` on a model is killed, the model's row says so
("crash", "timeout"), and a fresh worker takes the next model.

The pass list (benchmarks/sweep_pass.json) records the status of every architecture that
compiled and matched eager: "pass", or "fallback" where minitc fell back to PyTorch on an
internal error. CI runs the whole sweep and fails on any architecture that is lower now.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from minitc.benchmarks.sweep_row import PASSING

PASS_LIST = Path(__file__).resolve().parent / "sweep_pass.json"
WORKER = "minitc.benchmarks.sweep_row"


def worker_command(threads: int, rounds: int, inductor: bool) -> list:
    command = [sys.executable, "-m", WORKER, "--threads", str(threads), "--rounds", str(rounds)]
    return command + (["--inductor"] if inductor else [])


@dataclass
class Worker:
    """A worker process, the model it is on and since when."""

    process: subprocess.Popen
    stderr: object  # a temporary file: the crash report's lines
    model: str | None = None
    since: float = 0.0
    buffer: bytes = field(default=b"")

    @classmethod
    def start(cls, threads: int, rounds: int, inductor: bool) -> Worker:
        stderr = tempfile.TemporaryFile()
        process = subprocess.Popen(
            worker_command(threads, rounds, inductor),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,  # its own process group: killed with whatever it started
        )
        return cls(process, stderr)

    def give(self, model: str) -> None:
        self.model, self.since = model, time.monotonic()
        self.process.stdin.write(f"{model}\n".encode())
        self.process.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.stderr.close()

    def crash_reason(self) -> str:
        """The exit status, and minitc's crash report or else the last line of stderr."""
        code = self.process.wait()
        self.stderr.seek(0)
        lines = [x for x in self.stderr.read().decode(errors="replace").splitlines() if x.strip()]
        report = [x for x in lines if x.startswith("minitc: fatal signal")] or lines[-1:]
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return f"worker {status}" + (f": {report[-1][:300]}" if report else "")


def run(names: list, jobs: int, timeout_s: float, threads: int, rounds: int, inductor: bool, say) -> list:
    """The rows of the architectures `names`, in order, from `jobs` workers at a time."""
    rows, todo, workers = {}, list(names), []
    selector = selectors.DefaultSelector()
    try:
        while todo or workers:
            while todo and len(workers) < jobs:
                worker = Worker.start(threads, rounds, inductor)
                workers.append(worker)
                selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
                worker.give(todo.pop(0))
            for key, _ in selector.select(timeout=1.0):
                worker = key.data
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    worker.buffer += chunk
                    while b"\n" in worker.buffer:
                        line, worker.buffer = worker.buffer.split(b"\n", 1)
                        row = json.loads(line)
                        row["seconds"] = round(time.monotonic() - worker.since, 1)
                        rows[worker.model] = _done(row, len(rows), len(names), say)
                        if todo:
                            worker.give(todo.pop(0))
                        else:
                            worker.model = None
                    continue
                failed = {"model": worker.model, "status": "crash", "error": worker.crash_reason()}
                _retire(worker, workers, selector, rows, failed, names, say)
            for worker in [w for w in workers if w.model is None]:
                _retire(worker, workers, selector, rows, None, names, say)
            for worker in [w for w in workers if w.model and time.monotonic() - w.since > timeout_s]:
                failed = {"model": worker.model, "status": "timeout", "error": f"no row within {timeout_s:g} s"}
                _retire(worker, workers, selector, rows, failed, names, say)
    finally:
        for worker in workers:
            worker.kill()
    return [rows[n] for n in names]


def _retire(worker, workers, selector, rows, failed, names, say) -> None:
    """Stop `worker`; `failed` is the row of the model it was on, if any."""
    selector.unregister(worker.process.stdout)
    workers.remove(worker)
    worker.kill()
    if failed:
        failed["seconds"] = round(time.monotonic() - worker.since, 1)
        rows[failed["model"]] = _done(failed, len(rows), len(names), say)


def _done(row: dict, done: int, total: int, say) -> dict:
    what = row["status"] + (f": {row['error']}" if row.get("error") else "")
    speed = f", {row['speed']:.2f}x eager" if row.get("speed") else ""
    say(f"[{done + 1}/{total}] {row['model']}: {what[:160]}{speed} ({row['seconds']:.1f} s)")
    return row


# --- the pass list --------------------------------------------------------------------------
RANK = {"pass": 2, "fallback": 1}  # anything else: 0


def read_pass_list(path=PASS_LIST) -> dict:
    """{model type: "pass" or "fallback"} as recorded."""
    return json.loads(Path(path).read_text())["architectures"]


def pass_list(rows: list) -> dict:
    return {r["model"]: r["status"] for r in sorted(rows, key=lambda r: r["model"]) if r["status"] in PASSING}


def recorded_transformers(path=PASS_LIST) -> str:
    """The transformers version the pass list was recorded with (another may register others)."""
    return json.loads(Path(path).read_text())["transformers"]


def write_pass_list(rows: list, path=PASS_LIST) -> None:
    import transformers

    text = {"about": "the sweep's passing architectures (benchmarks/sweep.py); CI fails where one is lower"}
    text["transformers"] = transformers.__version__
    Path(path).write_text(json.dumps({**text, "architectures": pass_list(rows)}, indent=1) + "\n")


def regressions(rows: list, recorded: dict) -> list:
    """A line for each architecture of `rows` whose status ranks below the recorded one."""
    now = {r["model"]: r for r in rows}
    lost = []
    for model, status in sorted(recorded.items()):
        row = now.get(model)
        if row is not None and RANK.get(row["status"], 0) < RANK[status]:
            lost.append(f"{model}: was {status}, now {row['status']}: {row.get('error') or ''}".rstrip(": "))
    return lost


def gains(rows: list, recorded: dict) -> list:
    """The architectures of `rows` that rank above their recorded status."""
    return [r["model"] for r in rows if RANK.get(r["status"], 0) > RANK.get(recorded.get(r["model"]), 0)]


# --- figures --------------------------------------------------------------------------------
# the statuses of exported architectures; a crash or a timeout counts as one (the worse reading)
EXPORTED = ("pass", "fallback", "compile", "mismatch", "crash", "timeout", "error")


def summary(rows: list) -> dict:
    """Counts by status; pass rate of the exported architectures; geomeans of the speeds."""
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    exported = [r for r in rows if r["status"] in EXPORTED]
    passed = [r for r in rows if r["status"] in PASSING]
    return {
        "architectures": len(rows),
        "counts": counts,
        "exported": len(exported),
        "passed": len(passed),
        "pass_rate": len(passed) / len(exported) if exported else None,
        "geomean_vs_eager": geomean([r.get("speed") for r in passed]),
        "geomean_vs_inductor": geomean([r.get("vs_inductor") for r in passed]),
    }


def geomean(values: list):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None
