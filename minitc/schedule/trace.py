"""Traces: a schedule's steps as plain data, replayable on a fresh schedule.

A step keeps structure apart from decisions: `kind`, `stage`, `loops` and `args` say which
primitive was applied where; `decisions` holds the numbers (split factors) that a search may
change. Replaying a trace with other decisions gives another program of the same design space.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from minitc.errors import ScheduleError

STEP_KINDS = (
    "split",
    "fuse",
    "reorder",
    "unroll",
    "parallel",
    "vectorize",
    "compute_at",
    "reverse_compute_at",
    "compute_inline",
    "cache_write",
    "cache_read",
    "bind",
    "rfactor",
)


@dataclass(frozen=True)
class Step:
    kind: str
    stage: str
    loops: tuple = ()  # loop names of `stage` the step acts on
    args: tuple = ()  # other structure: target stage, scope, readers, "nparts"
    decisions: tuple = ()  # the tunable numbers

    def to_json(self) -> dict:
        d = {"kind": self.kind, "stage": self.stage}
        for key in ("loops", "args", "decisions"):
            if getattr(self, key):
                d[key] = list(getattr(self, key))
        return d

    @staticmethod
    def from_json(d: dict) -> Step:
        if not isinstance(d, dict) or d.get("kind") not in STEP_KINDS or not isinstance(d.get("stage"), str):
            raise ScheduleError(
                f"malformed trace step {d!r}: needs 'kind' (one of {', '.join(STEP_KINDS)}) and 'stage'"
            )
        args = tuple(tuple(a) if isinstance(a, list) else a for a in d.get("args", ()))
        return Step(d["kind"], d["stage"], tuple(d.get("loops", ())), args, tuple(d.get("decisions", ())))


@dataclass(frozen=True)
class Trace:
    steps: tuple = ()

    def append(self, step: Step) -> Trace:
        return Trace(self.steps + (step,))

    def with_decisions(self, decisions: list) -> Trace:
        """The same structure with new decisions, one tuple per step (in step order)."""
        if len(decisions) != len(self.steps):
            raise ScheduleError(f"expected {len(self.steps)} decision tuples, got {len(decisions)}")
        return Trace(tuple(replace(s, decisions=tuple(d)) for s, d in zip(self.steps, decisions)))

    def to_json(self) -> str:
        return json.dumps([s.to_json() for s in self.steps])

    @staticmethod
    def from_json(text: str) -> Trace:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ScheduleError(f"trace is not valid JSON: {e}") from None
        if not isinstance(data, list):
            raise ScheduleError("a trace in JSON is a list of steps")
        return Trace(tuple(Step.from_json(d) for d in data))

    def __len__(self):
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)


def json_arg(v) -> str:
    """A step argument as it reads in a call: strings quoted, lists bracketed."""
    if isinstance(v, str):
        return repr(v).replace("'", '"')
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(json_arg(x) for x in v) + "]"
    return str(v)


def step_call(step: Step) -> str:
    """One trace step as the Schedule call that made it, e.g. `split(C.i, factor=32)`."""
    loops = [f"{step.stage}.{lp}" for lp in step.loops]
    k, a, d = step.kind, step.args, step.decisions
    if k == "split":
        return f"split({loops[0]}, {'nparts' if 'nparts' in a else 'factor'}={d[0]})"
    if k in ("fuse", "reorder", "unroll", "parallel", "vectorize", "rfactor"):
        return f"{k}({', '.join(loops)})"
    if k == "bind":
        return f"bind({loops[0]}, {json_arg(a[0])})"
    if k in ("compute_at", "reverse_compute_at"):
        return f"{k}({step.stage}, {a[0]}.{step.loops[0]})"
    if k == "compute_inline":
        return f"compute_inline({step.stage})"
    if k == "cache_write":
        layout = f", layout={json_arg(a[1])}" if len(a) > 1 else ""
        return f"cache_write({step.stage}, {json_arg(a[0])}{layout})"
    if k == "cache_read":
        layout = f", layout={json_arg(a[2])}" if len(a) > 2 else ""
        return f"cache_read({step.stage}, {json_arg(a[0])}, readers={json_arg(a[1])}{layout})"
    return f"{k}({', '.join([step.stage, *loops])}; args={list(a)}, decisions={list(d)})"
