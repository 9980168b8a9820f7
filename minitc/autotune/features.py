"""Trace features for the TLP cost model: one fixed-size row per schedule step.

TLP (ASPLOS'23) reads a schedule as its sequence of primitives, with no lowering: each step
becomes a vector (one-hot primitive kind ++ numeric arguments) and a trace a [steps, features]
matrix. Here the numbers are log-scaled, and when the workload is registered (`register`) the
trace is also replayed step by step on the initial schedule state (cheap: ~0.5 ms a trace, no
lowering), which gives the extents of the loops each step touches and the role of its stage.

Row 0 is a summary of the final state (the heaviest stage's parallel / vector / unroll extents,
its innermost loop, attached and inlined stages); rows 1.. are the steps, cropped to
`max_steps`. Column names are in FEATURES; `slog(x) = log2(1 + x) / 8`, so sizes up to 2^24
stay within [0, 3].

A trace text is either a bare step list (`Trace.to_json`) or a tuner record
`{"sketch": ..., "decisions": ..., "steps": [...]}`; both give the same features.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict

import numpy as np

from minitc.errors import ScheduleError
from minitc.schedule.kinds import BUILTIN_KINDS, STEP_TABLE, apply_step
from minitc.schedule.state import State, from_tensors
from minitc.schedule.trace import Step

STEP_FEATURES = (
    "role_output",
    "role_cache",
    "role_input",
    "role_other",  # the stage the step acts on
    "stage_reduce",
    "stage_loops",
    "stage_iters",  # that stage after the step
    "n_loops",
    "factor",
    "nparts",
    "imperfect",  # the step's own arguments
    "extent",
    "first_extent",
    "last_extent",
    "outer_extent",
    "inner_extent",
    "reduce_frac",
    "position",
    "innermost",
    "attach_outer",
    "target_output",  # compute_at / reverse_compute_at
    "scope_local",
    "layout",
    "readers",  # cache_read / cache_write
    "replayed",
)
SUMMARY_FEATURES = (
    "summary",
    "sum_iters",
    "sum_parallel",
    "sum_vector",
    "sum_unroll",
    "sum_inner",
    "sum_inner_reduce",
    "sum_attached",
    "sum_inlined",
    "sum_steps",
)
# One kind column per built-in step kind: trained models fix the width, so a kind registered
# later (schedule/kinds.py) has no column of its own; its row shows it by its `features`.
FEATURES = tuple(f"kind_{k}" for k in BUILTIN_KINDS) + STEP_FEATURES + SUMMARY_FEATURES
NUM_FEATURES = len(FEATURES)
COLUMN = {name: n for n, name in enumerate(FEATURES)}
KIND_INDEX = {k: n for n, k in enumerate(BUILTIN_KINDS)}


def slog(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0)) / 8.0


def parse_steps(text: str) -> list:
    """The steps of a trace text (a bare step list or a tuner record with "steps")."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise ScheduleError(f"trace is not valid JSON: {e}") from None
    if isinstance(data, dict):
        data = data.get("steps")
    if not isinstance(data, list):
        raise ScheduleError("a trace is a JSON list of steps, or an object with a 'steps' list")
    return [Step.from_json(d) for d in data]


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _role(state: State, name: str) -> str:
    if not state.has(name):
        return "other"
    st = state.stage(name)
    if st.output:
        return "output"
    if st.scope != "global":
        return "cache"
    if st.is_placeholder:
        return "input"
    return "other"


def step_row(step: Step, before: State | None, after: State | None) -> np.ndarray:
    """The feature row of one step, given the states before and after it (None: not replayed).
    What is particular to the step's kind comes from the step table's `features`."""
    row = np.zeros(NUM_FEATURES, np.float32)

    def put(name, value):
        row[COLUMN[name]] = value

    kind = STEP_TABLE.get(step.kind)
    if step.kind in KIND_INDEX:
        put(f"kind_{step.kind}", 1.0)
    put("n_loops", slog(len(step.loops)))
    loops = _replay_features(step, kind, before, after, put)
    if kind is not None:
        for name, value in kind.features(step, [lp.extent for lp in loops]).items():
            put(name, float(value) if isinstance(value, (bool, np.bool_)) else slog(value))
    return row


