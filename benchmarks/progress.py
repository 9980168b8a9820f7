"""A live progress line for tuning, drawn on stderr.

    bar = TuneProgress(total=64, work=2 * 512**3, unit="GFLOP/s")
    tc.tune(..., progress=bar)      # called as bar(done, total, errors, best_ms)
    bar.close()

On a terminal the line is redrawn in place (`\\r`); otherwise (a log file, a pipe, a test) a
line is written every `every` trials and at the end, so logs stay readable.
"""

from __future__ import annotations

import sys
import time

WIDTH = 24


def rate_text(work, unit: str, ms) -> str:
    """`217.3 GFLOP/s` from the work of one call and its latency; "" when unknown."""
    if not work or not ms:
        return ""
    return f"{work / (ms * 1e-3) / 1e9:.1f} {unit}"


class TuneProgress:
    def __init__(
        self,
        total: int,
        work: float | None = None,
        unit: str = "GFLOP/s",
        prefix: str = "",
        stream=None,
        every: int = 16,
        enabled: bool = True,
    ):
        self.total, self.work, self.unit, self.prefix = total, work, unit, prefix
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every, self.enabled = max(1, every), enabled
        self.start = time.perf_counter()
        self.last = (0, 0, None)
        self._drawn = False
        if enabled and self.tty:
            self._draw(0, 0, None)

    def line(self, done: int, errors: int, best_ms) -> str:
        total = max(self.total, 1)
        filled = int(WIDTH * min(done, total) / total)
        parts = [f"{self.prefix}[{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{self.total} trials"]
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
        parts.append(f"search best {best_ms:.4g} ms" if best_ms is not None else "search best -")
        rate = rate_text(self.work, self.unit, best_ms)
        if rate:
            parts.append(rate)
        parts.append(f"{time.perf_counter() - self.start:.0f} s")
        return "  ".join(parts)

    def _draw(self, done, errors, best_ms) -> None:
        text = self.line(done, errors, best_ms)
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True

    def __call__(self, done: int, total: int, errors: int, best_ms) -> None:
        self.total = total
        self.last = (done, errors, best_ms)
        if self.enabled and (self.tty or done % self.every == 0 or done == total):
            self._draw(done, errors, best_ms)

    def close(self) -> None:
        """End the line (on a terminal) so later output starts on a fresh one."""
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
