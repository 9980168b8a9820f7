"""`tc.explain(schedule)`: a schedule's trace replayed one step at a time, each step with the
Schedule call it was, why such a step matters, and the loop nest after it; with `measure=True`
also the time and GFLOP/s after each step, each build checked against the numpy reference.

    print(tc.explain(s))                      # every step and its loop nest
    print(tc.explain(s, measure=True).text(diff=True))   # only the lines each step changed

`trace_differences(a, b)` says how one trace differs from another (`minitc explain --db` uses it
to show how a tuned program differs from the template). A program of an operator's template
(its defaults, or a record's `decisions`) is shown with the template's parameters first, each
with its meaning (`template_parameters`; minitc/templates/params.py).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

import numpy as np

from minitc.autotune.runner import mismatch, random_array
from minitc.autotune.space import Space
from minitc.backends import build_schedule, lower_schedule
from minitc.errors import MinitcError
from minitc.schedule import Schedule
from minitc.schedule.kinds import STEP_TABLE
from minitc.schedule.trace import Step, step_call
from minitc.target import parse_target
from minitc.te_eval import evaluate
from minitc.timing import measure

RTOL = 1e-3  # each step's output against numpy, as the tuner checks its candidates


def why(step: Step, extent: int | None = None, lanes: int | None = None) -> str:
    """One line on what a step does to the program and why that can make it faster (the step
    table's `why`, filled in); `lanes`: the target's vector lanes for the stage's dtype."""
    kind = STEP_TABLE.get(step.kind)
    text = kind.why if kind is not None else "a schedule step"
    return text.format(
        lanes=f" ({lanes} lanes per vector on this target)" if lanes else "",
        decision=step.decisions[0] if step.decisions else "",
        extent=extent if extent is not None else "its",
        stage=step.stage,
        loop=f"{step.args[0]}.{step.loops[0]}" if kind is not None and kind.attaches else ",".join(step.loops),
        scope=step.args[0] if step.args else "",
    )


@dataclass
class ExplainedStep:
    number: int  # 0: the naive loop nest before any step
    call: str  # the Schedule call, e.g. `split(C.i, factor=32)`
    why: str
    loop_nest: str = ""  # the printed loop nest after this step ("" when it failed to lower)
    error: str | None = None  # why the program after this step could not be lowered, built or checked
    ms: float | None = None  # median time of the program after this step (measure=True)


@dataclass
class Explanation:
    steps: list = field(default_factory=list)
    flops: float | None = None  # of one call, where known: then times also read as GFLOP/s
    target: str = "llvm"
    measured: bool = False
    parameters: list = field(default_factory=list)  # (name, value, meaning) of a template's program

    def text(self, diff: bool = False) -> str:
        """All steps as text; `diff=True` shows each loop nest as its changes from the one before."""
        out, before = [], ""
        if self.parameters:
            out.append("the template's parameters (docs/parameters.md):")
            out += [f"  {name} = {value}: {meaning}" for name, value, meaning in self.parameters]
            out.append("")
        for st in self.steps:
            out.append(f"{st.number:3d}. {st.call}{self._timing(st)}")
            out.append(f"     {st.why}")
            if st.error:  # an intermediate program may be incomplete: a later step completes it
                out.append(f"     no program after this step: {st.error}")
            elif diff and st.number > 0:
                changes = _changed_lines(before, st.loop_nest)
                out += ["     " + line for line in changes] or ["     (loop nest unchanged)"]
            else:
                out += ["     " + line for line in st.loop_nest.splitlines()]
            before = st.loop_nest or before
            out.append("")
        if self.measured:
            out.append(self.summary())
        return "\n".join(out).rstrip() + "\n"

    def summary(self) -> str:
        """One line per step: its call and time, as a table."""
        rows = [f"{'step':>4}  {'ms':>10}  {'GFLOP/s':>8}  call"]
        for st in self.steps:
            ms = f"{st.ms:10.4g}" if st.ms else f"{'-':>10}"
            gf = f"{self.flops / st.ms / 1e6:8.1f}" if st.ms and self.flops else f"{'-':>8}"
            rows.append(f"{st.number:4d}  {ms}  {gf}  {st.call}")
        return "\n".join(rows)

    def _timing(self, st) -> str:
        if st.ms is None:
            return ""
        rate = f", {self.flops / st.ms / 1e6:.1f} GFLOP/s" if self.flops else ""
        return f"   [{st.ms:.4g} ms{rate}]"

    def __str__(self):
        return self.text()


def explain(
    schedule: Schedule,
    target: str = "llvm",
    measure: bool = False,
    flops: float | None = None,
    budget_s: float = 1.0,
    decisions: list | None = None,
) -> Explanation:
    """Replay `schedule`'s trace on a fresh schedule of the same outputs, one step at a time.

    With `measure`, each program is built for `target`, checked against numpy and timed (median
    of calls within about `budget_s`; at least one call, so a slow naive nest costs one run).
    `flops` (of one call) defaults to an estimate from the reductions (a multiply-add counts 2).
    The template's parameters are listed for its own program, or for the record whose decision
    values `decisions` are given."""
    if not isinstance(schedule, Schedule):
        raise MinitcError(f"explain takes a Schedule, got {type(schedule).__name__}")
    outputs = schedule.outputs
    flops = flops if flops is not None else estimate_flops(outputs)
    check = _Reference(outputs) if measure else None
    parameters = template_parameters(outputs, target, decisions, schedule.trace)
    result = Explanation(flops=flops, target=target, measured=measure, parameters=parameters)
    current = Schedule(outputs)
    first = ExplainedStep(
        0,
        f"Schedule({', '.join(current.state.outputs)})",
        "the naive loop nest: one loop per axis, in the order they were defined",
    )
    result.steps.append(_fill(first, current, target, check, budget_s))
    for number, step in enumerate(schedule.trace, 1):
        extent, lanes = _extent_and_lanes(current, step, target)
        st = ExplainedStep(number, step_call(step), why(step, extent, lanes))
        try:
            current.replay([step])
        except MinitcError as e:
            st.error = str(e)
            result.steps.append(st)
            break
        result.steps.append(_fill(st, current, target, check, budget_s))
    return result


def template_parameters(outputs, target, decisions: list | None = None, trace=None) -> list:
    """(name, value, meaning) of each template parameter of a program of `outputs` on `target`:
    the one with these decision values, else the template's own (tc.build's); with `trace`,
    only if the program's trace is that one. [] for a program of no template."""
    try:
        space = Space(outputs, target, "template")
        candidate = space.replay(decisions) if decisions else space.first_program()
    except MinitcError:  # no template for the operator, or decisions of another sketch
        return []
    if trace is not None and candidate.trace != trace.to_json():
        return []
    return [(p.name, d.value, p.meaning) for p, d in space.parameters(candidate)]


def trace_differences(trace, reference) -> list:
    """How `trace` differs from `reference`, step by step: lines of `- call` (only in the
    reference) and `+ call` (only in `trace`); empty when they are the same."""
    a = [step_call(s) for s in reference]
    b = [step_call(s) for s in trace]
    return [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]


def estimate_flops(outputs) -> float | None:
    """2 x (output elements) x (reduction extent) summed over the reductions of the computation,
    or None where nothing reduces (elementwise work is measured in bytes, not FLOPs)."""
    total = 0.0
    for stage in Schedule(outputs).state.stages:
        if stage.reduce_axes:
            total += 2.0 * math.prod(stage.shape) * math.prod(a.extent for a in stage.reduce_axes)
    return total or None


def _fill(st: ExplainedStep, s: Schedule, target: str, check, budget_s: float) -> ExplainedStep:
    try:
        st.loop_nest = str(lower_schedule(s, target if target.startswith("llvm") else None))
        if check is not None:
            st.ms = check.time(build_schedule(s, target), budget_s)
    except MinitcError as e:
        st.error = str(e)
    return st


def _extent_and_lanes(s: Schedule, step: Step, target: str) -> tuple:
    """The extent of the loop a step acts on, and the target's lanes for its stage's dtype."""
    try:
        stage = s.state.stage(step.stage)
        extent = stage.loop(step.loops[0]).extent if step.loops else None
        t = parse_target(target)
        return extent, t.lanes(stage.dtype) if hasattr(t, "lanes") else None
    except (MinitcError, IndexError, KeyError):
        return None, None


def _changed_lines(before: str, after: str) -> list:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]


class _Reference:
    """Random inputs and the numpy reference of the outputs, to check and time each program."""

    def __init__(self, outputs):
        s = Schedule(outputs)
        names, _ = s.arguments()
        rng = np.random.default_rng(0)
        tensors = [s.tensor(n) for n in names]
        self.inputs = [random_array(t, rng) for t in tensors]
        self.expected = evaluate(list(outputs), dict(zip(tensors, self.inputs)))

    def time(self, fn, budget_s: float) -> float:
        """Median ms per call of the checked kernel `fn` (minitc.timing.measure)."""
        got = fn(*self.inputs)
        wrong = mismatch(got if isinstance(got, tuple) else (got,), self.expected, RTOL)
        if wrong:
            raise MinitcError(wrong)
        return 1e3 * measure({"kernel": lambda: fn(*self.inputs)}, repeats=50, budget_s=budget_s)["kernel"].median
