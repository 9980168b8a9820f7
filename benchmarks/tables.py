"""The plain-text table every benchmark report prints (report.py, models_report.py,
gpu_report.py, tuning_report.py, tlm_report.py)."""

from __future__ import annotations


def aligned(head: list, rows: list, left: int = 1) -> list:
    """The lines of a table: the header, a rule, then the rows. The first `left` columns are
    left-aligned, the others right-aligned, each as wide as its widest cell."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [line(head), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]
