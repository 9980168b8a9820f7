"""Schedule code for the explorer's left pane: the naive schedule with hints, and a trace (an
operator template's) written out as the `Schedule` calls that replay it.

    naive_code(out, "C")                    # s = tc.Schedule(C); i, j, k = s.loops(C); # hints
    trace_code(template_schedule(C), "C", {"C": C, "A": A, "B": B})
    parameter_comments(C, "llvm")           # the template's parameters, as comments above it

Loops and stages become Python variables named after them (`j_o, j_i = s.split(j, ...)`), so
the code reads like one written by hand; a stage with no variable in the expression code is
fetched by name (`softmax_max = s.tensor("softmax_max")`).
"""

from __future__ import annotations

import json
import keyword

import minitc as tc
from minitc.errors import ScheduleError
from minitc.explanation import template_parameters
from minitc.schedule.kinds import STEP_TABLE, LoopArg, StageArg, StageList
from minitc.schedule.state import LoopRef


def _ident(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not text or text[0].isdigit() or keyword.iskeyword(text):
        text = "_" + text
    return text


def _q(text: str) -> str:
    """A string literal in double quotes, as the house style writes them."""
    return json.dumps(text)


def _divisor_up_to(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def naive_code(out, var: str) -> str:
    """`s = tc.Schedule(var)`, its loops as variables, and commented hints that are legal for
    this operator (split the innermost spatial loop, move it inside the reduction, vectorize,
    parallelise the outer loop)."""
    s = tc.Schedule(out)
    refs = s.loops(out)
    stage = s.state.stage(refs[0].stage)
    spatial = [r.name for r in refs if not stage.loop(r.name).reduce]
    reduce = [r.name for r in refs if stage.loop(r.name).reduce]
    names = [_ident(r.name) for r in refs]
    lines = [
        f"s = tc.Schedule({var})",
        f"{', '.join(names)}{',' if len(names) == 1 else ''} = s.loops({var})"
        + ("  # spatial loops, then the reduction" if reduce else "  # outermost first"),
    ]
    others = [st.name for st in s.state.stages if st.body is not None and st.name != stage.name]
    if others:
        lines.append(f"# other stages: {', '.join(others)} (e.g. {_ident(others[0])} = s.tensor({_q(others[0])}))")
    inner = _ident(spatial[-1])
    factor = _divisor_up_to(stage.loop(spatial[-1]).extent, 16)
    lines += [
        "",
        "# Uncomment and edit; the views on the right follow as you type.",
        f"# {inner}_o, {inner}_i = s.split({inner}, factor={factor})",
    ]
    if reduce:
        lines.append(f"# s.reorder({', '.join(map(_ident, reduce))}, {inner}_i)  # the vector loop innermost")
    lines.append(f"# s.vectorize({inner}_i)")
    outer = _ident(spatial[0]) if len(spatial) > 1 else f"{inner}_o"
    lines += [
        f"# s.parallel({outer})",
        '# Or press "template" for the schedule of minitc\'s operator template.',
    ]
    return "\n".join(lines) + "\n"


def parameter_comments(out, target: str) -> str:
    """Comment lines with the operator template's parameters for `target`: each value and its
    meaning (docs/parameters.md); "" for an operator without a template."""
    rows = template_parameters(out, target)
    if not rows:
        return ""
    lines = [f"# the template's parameters for {target} (docs/parameters.md):"]
    return "\n".join(lines + [f"#   {name} = {value}: {meaning}" for name, value, meaning in rows]) + "\n"


class _Writer:
    """Replays a trace through the public Schedule methods while writing each call as code."""

    def __init__(self, outputs, var: str, namespace: dict):
        self.s = tc.Schedule(outputs)
        self.lines = [f"s = tc.Schedule({var})"]
        # a tensor of the expression code is referred to by its variable
        self.stage_vars = {}
        for name, value in namespace.items():
            if isinstance(value, tc.Tensor) and not name.startswith("_"):
                try:
                    self.stage_vars.setdefault(self.s.stage_name(value), name)
                except ScheduleError:
                    pass  # a tensor of another computation
        self.taken = set(namespace) | {"s", "tc", "np"}
        self.loop_vars = {}  # (stage, loop name) -> variable

    def _new_var(self, *candidates) -> str:
        for c in candidates:
            if c not in self.taken:
                break
        else:
            base, n = candidates[-1], 2
            while f"{base}{n}" in self.taken:
                n += 1
            c = f"{base}{n}"
        self.taken.add(c)
        return c

    def stage(self, name: str) -> str:
        if name not in self.stage_vars:
            var = self._new_var(_ident(name), _ident(name) + "_t")
            self.lines.append(f"{var} = s.tensor({_q(name)})")
            self.stage_vars[name] = var
        return self.stage_vars[name]

    def _bind_loops(self, stage: str, names) -> list:
        """Variables for new loops of `stage`: the loop's name, else stage_loop."""
        out = []
        for n in names:
            var = self._new_var(_ident(n), f"{self.stage(stage)}_{_ident(n)}")
            self.loop_vars[(stage, n)] = var
            out.append(var)
        return out

    def loop(self, stage: str, name: str) -> str:
        if (stage, name) not in self.loop_vars:
            refs = [r for r in self.s.loops(stage) if (stage, r.name) not in self.loop_vars]
            stage_var = self.stage(stage)
            names = self._bind_loops(stage, [r.name for r in refs])
            self.lines.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = s.loops({stage_var})")
        return self.loop_vars[(stage, name)]

    def ref(self, stage: str, name: str):
        return next(r for r in self.s.loops(stage) if r.name == name)

    def step(self, st) -> None:
        """Write one step as its `Schedule` call (the step table's `call`), and make that call."""
        kind = STEP_TABLE.get(st.kind)
        if kind is None:
            raise ScheduleError(f"the explorer cannot write a {st.kind} step as code")
        call = kind.call(st)
        # variables are found last argument first: a reader list, then the cached stage, as
        # the explorer has always written them
        keywords = {k: self._arg(v) for k, v in reversed(call.keywords)}
        args = [self._arg(a) for a in reversed(call.args)][::-1]
        result = getattr(self.s, call.method)(*(value for value, _ in args), **{k: v for k, (v, _) in keywords.items()})
        words = [code for _, code in args] + [f"{k}={keywords[k][1]}" for k, _ in call.keywords]
        text = f"s.{call.method}({', '.join(words)})"
        if isinstance(result, tuple | LoopRef):  # new loops: split, fuse
            refs = result if isinstance(result, tuple) else (result,)
            names = self._bind_loops(refs[0].stage, [r.name for r in refs])
            text = f"{', '.join(names)} = {text}"
        elif isinstance(result, tc.Tensor):  # a new stage: cache_write, cache_read, rfactor
            name = self.s.stage_name(result)
            var = self._new_var(_ident(name), _ident(name) + "_t")
            self.stage_vars[name] = var
            text = f"{var} = {text}"
        self.lines.append(text)

    def _arg(self, arg) -> tuple:
        """(the value the Schedule method takes, the code that names it) of a call argument."""
        if isinstance(arg, LoopArg):
            return self.ref(arg.stage, arg.loop), self.loop(arg.stage, arg.loop)
        if isinstance(arg, StageArg):
            return arg.name, self.stage(arg.name)
        if isinstance(arg, StageList):
            return list(arg.names), f"[{', '.join(self.stage(r) for r in arg.names)}]"
        return arg, _value(arg)


def _value(v) -> str:
    """A plain argument as Python: strings in double quotes, tuples as lists."""
    if isinstance(v, str):
        return _q(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def trace_code(schedule, var: str, namespace: dict) -> str:
    """Python code that rebuilds `schedule` (its outputs must be the tensor `var` of the
    expression code, whose variables are `namespace`) with one Schedule call per trace step."""
    w = _Writer(schedule.outputs, var, namespace)
    for st in schedule.trace:
        w.step(st)
    return "\n".join(w.lines) + "\n"
