"""`Schedule`: the user-facing recorder. Each method builds a trace step and applies it with
`apply_step` (the step table's `apply`, schedule/kinds.py), the same function replay uses, so a
trace always replays to the same program."""

from __future__ import annotations

import itertools

from minitc.errors import ScheduleError
from minitc.schedule.kinds import STEP_TABLE, apply_step
from minitc.schedule.sampling import SamplingInstructions
from minitc.schedule.state import LoopRef, from_tensors, stage_tensor
from minitc.schedule.trace import Step, Trace
from minitc.te import ComputeOp, Tensor

_SCHEDULE_IDS = itertools.count(1)


def output_tensors(outputs) -> list:
    """The output tensors of a schedule as a list: one tensor or a list of distinct computed
    tensors. Raises ScheduleError for anything else, naming the offending tensor."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise ScheduleError("Schedule takes an output tensor or a list of output tensors")
    for n, t in enumerate(outs):
        if t.op is None or not isinstance(t.op, ComputeOp):
            raise ScheduleError(
                f"{t.name} is a placeholder, an input with nothing to compute; schedule or build "
                f"the tensor computed from it (e.g. tc.compute({t.shape}, lambda *i: {t.name}[i] * 2))"
            )
        if any(t is u for u in outs[:n]):
            raise ScheduleError(f"output {t.name} is listed twice; list each output tensor once")
    return outs


class Schedule(SamplingInstructions):
    """How to compute one or more output tensors. Starts as the naive loop nest; primitives
    transform it and are recorded in `self.trace`. The sampling instructions
    (`sample_perfect_tile`, `sample_categorical`, `sample_compute_location`: sampling.py) make
    a schedule program a design space."""

    def __init__(self, outputs):
        outs = output_tensors(outputs)
        self.outputs = outs
        self._id = next(_SCHEDULE_IDS)  # stamped on every LoopRef this schedule hands out
        self.state, self._names = from_tensors(outs)
        self.initial_state = self.state
        self.trace = Trace()

    # -- handles -------------------------------------------------------------------------
    def stage_name(self, tensor) -> str:
        """The stage name of a tensor of this schedule (or of a stage name, checked)."""
        if isinstance(tensor, str):
            if not self.state.has(tensor):
                self._refuse_tensor_name(tensor)
            return tensor
        if isinstance(tensor, Tensor):
            if tensor in self._names:
                return self._names[tensor]
            raise ScheduleError(f"tensor {tensor.name} is not part of this schedule's computation")
        raise ScheduleError(f"expected a tensor of this schedule, got {tensor!r}")

    def _refuse_tensor_name(self, name: str):
        """`name` is no stage: say which stages it could mean when several tensors share it."""
        stages = [n for t, n in self._names.items() if t.name == name]
        if len(stages) > 1:
            raise ScheduleError(
                f"stage name {name!r} is ambiguous: {len(stages)} tensors of this schedule are named {name}; "
                f"pass the tensor object itself, or one of the stage names {', '.join(stages)}"
            )
        self.state.stage(name)  # raises: no stage named ...

    def tensor(self, name: str) -> Tensor:
        for t, n in self._names.items():
            if n == name:
                return t
        raise ScheduleError(f"no stage named {name!r}")

    def arguments(self, args=None) -> tuple[list, list]:
        """Input and output stage names in the kernel's argument order. By default the inputs
        are the placeholders in the order they were created and the outputs follow in schedule
        order; `args` (tensors or stage names) gives the order explicitly."""
        outputs = list(self.state.outputs)
        live = [n for n in self._names.values() if self.state.has(n)]
        if args is None:
            placeholders = [t for t, n in self._names.items() if n in live and self.state.stage(n).is_placeholder]
            placeholders.sort(key=lambda t: t.order)
            return [self._names[t] for t in placeholders], outputs
        names = [self.stage_name(a) for a in args]
        inputs = [n for n in names if self.state.stage(n).is_placeholder]
        given_outputs = [n for n in names if not self.state.stage(n).is_placeholder]
        missing = [n for n in live if self.state.stage(n).is_placeholder and n not in inputs]
        if missing:
            raise ScheduleError(f"args is missing input(s) {', '.join(missing)} that the computation reads")
        if sorted(given_outputs) != sorted(outputs):
            raise ScheduleError(
                f"args must list the outputs {', '.join(outputs)}, got {', '.join(given_outputs) or 'none'}"
            )
        return inputs, given_outputs

    def loops(self, tensor) -> tuple:
        """The stage's current loops, outermost first (initially spatial axes, then reduction)."""
        name = self.stage_name(tensor)
        stage = self.state.stage(name)
        if stage.is_placeholder:
            raise ScheduleError(f"{name} is an input placeholder; it has no loops")
        return tuple(self._ref(name, lp.name) for lp in stage.loops)

    def _ref(self, stage: str, loop: str) -> LoopRef:
        return LoopRef(stage, loop, self._id)

    def _loop(self, loop) -> LoopRef:
        if not isinstance(loop, LoopRef):
            raise ScheduleError(f"expected a loop returned by Schedule.loops or a primitive, got {loop!r}")
        if loop.schedule not in (None, self._id):
            raise ScheduleError(
                f"loop {loop.name} of {loop.stage} belongs to another Schedule; take the loops of this one "
                f"with s.loops(...) (a loop handle is valid only in the schedule that returned it)"
            )
        stage = self.state.stage(loop.stage)
        if all(lp.name != loop.name for lp in stage.loops):
            raise ScheduleError(
                f"loop {loop.name} of {loop.stage} no longer exists (split or fused away); "
                f"current loops: {', '.join(lp.name for lp in stage.loops)}"
            )
        return loop

    def apply(self, step: Step) -> tuple:
        """Apply one step and append it to the trace; returns the names of the loops or stages
        it created (the methods below and a registered kind's `record` go through here)."""
        self.state, created = apply_step(self.state, step)
        self.trace = self.trace.append(step)
        return created

    def __getattr__(self, name: str):
        # a step kind registered after the built-in ones: `s.<kind>(...)` runs its `record`
        kind = STEP_TABLE.get(name)
        if kind is None or kind.record is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return lambda *args, **kwargs: kind.record(self, *args, **kwargs)

    def _same_stage(self, loops, primitive: str) -> str:
        refs = [self._loop(lp) for lp in loops]
        stages = {r.stage for r in refs}
        if len(stages) != 1:
            raise ScheduleError(f"{primitive}: the loops belong to different stages ({', '.join(sorted(stages))})")
        return refs[0].stage

    # -- loop primitives -----------------------------------------------------------------
    def split(self, loop, factor=None, nparts=None) -> tuple:
        """Split `loop` by `factor` (inner extent) or `nparts` (outer extent) -> (outer, inner)."""
        ref = self._loop(loop)
        args, value = (("nparts",), nparts) if nparts is not None and factor is None else ((), factor)
        if factor is not None and nparts is not None:
            raise ScheduleError(f"split of loop {ref.name}: give exactly one of factor= or nparts=")
        o, i = self.apply(Step("split", ref.stage, (ref.name,), args, (value,)))
        return self._ref(ref.stage, o), self._ref(ref.stage, i)

    def fuse(self, *loops) -> LoopRef:
        """Fuse adjacent loops (outermost first) into one."""
        stage = self._same_stage(loops, "fuse")
        (f,) = self.apply(Step("fuse", stage, tuple(lp.name for lp in loops)))
        return self._ref(stage, f)

    def reorder(self, *loops) -> None:
        """Reorder the given loops of one stage into the given order."""
        stage = self._same_stage(loops, "reorder")
        self.apply(Step("reorder", stage, tuple(lp.name for lp in loops)))

    def unroll(self, loop) -> None:
        ref = self._loop(loop)
        self.apply(Step("unroll", ref.stage, (ref.name,)))

    def parallel(self, loop) -> None:
        ref = self._loop(loop)
        self.apply(Step("parallel", ref.stage, (ref.name,)))

    def vectorize(self, loop) -> None:
        ref = self._loop(loop)
        self.apply(Step("vectorize", ref.stage, (ref.name,)))

    def prefetch(self, loop, tensor, ahead: int, locality: int = 3) -> None:
        """In each iteration of `loop`, prefetch what the iteration `ahead` later reads of
        `tensor` (loops.prefetch); locality 3 into L1, 2 into L2."""
        ref = self._loop(loop)
        self.apply(Step("prefetch", ref.stage, (ref.name,), (self.stage_name(tensor), locality), (ahead,)))

    def bind(self, loop, tag: str) -> None:
        """Bind a loop to a GPU index: "blockIdx.x/y/z", "threadIdx.x/y/z" or "vthread"."""
        ref = self._loop(loop)
        self.apply(Step("bind", ref.stage, (ref.name,), (tag,)))

    # -- stage primitives ----------------------------------------------------------------
    def compute_at(self, tensor, loop) -> None:
        ref = self._loop(loop)
        self.apply(Step("compute_at", self.stage_name(tensor), (ref.name,), (ref.stage,)))

    def reverse_compute_at(self, tensor, loop) -> None:
        ref = self._loop(loop)
        self.apply(Step("reverse_compute_at", self.stage_name(tensor), (ref.name,), (ref.stage,)))

    def compute_inline(self, tensor) -> None:
        self.apply(Step("compute_inline", self.stage_name(tensor)))

    def cache_write(self, tensor, scope: str = "local", layout=None) -> Tensor:
        """Compute `tensor` into a new cache stage (returned) and copy it out; `layout`, a
        permutation of the dimensions, stores the cache transposed."""
        args = (scope,) if layout is None else (scope, tuple(layout))
        (name,) = self.apply(Step("cache_write", self.stage_name(tensor), (), args))
        return self._register(name)

    def cache_read(self, tensor, scope: str, readers, layout=None) -> Tensor:
        """Make `readers` read `tensor` through a new cache stage (returned); `layout`, a
        permutation of the dimensions, stores the cache transposed."""
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        names = tuple(self.stage_name(r) for r in readers)
        args = (scope, names) if layout is None else (scope, names, tuple(layout))
        (name,) = self.apply(Step("cache_read", self.stage_name(tensor), (), args))
        return self._register(name)

    def rfactor(self, loop) -> Tensor:
        """Compute the reduction of `loop`'s stage as partial results along the reduction loop
        `loop` (a new stage `<stage>_rf`, returned, whose last axis is `loop` and can be
        vectorized), then reduce them over `loop` in the stage itself."""
        ref = self._loop(loop)
        (name,) = self.apply(Step("rfactor", ref.stage, (ref.name,)))
        return self._register(name)

    def _register(self, name: str) -> Tensor:
        t = stage_tensor(self.state.stage(name))
        self._names[t] = name
        return t

    # -- traces --------------------------------------------------------------------------
    def replay(self, trace: Trace) -> Schedule:
        """Apply every step of `trace` to this schedule (normally a fresh one); returns self."""
        for step in trace:
            created = self.apply(step)
            if STEP_TABLE[step.kind].makes_stage:
                self._register(created[0])
        return self

    @classmethod
    def from_trace(cls, outputs, trace: Trace) -> Schedule:
        return cls(outputs).replay(trace)

    def __repr__(self):
        return f"Schedule({', '.join(self.state.outputs)}, {len(self.trace)} steps)"
