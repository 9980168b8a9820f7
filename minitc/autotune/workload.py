"""One workload, described once for everything a tuning session reads (issue 43).

    w = Workload(outputs)
    w.key, w.form, w.description      # the records' key, its canonical form (with attrs), a summary
    w.arguments                       # tensors in kernel argument order: inputs, then outputs
    Task.from_workload(w, "llvm")     # what the measuring workers need (runner.py)

Before it, one session's set-up turned the outputs into a schedule state in up to six places
(the space, the key, the description, the canonical form, twice for the measuring task).
"""

from __future__ import annotations

import functools

from minitc.autotune.workload_key import canonical, describe, form_key
from minitc.schedule import Schedule


class Workload:
    """The output tensors of one computation, and what the tuner derives from them, each
    computed once on first use."""

    def __init__(self, outputs):
        self.outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

    @functools.cached_property
    def schedule(self) -> Schedule:
        """The naive schedule of the outputs (its state names the stages and the arguments); a
        probe to read, never to transform."""
        return Schedule(self.outputs)

    @functools.cached_property
    def form(self) -> list:
        """The canonical form with each compute's attrs (what the database stores)."""
        return canonical(self.outputs, attrs=True)

    @functools.cached_property
    def key(self) -> str:
        return form_key(self.form)

    @functools.cached_property
    def description(self) -> str:
        return describe(self.outputs)

    @functools.cached_property
    def arguments(self) -> list:
        in_names, out_names = self.schedule.arguments()
        return [self.schedule.tensor(n) for n in in_names] + [self.schedule.tensor(n) for n in out_names]

    @functools.cached_property
    def num_inputs(self) -> int:
        return len(self.schedule.arguments()[0])