def _replay_features(step: Step, kind, before: State | None, after: State | None, put) -> list:
    """Put the features read from the states around the step; returns the loops it names."""
    if before is None or after is None or not before.has(step.stage):
        put(f"role_{_role(before, step.stage) if before is not None else 'other'}", 1.0)
        return []
    put("replayed", 1.0)
    put(f"role_{_role(before, step.stage)}", 1.0)
    st = before.stage(step.stage)
    put("stage_reduce", float(bool(st.reduce_axes)))
    st_after = after.stage(step.stage) if after.has(step.stage) else st
    put("stage_loops", slog(len(st_after.loops)))
    put("stage_iters", slog(_product(lp.extent for lp in st_after.loops)))
    # the loops the step names live in the stage itself, or (compute_at) in the target stage
    attaches = kind is not None and kind.attaches
    owner = st
    if attaches and step.args and before.has(step.args[0]):
        owner = before.stage(step.args[0])
        put("target_output", float(owner.output))
    names = [lp.name for lp in owner.loops]
    loops = [owner.loops[names.index(n)] for n in step.loops if n in names]
    if loops:
        extents = [lp.extent for lp in loops]
        put("extent", slog(_product(extents)))
        put("first_extent", slog(extents[0]))
        put("last_extent", slog(extents[-1]))
        put("reduce_frac", sum(lp.reduce for lp in loops) / len(loops))
        first = names.index(loops[0].name)
        put("position", first / max(len(names) - 1, 1))
        put("innermost", float(names.index(loops[-1].name) == len(names) - 1))
        if attaches:
            put("attach_outer", slog(_product(lp.extent for lp in owner.loops[: first + 1])))
    return loops


def summary_row(state: State | None, num_steps: int) -> np.ndarray:
    """The final state's heaviest computed stage: how parallel, vectorized and unrolled it is."""
    row = np.zeros(NUM_FEATURES, np.float32)
    row[COLUMN["summary"]] = 1.0
    row[COLUMN["sum_steps"]] = slog(num_steps)
    if state is None:
        return row
    computed = [st for st in state.stages if not st.is_placeholder and not st.inline]
    if not computed:
        return row
    heavy = max(computed, key=lambda st: (_product(lp.extent for lp in st.loops), st.output))
    kinds = {}
    for lp in heavy.loops:
        kinds.setdefault(lp.kind, []).append(lp.extent)
    parallel = max((_product(lp.extent for lp in st.loops if lp.kind == "parallel") for st in computed), default=1)
    row[COLUMN["sum_iters"]] = slog(_product(lp.extent for lp in heavy.loops))
    row[COLUMN["sum_parallel"]] = slog(parallel if parallel > 1 else 0)
    row[COLUMN["sum_vector"]] = slog(_product(kinds.get("vectorized", [0])))
    row[COLUMN["sum_unroll"]] = slog(_product(kinds.get("unrolled", [0])))
    if heavy.loops:
        row[COLUMN["sum_inner"]] = slog(heavy.loops[-1].extent)
        row[COLUMN["sum_inner_reduce"]] = float(heavy.loops[-1].reduce)
    row[COLUMN["sum_attached"]] = slog(sum(st.attach is not None for st in computed))
    row[COLUMN["sum_inlined"]] = slog(sum(st.inline for st in state.stages))
    return row


def featurize(steps: list, state: State | None, max_steps: int = 64) -> np.ndarray:
    """[1 + min(len(steps), max_steps), NUM_FEATURES]: the summary row, then one row a step.
    `state` is the workload's initial schedule state (None: no replay features)."""
    rows = []
    for step in steps:
        after = None
        if state is not None:
            try:
                after, _ = apply_step(state, step)
            except ScheduleError:
                after = None  # an illegal step: later steps keep only their own arguments
        rows.append(step_row(step, state, after))
        state = after
    rows = [summary_row(state, len(steps))] + rows[:max_steps]
    return np.stack(rows)


class Featurizer:
    """Features of (workload, trace text), cached by text. Workloads are registered with their
    output tensors to enable replay; an unregistered workload gets argument-only features."""

    def __init__(self, max_steps: int = 64, cache_size: int = 16384):
        self.max_steps = max_steps
        self.cache_size = cache_size
        self.states: dict = {}  # workload key -> initial State
        self._cache: OrderedDict = OrderedDict()
        self.hits = self.misses = 0

    def register(self, workload: str, outputs) -> None:
        """Enable replay features for `workload` (the key the model is called with)."""
        if workload not in self.states:
            outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            self.states[workload] = from_tensors(outs)[0]

    def __call__(self, workload: str, trace: str) -> np.ndarray:
        key = (workload, trace)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        feats = featurize(parse_steps(trace), self.states.get(workload), self.max_steps)
        feats.setflags(write=False)
        self._cache[key] = feats
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return feats


def pad_batch(matrices: list) -> tuple:
    """Stack [steps, F] matrices into x [B, S, F] and a mask [B, S] (True on real rows)."""
    longest = max(m.shape[0] for m in matrices)
    x = np.zeros((len(matrices), longest, NUM_FEATURES), np.float32)
    mask = np.zeros((len(matrices), longest), bool)
    for n, m in enumerate(matrices):
        x[n, : m.shape[0]] = m
        mask[n, : m.shape[0]] = True
    return x, mask
