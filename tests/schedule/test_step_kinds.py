"""The table of schedule step kinds (minitc/schedule/kinds.py): a kind registered in one place
is known to the recorder, traces, the explorer's code, `tc.explain` and the cost model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import interpret_outputs, random_inputs, roundtrip

import minitc as tc
from minitc.autotune.features import COLUMN, featurize, parse_steps, slog
from minitc.explore.schedule_code import trace_code
from minitc.schedule import kinds
from minitc.schedule import loops as loop_prims
from minitc.schedule.kinds import STEP_TABLE, Call, LoopArg, StepKind
from minitc.schedule.trace import Step, Trace, step_call


def _apply_toy(state, step):
    return loop_prims.annotate(state, step.stage, step.loops[0], "unrolled"), ()


def _record_toy(s, loop):
    s.apply(Step("unroll_all", loop.stage, (loop.name,)))


TOY = StepKind(
    "unroll_all",
    _apply_toy,
    '{"kind": "unroll_all", "stage": "C", "loops": ["j"]}',
    lambda step: Call("unroll_all", (LoopArg(step.stage, step.loops[0]),)),
    "unrolls all {extent} iterations of {loop}",
    lambda step, extents: {"factor": extents[0] if extents else 0, "nparts": True},
    record=_record_toy,
)


@pytest.fixture
def toy():
    kinds.register(TOY)
    yield TOY
    kinds.unregister(TOY.name)
    assert TOY.name not in STEP_TABLE


def _matmul():
    A = tc.placeholder((8, 6), "float32", name="A")
    B = tc.placeholder((6, 12), "float32", name="B")
    k = tc.reduce_axis(6, name="k")
    C = tc.compute((8, 12), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_a_registered_kind_is_known_everywhere(toy):
    A, B, C = _matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.reorder(i, k, j)
    jo, ji = s.split(j, factor=4)
    s.unroll_all(ji)  # the recorder: a method of Schedule, recorded as a step
    assert s.trace.steps[-1] == Step("unroll_all", "C", ("j_i",))
    assert s.state.stage("C").loop("j_i").kind == "unrolled"

    # traces: JSON round trip, replayed to the same program, which computes the product
    kernel = roundtrip(s)
    a, b = random_inputs(kernel)
    (c,) = interpret_outputs(kernel, [a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert step_call(s.trace.steps[-1]) == "unroll_all(C.j_i)"

    # the explorer writes it as code that rebuilds the same trace
    code = trace_code(s, "C", {"A": A, "B": B, "C": C})
    assert "s.unroll_all(j_i)" in code
    ns = {"tc": tc, "A": A, "B": B, "C": C}
    exec(code, ns)
    assert ns["s"].trace == s.trace

    # tc.explain: the call and the table's explanation, with the loop's extent
    last = tc.explain(s).steps[-1]
    assert (last.call, last.why, last.error) == ("unroll_all(C.j_i)", "unrolls all 4 iterations of j_i", None)

    # the cost model's features: the kind's own columns, replayed
    state = tc.Schedule(C).state
    row = featurize(parse_steps(s.trace.to_json()), state)[-1]
    assert row[COLUMN["factor"]] == pytest.approx(slog(4)) and row[COLUMN["nparts"]] == 1.0
    assert row[COLUMN["replayed"]] == 1.0


def test_an_unknown_kind_is_refused_with_the_known_ones():
    with pytest.raises(tc.ScheduleError, match="one of split, fuse"):
        Trace.from_json('[{"kind": "unroll_all", "stage": "C", "loops": ["j"]}]')
    with pytest.raises(AttributeError):
        tc.Schedule(_matmul()[2]).unroll_all


@pytest.mark.parametrize("name", list(kinds.BUILTIN_KINDS))
def test_every_builtin_example_round_trips(name):
    kind = STEP_TABLE[name]
    step = Step.from_json(json.loads(kind.example))
    assert step.kind == name and json.dumps(step.to_json()) == kind.example
    assert step_call(step).startswith(f"{kind.call(step).method}(")
    assert kind.why


def test_a_malformed_step_names_its_json_form():
    s = tc.Schedule(_matmul()[2])
    with pytest.raises(tc.ScheduleError, match=r"malformed split step .*expected a step like .*\"decisions\": \[32\]"):
        s.apply(Step("split", "C", ("i",)))
    with pytest.raises(kinds.ScheduleError, match="built-in"):
        kinds.unregister("split")
