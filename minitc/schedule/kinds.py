"""The table of schedule step kinds: everything minitc knows about a kind of trace step, in one
row, as data (the way tinygrad's rewrite tables are data, not if-chains).

A row (`StepKind`) gives, for one primitive:

- `apply(state, step) -> (state, created names)`: the pure function replay and the recorder run;
- `example`: the step's JSON form (`Step.to_json`), a complete example;
- `call(step) -> Call`: the `Schedule` method call that records the step, from which both the
  one-line text (`trace.step_call`: `split(C.i, factor=32)`) and the explorer's Python code
  (`j_o, j_i = s.split(j, factor=32)`) are written;
- `why`: one line on what the step does and why it can pay (`tc.explain`), a format string with
  the fields {stage}, {loop}, {scope}, {decision}, {extent} and {lanes};
- `features(step, extents) -> {column: value}`: the step's own inputs to the cost model, by
  column name of `autotune/features.py` (a bool is a 0/1 flag, a number a size the cost model
  log-scales); `extents` are the extents of the loops the step names, empty when not replayed;
- `attaches`: the step's loop belongs to the stage named by `args[0]` (compute_at), not to its
  own stage; `makes_stage`: the step creates a stage (its first created name), which replay
  hands out as a tensor;
- `record`: for a kind registered after the built-in ones, the `Schedule` method
  (`record(schedule, *args)`), reached as `s.<name>(...)`; the built-in kinds have theirs on
  `Schedule` itself.

`register(StepKind(...))` adds a kind; the recorder, traces, the explorer, `tc.explain` and the
cost model's features then know it (tests/schedule/test_step_kinds.py adds a toy one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from minitc.errors import ScheduleError
from minitc.schedule import loops as loop_prims
from minitc.schedule import stages as stage_prims
from minitc.schedule.rfactor import rfactor
from minitc.schedule.state import State


# -- the arguments of a Schedule call ----------------------------------------------------------
@dataclass(frozen=True)
class LoopArg:
    """A loop of a stage: `C.i` in a call's text, a loop variable in the explorer's code."""

    stage: str
    loop: str


@dataclass(frozen=True)
class StageArg:
    """A stage: `C` in a call's text, a tensor variable in the explorer's code."""

    name: str


@dataclass(frozen=True)
class StageList:
    """A list of stages (cache_read's readers): `["C"]` in a call's text, `[C]` in code."""

    names: tuple


@dataclass(frozen=True)
class Call:
    """A `Schedule` method call: its name, positional arguments and keyword arguments (pairs);
    an argument is a LoopArg, a StageArg, a StageList or a plain value.

    (A `step` below is a trace.Step; trace.py reads this table, so this module does not
    import it.)"""

    method: str
    args: tuple = ()
    keywords: tuple = ()


def _no_features(step, extents: list) -> dict:
    return {}


@dataclass(frozen=True)
class StepKind:
    name: str
    apply: Callable  # (State, Step) -> (State, tuple of created names)
    example: str  # the JSON form of one such step
    call: Callable  # Step -> Call
    why: str
    features: Callable = _no_features  # (Step, extents) -> {feature column: value}
    attaches: bool = False
    makes_stage: bool = False
    record: Callable | None = None  # (Schedule, *args, **kwargs), for kinds added by register


STEP_TABLE: dict = {}  # name -> StepKind, in the order kinds were registered


def register(kind: StepKind) -> StepKind:
    """Add a step kind to the table (or replace the row of that name); returns it."""
    STEP_TABLE[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind added by `register` (tests use it to leave the table as they found it)."""
    if name in BUILTIN_KINDS:
        raise ScheduleError(f"{name} is a built-in step kind; it cannot be removed")
    STEP_TABLE.pop(name, None)


def step_kind(name: str) -> StepKind:
    """The table's row for `name`; ScheduleError when there is none."""
    kind = STEP_TABLE.get(name)
    if kind is None:
        raise ScheduleError(f"unknown trace step kind {name!r}")
    return kind


def apply_step(state: State, step) -> tuple[State, tuple]:
    """Apply one trace step; return the new state and the names of loops/stages it created."""
    return step_kind(step.kind).apply(state, step)


def _malformed(step, *, loops: int | None = None, args: int | None = None, decisions: int | None = None):
    """Raise when `step` does not name exactly the given numbers of loops, args, decisions."""
    for what, want in (("loops", loops), ("args", args), ("decisions", decisions)):
        if want is not None and len(getattr(step, what)) != want:
            raise ScheduleError(
                f"malformed {step.kind} step {step}: expected a step like {STEP_TABLE[step.kind].example}"
            )


# -- loop primitives ---------------------------------------------------------------------------
def _apply_split(state: State, step):
    _malformed(step, loops=1, decisions=1)
    how = "nparts" if "nparts" in step.args else "factor"
    state, o, i = loop_prims.split(state, step.stage, step.loops[0], **{how: step.decisions[0]})
    return state, (o, i)


def _split_call(step) -> Call:
    how = "nparts" if "nparts" in step.args else "factor"
    return Call("split", (LoopArg(step.stage, step.loops[0]),), ((how, step.decisions[0]),))


def _split_features(step, extents: list) -> dict:
    if not step.decisions:
        return {}
    nparts = "nparts" in step.args
    out = {"factor": step.decisions[0], "nparts": nparts}
    if extents:
        extent, f = extents[0], int(step.decisions[0])
        other = -(-extent // max(f, 1))
        out["outer_extent"], out["inner_extent"] = (f, other) if nparts else (other, f)
        out["imperfect"] = extent % max(f, 1) != 0
    return out


def _apply_fuse(state: State, step):
    state, f = loop_prims.fuse(state, step.stage, step.loops)
    return state, (f,)


def _apply_reorder(state: State, step):
    return loop_prims.reorder(state, step.stage, step.loops), ()


def _loops_call(step) -> Call:
    """`kind(C.i, C.j, ...)`: a call on the step's loops alone."""
    return Call(step.kind, tuple(LoopArg(step.stage, n) for n in step.loops))


def _annotation(loop_kind: str) -> Callable:
    def apply(state: State, step):
        _malformed(step, loops=1)
        return loop_prims.annotate(state, step.stage, step.loops[0], loop_kind), ()

    return apply


def _apply_bind(state: State, step):
    _malformed(step, loops=1, args=1)
    return loop_prims.bind(state, step.stage, step.loops[0], step.args[0]), ()


def _bind_call(step) -> Call:
    return Call("bind", (LoopArg(step.stage, step.loops[0]), step.args[0]))


# -- stage primitives --------------------------------------------------------------------------
def _attach(primitive: Callable) -> Callable:
    def apply(state: State, step):
        _malformed(step, loops=1, args=1)
        return primitive(state, step.stage, step.args[0], step.loops[0]), ()

    return apply


def _attach_call(step) -> Call:
    return Call(step.kind, (StageArg(step.stage), LoopArg(step.args[0], step.loops[0])))


def _apply_inline(state: State, step):
    return stage_prims.compute_inline(state, step.stage), ()


def _inline_call(step) -> Call:
    return Call("compute_inline", (StageArg(step.stage),))


def _apply_cache_write(state: State, step):
    state, name = stage_prims.cache_write(state, step.stage, *step.args)
    return state, (name,)


def _cache_write_call(step) -> Call:
    layout = (("layout", step.args[1]),) if len(step.args) > 1 else ()
    return Call("cache_write", (StageArg(step.stage), step.args[0]), layout)


def _apply_cache_read(state: State, step):
    layout = tuple(step.args[2]) if len(step.args) > 2 else None
    state, name = stage_prims.cache_read(state, step.stage, step.args[0], tuple(step.args[1]), layout)
    return state, (name,)


def _cache_read_call(step) -> Call:
    keywords = (("readers", StageList(tuple(step.args[1]))),)
    if len(step.args) > 2:
        keywords += (("layout", step.args[2]),)
    return Call("cache_read", (StageArg(step.stage), step.args[0]), keywords)


def _cache_features(step, extents: list) -> dict:
    out = {"scope_local": bool(step.args) and step.args[0] == "local"}
    if step.kind == "cache_read":
        out["layout"] = len(step.args) > 2
        out["readers"] = len(step.args[1]) if len(step.args) > 1 else 0
    return out


def _apply_rfactor(state: State, step):
    _malformed(step, loops=1)
    state, name = rfactor(state, step.stage, step.loops[0])
    return state, (name,)


def _example(kind: str, stage: str = "C", loops=("i",), args=(), decisions=()) -> str:
    """The JSON of a step, written as `Step.to_json` writes it."""
    d = {"kind": kind, "stage": stage}
    for key, value in (("loops", loops), ("args", args), ("decisions", decisions)):
        if value:
            d[key] = list(value)
    return json.dumps(d)


BUILTIN = (
    StepKind(
        "split",
        _apply_split,
        _example("split", decisions=(32,)),
        _split_call,
        "tiles the loop: the inner {decision} iterations are a block of work that can stay in "
        "registers or cache, be vectorised or unrolled",
        _split_features,
    ),
    StepKind(
        "fuse",
        _apply_fuse,
        _example("fuse", loops=("i", "j")),
        _loops_call,
        "merges loops into one longer loop: more iterations to share among threads or vector lanes",
    ),
    StepKind(
        "reorder",
        _apply_reorder,
        _example("reorder", loops=("k", "j")),
        _loops_call,
        "changes the loop order, and with it which data is reused while it is still in registers or cache",
    ),
    StepKind(
        "unroll",
        _annotation("unrolled"),
        _example("unroll"),
        _loops_call,
        "copies the body {extent} times: no loop overhead, and independent operations the CPU overlaps",
    ),
    StepKind(
        "parallel",
        _annotation("parallel"),
        _example("parallel"),
        _loops_call,
        "spreads the {extent} iterations over the CPU's threads",
    ),
    StepKind(
        "vectorize",
        _annotation("vectorized"),
        _example("vectorize", loops=("j",)),
        _loops_call,
        "runs {extent} iterations as SIMD instructions{lanes} instead of one at a time",
    ),
    StepKind(
        "compute_at",
        _attach(stage_prims.compute_at),
        _example("compute_at", stage="B", args=("C",)),
        _attach_call,
        "computes {stage} inside its consumer's loop {loop}, a tile at a time, while the tile is in cache",
        attaches=True,
    ),
    StepKind(
        "reverse_compute_at",
        _attach(stage_prims.reverse_compute_at),
        _example("reverse_compute_at", stage="D", args=("C",)),
        _attach_call,
        "computes the consumer {stage} inside loop {loop}, right after each tile of its producer",
        attaches=True,
    ),
    StepKind(
        "compute_inline",
        _apply_inline,
        _example("compute_inline", stage="B", loops=()),
        _inline_call,
        "substitutes {stage} into its readers: no intermediate buffer and no second pass over memory",
    ),
    StepKind(
        "cache_write",
        _apply_cache_write,
        _example("cache_write", loops=(), args=("local",)),
        _cache_write_call,
        "accumulates {stage} in a {scope} buffer (registers, for a small tile) and stores each result once",
        _cache_features,
        makes_stage=True,
    ),
    StepKind(
        "cache_read",
        _apply_cache_read,
        _example("cache_read", stage="A", loops=(), args=("local", ["C"])),
        _cache_read_call,
        "copies {stage} into a {scope} buffer for its readers: contiguous, packed data that is reused",
        _cache_features,
        makes_stage=True,
    ),
    StepKind(
        "bind",
        _apply_bind,
        _example("bind", args=("blockIdx.x",)),
        _bind_call,
        "maps the loop onto the GPU's {scope}",
    ),
    StepKind(
        "rfactor",
        _apply_rfactor,
        _example("rfactor", loops=("k",)),
        _loops_call,
        "splits the reduction over {loop} into partial results that can run in parallel or in vector lanes",
        makes_stage=True,
    ),
)
for _kind in BUILTIN:
    register(_kind)
BUILTIN_KINDS = tuple(k.name for k in BUILTIN)


# -- kinds added after the first cost models: no kind column of their own (autotune/features.py) --
def _apply_prefetch(state: State, step):
    _malformed(step, loops=1, args=2, decisions=1)
    buffer, locality = step.args
    return loop_prims.prefetch(state, step.stage, step.loops[0], buffer, step.decisions[0], locality), ()


def _prefetch_call(step) -> Call:
    buffer, locality = step.args
    return Call(
        "prefetch",
        (LoopArg(step.stage, step.loops[0]), StageArg(buffer)),
        (("ahead", step.decisions[0]), ("locality", locality)),
    )


PREFETCH = register(
    StepKind(
        "prefetch",
        _apply_prefetch,
        _example("prefetch", loops=("k",), args=("B_local", 3), decisions=(2,)),
        _prefetch_call,
        "asks the cache for what {loop} reads {decision} iterations ahead, so the loads of the "
        "iterations to come find it in L1 instead of waiting for L2",
    )  # recorded by Schedule.prefetch
)
