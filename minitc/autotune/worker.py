"""Worker processes for building and measuring candidates.

A worker is a plain `python -c "...worker import main; main()"` subprocess (not `-m`, which warns
that the package imported the module first) that answers pickled requests
framed on its stdin/stdout. Unlike multiprocessing's spawn, it never re-imports the user's main
script, so `tc.tune(...)` works from any script or notebook. Whatever the kernel or a library
prints goes to stderr, never into the protocol stream.

What a worker can do is what its clients register: `register_handler("build", build_candidate)`
at the top of runner.py, gpu_runner.py. A worker process imports the modules of the handlers
registered in its parent when it starts (and a handler's module when a request names a handler
registered later), so this module imports none of its clients.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys

from minitc.errors import MinitcError

_HEADER = struct.Struct("<Q")
POSTED_TIMEOUT = 120.0
HANDLERS: dict = {}  # request name -> function, filled by the worker's clients


def register_handler(name: str, fn):
    """Let worker processes answer requests named `name` with `fn(*args)` (a module-level
    function, registered when its module is imported); returns `fn`."""
    HANDLERS[name] = fn
    return fn


def _request(name: str, args: tuple) -> tuple:
    fn = HANDLERS.get(name)
    return (fn.__module__ if fn is not None else None, name, args)


class WorkerCrashed(MinitcError):
    pass


class WorkerTimeout(MinitcError):
    pass


def _write(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    import time

    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise WorkerTimeout("no answer in time")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WorkerCrashed("the worker process exited")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Worker:
    """One worker subprocess; `call(name, *args, timeout=...)` runs `HANDLERS[name](*args)` in it
    (the handler registered under `name`)."""

    def __init__(self, env: dict | None = None):
        self.env = env
        self.proc = None
        self._posted = 0  # answers of post()ed requests not read yet

    def post(self, name: str, *args) -> None:
        """Send a request without waiting: its work (a process start, a GPU context) overlaps the
        caller's. The next `call` reads its answer first, and raises its error if it failed."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
            self._posted = 0
        _write(self.proc.stdin, _request(name, args))
        self._posted += 1

    def start(self) -> None:
        env = dict(os.environ, **(self.env or {}), MINITC_WORKER_PARENT=str(os.getpid()))
        modules = sorted({fn.__module__ for fn in HANDLERS.values()})  # imported as it starts
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from minitc.autotune.worker import main; main()", *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def call(self, name: str, *args, timeout: float | None = None):
        import time

        if self.proc is None or self.proc.poll() is not None:
            self.start()
            self._posted = 0
        try:
            while self._posted:  # a posted request's answer (a setup: up to POSTED_TIMEOUT seconds)
                self._posted -= 1
                status, value = self._read(time.monotonic() + POSTED_TIMEOUT)
                if status == "error":
                    raise MinitcError(value)
            deadline = None if timeout is None else time.monotonic() + timeout
            _write(self.proc.stdin, _request(name, args))
            status, value = self._read(deadline)
        except (BrokenPipeError, WorkerCrashed):
            code = self.proc.wait()
            self.proc = None
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise WorkerCrashed(f"the worker process died ({how})") from None
        except WorkerTimeout:
            self.kill()
            raise
        if status == "error":
            raise MinitcError(value)
        return value

    def _read(self, deadline: float | None) -> tuple:
        (size,) = _HEADER.unpack(_read_exact(self.proc.stdout.fileno(), _HEADER.size, deadline))
        return pickle.loads(_read_exact(self.proc.stdout.fileno(), size, deadline))

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self._posted = 0

    close = kill


def exit_with_parent(parent: int, every_s: float = 0.5) -> None:
    """End this process within `every_s` of its parent's death, even in the middle of a job: a
    killed tuner's worker would otherwise finish its measurement first (it kept a core busy
    for over 100 s after a SIGTERM to `minitc lm adapt`). Kernels run through ctypes, which
    releases the GIL, so the watching thread runs while they do."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="minitc-parent-watch", daemon=True).start()


def main() -> None:
    # Ctrl-C reaches the whole process group: the parent handles it and ends its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(int(os.environ.get("MINITC_WORKER_PARENT", os.getppid())))  # dead already: ends at once
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints (Python or C) go to stderr, not into the protocol
    for module in sys.argv[1:]:  # the parent's handlers register themselves as they load
        importlib.import_module(module)
    while True:
        header = proto_in.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        module, name, args = pickle.loads(proto_in.read(size))
        try:
            if name not in HANDLERS and module is not None:
                importlib.import_module(module)
            if name not in HANDLERS:
                raise MinitcError(f"no worker handler named {name!r} is registered")
            _write(proto_out, ("ok", HANDLERS[name](*args)))
        except Exception as e:  # report, keep serving
            _write(proto_out, ("error", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    main()
