"""The canonical workload form decodes back to tensors (autotune/workload_decode.py): key ->
decode -> key for every operator of tc.ops and for hand-written computes, the attrs the
templates read, the form the records database stores, and a clear error for a bad form."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.database import Database
from minitc.autotune.workload_decode import DecodeError, decode
from minitc.autotune.workload_key import canonical, describe, form_key, workload_key
from minitc.cli import main
from minitc.ops.registry import OPS
from minitc.te import ComputeOp, graph
from minitc.te_eval import evaluate


def _round_trip(outputs) -> list:
    """Decode the stored form (through JSON, as the database keeps it) and check the key."""
    form = json.loads(json.dumps(canonical(outputs, attrs=True)))
    decoded = decode(form)
    assert workload_key(decoded) == workload_key(outputs) == form_key(form)
    return decoded


def _attrs(outputs) -> list:
    return [(t.op.tag, t.op.attrs) for t in graph(list(outputs)) if isinstance(t.op, ComputeOp)]


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_round_trips(name):
    for size, seed in (("tiny", 0), ("small", 0), ("small", 1), ("small", 2)):
        out = OPS[name].instantiate(size, np.random.default_rng(seed)).output
        decoded = _round_trip(out)
        assert _attrs(decoded) == _attrs([out]), (name, size, seed)
        assert [t.op.tag for t in decoded] == [out.op.tag] and decoded[0].shape == out.shape


def test_decoded_tensors_compute_the_same():
    out = OPS["conv2d"].instantiate("tiny").output
    (decoded,) = _round_trip(out)
    rng = np.random.default_rng(0)
    inputs = [t for t in graph([out]) if not isinstance(t.op, ComputeOp)]
    again = [t for t in graph([decoded]) if not isinstance(t.op, ComputeOp)]
    arrays = [rng.standard_normal(t.shape).astype(t.dtype) for t in inputs]
    np.testing.assert_allclose(
        evaluate(decoded, dict(zip(again, arrays)))[0], evaluate(out, dict(zip(inputs, arrays)))[0], rtol=1e-5
    )


def _hand_written():
    A = tc.placeholder((6, 8), name="A")
    B = tc.placeholder((5, 8), "float64", name="B", constant=True)
    k = tc.reduce_axis(8, name="k")
    # a transposed read of B, a cast, a max reduction
    M = tc.compute((6, 5), lambda i, j: tc.max(A[i, k] * tc.cast(B[j, k], "float32"), axis=k), name="M")
    # a select on an index comparison, an intrinsic, int arithmetic in an index
    S = tc.compute(
        (6, 5),
        lambda i, j: tc.select((i + j) % 2 == 0, tc.exp(M[i, j]), M[5 - i, j] / 2.0),
        name="S",
        tag="my_op",
        attrs={"window": (2, 3), "scale": 0.5, "mode": "edge", "flag": True, "none": None},
    )
    n = tc.reduce_axis(6, name="n")
    count = tc.compute((5,), lambda j: tc.sum(tc.cast(S[n, j] > 0.0, "int32"), axis=n), name="count")
    return S, count


def test_hand_written_computes_round_trip():
    S, count = _hand_written()
    decoded = _round_trip([S, count])
    assert [t.shape for t in decoded] == [(6, 5), (5,)] and [t.dtype for t in decoded] == ["float32", "int32"]
    assert decoded[0].op.attrs == {"window": (2, 3), "scale": 0.5, "mode": "edge", "flag": True, "none": None}
    cold = [t for t in graph(decoded) if not isinstance(t.op, ComputeOp) and t.op.constant]
    assert [t.dtype for t in cold] == ["float64"]
    assert _round_trip(count)[0].op.body.combiner == "sum"
    assert _round_trip(graph([S])[2])[0].op.body.combiner == "max"
    # the decoded workload schedules and runs like the original
    rng = np.random.default_rng(0)
    ins = [t for t in graph([S]) if not isinstance(t.op, ComputeOp)]
    arrays = [rng.standard_normal(t.shape).astype(t.dtype) for t in ins]
    (again,) = decode(canonical(S))
    expected = evaluate(S, dict(zip(ins, arrays)))[0]
    got = evaluate(again, dict(zip([t for t in graph([again]) if not isinstance(t.op, ComputeOp)], arrays)))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    tc.lower(tc.Schedule(again))


def test_the_database_keeps_the_form_with_attrs(tmp_path):
    out = OPS["max_pool2d"].instantiate("tiny").output
    key = workload_key(out)
    with Database(tmp_path / "r.db") as db:
        db.add_workload(key, describe(out), canonical(out, attrs=True))
        (decoded,) = decode(db.canonical(key))
        assert db.canonical("0" * 32) is None
    assert workload_key(decoded) == key and decoded.op.attrs == out.op.attrs


def test_show_decodes_a_hand_written_workload(tmp_path):
    S, _ = _hand_written()
    key, path = workload_key(S), tmp_path / "r.db"
    with Database(path) as db:
        db.add_workload(key, describe(S), canonical(S, attrs=True))
    result = CliRunner().invoke(main, ["show", key[:10], "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "no records for this workload yet" in result.output and "  op: " not in result.output
    assert "def my_op_kernel(" in result.output and "select(" in result.output


def _form():
    A = tc.placeholder((4, 4), name="A")
    k = tc.reduce_axis(4, name="k")
    return canonical(tc.compute((4, 4), lambda i, j: tc.sum(A[j, k] * 2.0, axis=k), name="C"), attrs=True)


def _broken(edit) -> list:
    form = copy.deepcopy(_form())
    edit(form)
    return form


def _set(path, value):
    def edit(form):
        node = form
        for i in path[:-1]:
            node = node[i]
        node[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "form, message",
    [
        ("not a list", "a non-empty JSON list"),
        ([], "a non-empty JSON list"),
        (_broken(lambda f: f.pop()), "the last entry of a canonical form is ['outputs'"),
        (_broken(_set([0, 0], "weights")), "stage 0: expected an ['input', ...] or ['compute', ...] entry"),
        (_broken(_set([0, 2], "float8")), "stage 0 (input): unknown dtype 'float8'"),
        (_broken(_set([0, 1], [4, 0])), "stage 0 (input): a shape is a non-empty list of positive ints"),
        (_broken(_set([1, 4], [4, 5, 4])), "do not match the shape [4, 4]"),
        (_broken(_set([1, 5, 4, 0], "frobnicate")), "stage 1 (compute untagged): unknown node kind 'frobnicate'"),
        (_broken(_set([1, 5, 4, 2], "pow")), "unknown operator 'pow'"),
        (_broken(_set([1, 5, 4, 3, 1], 9)), "names no earlier stage (there are 1)"),
        (_broken(_set([1, 5, 4, 3, 2], ["v", 7])), "axis number 7 is none of the stage's 3 axes"),
        (_broken(_set([1, 5, 4, 3], ["r", 0, ["v", 0]])), "stage 0 has 2 dimensions but is read with 1 indices"),
        (_broken(_set([1, 5, 4, 4, 2], "two")), "'two' is not a float32 value"),
        (_broken(_set([1, 5], ["c", "float32", "1.0"])), "the stage has 1 reduce axes but its body is no reduction"),
        (_broken(_set([2, 1], [0])), "must name one or more compute stages"),
        (_broken(lambda f: f[1].append("attrs")), "the attrs must be a JSON object"),
        (_broken(lambda f: f[1][5].__setitem__(1, "mean")), "a reduction is ['reduce', one of sum, max, min"),
        (_broken(lambda f: f[2].__setitem__(1, [2])), "names no earlier stage (there are 2)"),
        # an input no stage reads: a well-formed form of no workload this minitc makes
        (_broken(lambda f: (f.insert(1, ["input", [3], "float32"]), f[3].__setitem__(1, [2]))), "decodes to workload"),
    ],
)
def test_a_bad_form_says_what_is_wrong(form, message):
    with pytest.raises(DecodeError) as e:
        decode(form)
    assert message in str(e.value), str(e.value)


def test_show_a_form_stored_without_attrs(tmp_path):
    """A database written before forms kept attrs: the workload decodes, but the convolution
    template cannot read its stride, and show says so instead of failing."""
    out = OPS["conv2d"].instantiate("tiny").output
    key, path = workload_key(out), tmp_path / "r.db"
    with Database(path) as db:
        db.add_workload(key, describe(out), canonical(out))
    result = CliRunner().invoke(main, ["show", key[:10], "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "  op: " not in result.output
    assert "loop nest: unavailable: the template does not take the decoded workload (KeyError" in result.output
