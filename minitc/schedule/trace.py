"""Traces: a schedule's steps as plain data, replayable on a fresh schedule.

A step keeps structure apart from decisions: `kind`, `stage`, `loops` and `args` say which
primitive was applied where; `decisions` holds the numbers (split factors) that a search may
change. Replaying a trace with other decisions gives another program of the same design space.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from minitc.errors import ScheduleError
from minitc.schedule.kinds import BUILTIN_KINDS, STEP_TABLE, Call, LoopArg, StageArg, StageList

STEP_KINDS = BUILTIN_KINDS  # the built-in kinds, in table order; kinds.STEP_TABLE has them all


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
        if not isinstance(d, dict) or d.get("kind") not in STEP_TABLE or not isinstance(d.get("stage"), str):
            raise ScheduleError(
                f"malformed trace step {d!r}: needs 'kind' (one of {', '.join(STEP_TABLE)}) and 'stage'"
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
    kind = STEP_TABLE.get(step.kind)
    if kind is None:
        loops = [f"{step.stage}.{lp}" for lp in step.loops]
        return (
            f"{step.kind}({', '.join([step.stage, *loops])}; args={list(step.args)}, decisions={list(step.decisions)})"
        )
    return call_text(kind.call(step))


def call_text(call: Call) -> str:
    """A call of the step table as one line: loops as `C.i`, stages bare, values as in JSON."""
    words = [_arg_text(a) for a in call.args] + [f"{k}={_arg_text(v)}" for k, v in call.keywords]
    return f"{call.method}({', '.join(words)})"


def _arg_text(arg) -> str:
    if isinstance(arg, LoopArg):
        return f"{arg.stage}.{arg.loop}"
    if isinstance(arg, StageArg):
        return arg.name
    if isinstance(arg, StageList):
        return json_arg(list(arg.names))
    return json_arg(arg)
