"""rfactor (minitc/schedule/rfactor.py) and the reduction templates built on it.

The primitive: its loop nest before and after, results against numpy through the interpreter
and the LLVM backend (sum, max, min, mean; splits that do and do not divide; float64; NaN),
trace round trips, and illegal uses. The templates (reduce.py, norm.py): vector partial
results of whole registers along the reduced axis for an AVX2 and an AVX-512 target (the
AVX-512 code rendered, not run), and built kernels against numpy."""

import re

import numpy as np
import pytest
from helpers import interpret_outputs, random_inputs, roundtrip, table_target
from lm_helpers import check_round_trip

import minitc as tc
from minitc.autotune.space import Space
from minitc.backends.llvm import jit
from minitc.backends.llvm.codegen import render
from minitc.lm.hardware import hardware
from minitc.schedule.rfactor import rfactor
from minitc.templates import DEFAULTS, load_templates, template_schedule

load_templates()
AVX2 = "llvm -mcpu=znver2 -num-cores=2"
AVX512 = "llvm -mcpu=znver4 -num-cores=2"
TOL = dict(rtol=1e-5, atol=1e-5)
REFERENCE = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}


def rows(shape=(6, 24), op="sum", dtype="float32"):
    X = tc.placeholder(shape, dtype, name="X")
    return X, getattr(tc.ops, op)(X, axis=-1, name="Y")


def split_rfactor(Y, factor=8):
    """Y's reduction loop split by `factor`, the inner part rfactored; returns (s, rf)."""
    s = tc.Schedule(Y)
    *_, k = s.loops(Y)
    _, ki = s.split(k, factor=factor)
    return s, s.rfactor(ki)


def vectorize_rf(s, rf):
    """The rf stage's new axis (its last spatial loop) moved innermost and vectorized."""
    loops = s.loops(rf)
    n = len(rf.shape)
    s.reorder(*loops[: n - 1], *loops[n:], loops[n - 1])
    s.vectorize(loops[n - 1])


def check(s, reference, tol=TOL):
    """Trace round trip, then the interpreter and the built kernel against `reference`."""
    kernel = roundtrip(s)
    inputs = random_inputs(kernel)
    (out,) = interpret_outputs(kernel, inputs)
    np.testing.assert_allclose(out, reference(*inputs), **tol)
    f = tc.build(s)
    np.testing.assert_allclose(f(*inputs), reference(*inputs), **tol)
    return kernel


# -- the primitive ---------------------------------------------------------------------------------

BEFORE = """\
def Y_kernel(X: float32[6, 24]) -> (Y: float32[6]):
    for i0 in range(6):
        Y[i0] = 0.0
        for r1_o in range(3):
            for r1_i in range(8):
                Y[i0] = Y[i0] + X[i0, r1_o * 8 + r1_i]
"""

AFTER = """\
def Y_kernel(X: float32[6, 24]) -> (Y: float32[6]):
    with alloc("global", float32[6, 8]) as Y_rf:
        for i0 in range(6):
            for r1_i in vectorized(8):
                Y_rf[i0, r1_i] = 0.0
            for r1_o in range(3):
                for r1_i_1 in vectorized(8):
                    Y_rf[i0, r1_i_1] = Y_rf[i0, r1_i_1] + X[i0, r1_o * 8 + r1_i_1]
        for i0_1 in range(6):
            Y[i0_1] = 0.0
            for r1_i_2 in range(8):
                Y[i0_1] = Y[i0_1] + Y_rf[i0_1, r1_i_2]
"""


def test_loop_nest_before_and_after():
    _, Y = rows()
    s = tc.Schedule(Y)
    _, k = s.loops(Y)
    _, ki = s.split(k, factor=8)
    assert str(tc.lower(s)) == BEFORE
    rf = s.rfactor(ki)
    assert rf.name == "Y_rf" and rf.shape == (6, 8)
    assert [lp.name for lp in s.loops(rf)] == ["i0", "r1_i", "r1_o"]  # spatial + the loop, then the rest
    assert [lp.name for lp in s.loops(Y)] == ["i0", "r1_i"]  # Y now reduces Y_rf over r1_i
    i, ki, ko = s.loops(rf)
    s.reorder(i, ko, ki)
    s.vectorize(ki)
    assert str(check(s, lambda x: x.sum(-1))) == AFTER


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("k", [24, 21])  # the split by 8 divides 24, not 21
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_numpy(op, k, dtype):
    _, Y = rows((6, k), op, dtype)
    s, rf = split_rfactor(Y)
    vectorize_rf(s, rf)
    kernel = check(s, lambda x: REFERENCE[op](x, axis=-1))
    assert kernel.outputs[0].dtype == dtype
    guarded = "if r1_o * 8 + r1_i_1 < 21:" in str(kernel)
    assert guarded == (k == 21)  # the updates past the edge are skipped; no guard when it divides


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_propagates(op):
    _, Y = rows((4, 21), op)
    s, rf = split_rfactor(Y)
    vectorize_rf(s, rf)
    x = np.random.default_rng(1).standard_normal((4, 21)).astype("float32")
    x[1, 3] = np.nan
    x[2, 20] = np.nan  # in the last, guarded step
    x[3, 5] = np.inf if op == "max" else -np.inf
    expected = REFERENCE[op](x, axis=-1)
    assert np.isnan(expected[[1, 2]]).all()
    (interp,) = interpret_outputs(tc.lower(s), [x])
    np.testing.assert_array_equal(interp, expected)
    np.testing.assert_array_equal(tc.build(s)(x), expected)


def test_rfactor_the_outer_loop():
    """The outer part as the new axis: Y_rf[i, k_o] sums a strided slice of each row."""
    _, Y = rows((5, 21))
    s = tc.Schedule(Y)
    _, k = s.loops(Y)
    ko, _ = s.split(k, factor=8)
    rf = s.rfactor(ko)
    assert rf.shape == (5, 3)
    check(s, lambda x: x.sum(-1))


def test_rfactor_a_whole_axis_and_a_fused_one():
    """With no reduction loop left the rf stage is elementwise: a copy, or, under a split that
    does not divide, the identity past the edge (a select)."""
    _, Y = rows((5, 21), "max")
    s = tc.Schedule(Y)
    _, k = s.loops(Y)
    rf = s.rfactor(k)
    assert rf.shape == (5, 21) and s.state.stage(rf.name).reduce_axes == ()
    check(s, lambda x: x.max(-1))
    s = tc.Schedule(Y)
    _, k = s.loops(Y)
    rf = s.rfactor(s.fuse(*s.split(k, factor=8)))
    assert rf.shape == (5, 24)
    assert "select(" in str(check(s, lambda x: x.max(-1)))


def test_matmul_and_a_second_rfactor():
    """Several spatial axes; then the rf stage itself rfactored along another split."""
    A = tc.placeholder((6, 20), name="A")
    B = tc.placeholder((20, 5), name="B")
    k = tc.reduce_axis(20, name="k")
    C = tc.compute((6, 5), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.Schedule(C)
    _, _, kk = s.loops(C)
    ko, ki = s.split(kk, factor=3)  # does not divide 20
    rf = s.rfactor(ki)
    assert rf.shape == (6, 5, 3)
    *_, ko = s.loops(rf)
    part, _ = s.split(ko, nparts=2)  # ceil(20 / 3) = 7 steps in 2 parts: guarded again
    rf2 = s.rfactor(part)
    assert rf2.shape == (6, 5, 3, 2)
    s.parallel(s.loops(rf2)[0])
    check(s, lambda a, b: a @ b, dict(rtol=1e-4, atol=1e-5))


def test_cache_write_of_an_rf_stage():
    """The cache computes under the rf stage's guard; the copy-out copies every element."""
    _, Y = rows((6, 21))
    s, rf = split_rfactor(Y)
    s.cache_write(rf, "local")
    text = str(check(s, lambda x: x.sum(-1)))
    assert "if r1_o * 8 + r1_i < 21:\n" in text and text.count(" < 21") == 1


def test_rf_stage_computed_where_the_stage_is():
    """A reduction computed at a consumer's loop keeps its place; its rf stage goes there too."""
    X = tc.placeholder((7, 19), name="X")
    k = tc.reduce_axis(19, name="k")
    S = tc.compute((7,), lambda i: tc.sum(X[i, k], axis=k), name="S")
    Z = tc.compute((7, 19), lambda i, j: X[i, j] - S[i], name="Z")
    s = tc.Schedule(Z)
    i, _ = s.loops(Z)
    s.compute_at(S, i)
    _, ks = s.loops(S)
    rf = s.rfactor(s.split(ks, factor=8)[1])
    assert s.state.stage(rf.name).attach == s.state.stage("S").attach
    vectorize_rf(s, rf)
    kernel = check(s, lambda x: x - x.sum(-1, keepdims=True))
    assert 'alloc("local", float32[1, 8]) as S_rf' in str(kernel)  # one row's partial results


def test_template_trace_as_a_sentence():
    """A template program that uses rfactor prints as a tensor-language sentence (its design
    space's decisions), parses back and replays to the same trace."""
    _, Y = rows((64, 300), "mean")
    space = Space(Y, AVX2)
    candidate = space.replay(space.default_values())
    assert any(step.kind == "rfactor" for step in candidate.schedule.trace)
    check_round_trip(space, candidate, hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0}))


# -- illegal uses ----------------------------------------------------------------------------------


def test_a_spatial_loop_is_refused():
    _, Y = rows()
    s = tc.Schedule(Y)
    i, _ = s.loops(Y)
    with pytest.raises(
        tc.ScheduleError, match=r"rfactor: loop i0 of Y is a spatial loop; give one of its reduction loops \(r1\)"
    ):
        s.rfactor(i)


def test_stages_without_a_reduction_are_refused():
    X = tc.placeholder((4, 8), name="X")
    E = tc.compute((4, 8), lambda i, j: X[i, j] * 2, name="E")
    k = tc.reduce_axis(8, name="k")
    Y = tc.compute((4,), lambda i: tc.sum(E[i, k], axis=k), name="Y")
    s = tc.Schedule(Y)
    with pytest.raises(tc.ScheduleError, match="rfactor: E is not a reduction"):
        s.rfactor(s.loops(E)[1])
    with pytest.raises(tc.ScheduleError, match="rfactor: X is an input placeholder"):
        rfactor(s.state, "X", "i0")
    s.compute_inline(E)
    with pytest.raises(tc.ScheduleError, match="rfactor: E is inlined"):
        rfactor(s.state, "E", "j")


def test_attached_stages_are_refused():
    """A producer computed inside the stage would be read by the rf stage; a stage fused into
    its producer's loops cannot take an rf stage along."""
    X = tc.placeholder((4, 8), name="X")
    E = tc.compute((4, 8), lambda i, j: X[i, j] * 2, name="E")
    k = tc.reduce_axis(8, name="k")
    Y = tc.compute((4,), lambda i: tc.sum(E[i, k], axis=k), name="Y")
    s = tc.Schedule(Y)
    i, k = s.loops(Y)
    s.compute_at(E, i)
    with pytest.raises(tc.ScheduleError, match="E is computed inside Y's loops.*rfactor Y before compute_at"):
        s.rfactor(k)
    P = tc.compute((4,), lambda i: X[i, 0] + 1, name="P")
    k2 = tc.reduce_axis(8, name="k")
    S = tc.compute((4,), lambda i: tc.sum(X[i, k2] * P[i], axis=k2), name="S")
    s = tc.Schedule(S)
    s.reverse_compute_at(S, s.loops(P)[0])
    with pytest.raises(tc.ScheduleError, match="S was fused into P with reverse_compute_at; rfactor first"):
        s.rfactor(s.loops(S)[1])


def test_loops_replaced_by_rfactor_are_gone():
    _, Y = rows()
    s = tc.Schedule(Y)
    _, k = s.loops(Y)
    ko, ki = s.split(k, factor=8)
    rf = s.rfactor(ki)
    with pytest.raises(tc.ScheduleError, match="loop r1_o of Y no longer exists"):
        s.unroll(ko)
    with pytest.raises(tc.ScheduleError, match="cannot vectorize loop r1_o of stage Y_rf: it is a reduction loop"):
        s.vectorize(s.loops(rf)[2])


def test_malformed_rfactor_steps():
    _, Y = rows()
    trace = tc.Trace.from_json('[{"kind": "rfactor", "stage": "Y"}]')
    with pytest.raises(tc.ScheduleError, match="malformed rfactor step"):
        tc.Schedule(Y).replay(trace)
    trace = tc.Trace.from_json('[{"kind": "rfactor", "stage": "Y", "loops": ["r9"]}]')
    with pytest.raises(tc.ScheduleError, match="stage Y has no loop 'r9'"):
        tc.Schedule(Y).replay(trace)


# -- the templates ---------------------------------------------------------------------------------


def _workloads():
    """name -> output tensor, for reductions along the contiguous axis."""
    X = tc.placeholder((512, 1024), name="X")
    S = tc.placeholder((1536, 128), name="S")
    L = tc.placeholder((96, 768), name="L")
    T = tc.placeholder((2, 9, 1001), name="T")
    return {
        "rowsum": tc.ops.sum(X, axis=-1),
        "mean": tc.ops.mean(L, axis=-1),
        "softmax": tc.ops.softmax(S),
        "layer_norm": tc.ops.layer_norm(L, None, None),
        "max of two axes": tc.ops.max(T, axis=(1, 2)),
        "full sum": tc.ops.sum(tc.placeholder((100000,), name="V")),
    }


def vector_partial_loops(text: str) -> list:
    """(lanes, loop variable, update) of every vectorized loop whose body updates an rf stage
    (under the guard of a last, partial step if there is one)."""
    lines = [line.strip() for line in text.splitlines()]
    out = []
    for n, line in enumerate(lines[:-2]):
        m = re.fullmatch(r"for (\w+) in vectorized\((\d+)\):", line)
        body = lines[n + 2] if lines[n + 1].startswith("if ") else lines[n + 1]
        target, _, value = body.partition(" = ")
        if m and "_rf[" in target and target.split("[")[0] + "[" in value:
            out.append((int(m.group(2)), m.group(1), value))
    return out


@pytest.mark.parametrize("cpu", ["znver2", "znver4"])
def test_templates_vectorize_along_the_reduced_axis(cpu):
    """Each reduction along the contiguous axis has vector partial loops of whole vectors that
    load the input contiguously (the loop variable is the last index); AVX-512 code uses zmm."""
    target = table_target(cpu)
    simd = target.preferred_lanes("float32")
    for name, out in _workloads().items():
        kernel = tc.lower(template_schedule(out, target))
        loops = vector_partial_loops(str(kernel))
        assert loops, (name, cpu)
        for lanes, var, update in loops:
            assert lanes % simd == 0, (name, cpu, lanes)
            combined = update.split("]", 1)[1]  # what the partial result is combined with
            assert re.search(rf"\w\[[^\]]*\b{var}\]", combined), (name, update)
        if cpu == "znver4":
            asm = _assembly(kernel, target)
            assert "%zmm" in asm, name


def _assembly(kernel, target):
    module, machine = jit.optimized_module(render(kernel, target, name="k"), "k", target)
    return machine.emit_assembly(module)


@pytest.mark.parametrize(
    "cpu,lanes",
    [
        ("znver2", {13: 0, 16: 8, 20: 0, 24: 8, 36: 8, 128: 32, 768: 32, 1001: 32}),
        ("znver4", {13: 0, 16: 8, 20: 0, 24: 8, 36: 8, 128: 32, 768: 32, 1001: 32}),  # 512 bits split
        ("znver5", {13: 0, 16: 8, 20: 0, 24: 8, 36: 8, 128: 32, 768: 32, 1001: 32}),  # split in the table
        ("sapphirerapids", {13: 0, 24: 0, 32: 16, 48: 16, 128: 32, 768: 64, 1001: 64}),
    ],
)
def test_default_lanes_follow_the_target(cpu, lanes):
    """softmax: whole vectors of the preferred width, at most four, at most a quarter of the
    row; none (SLP rows) for rows under two vectors, or not whole vectors and under four. The
    reduce template takes a cache line of each row (16 floats) where the row has four of them,
    else the same, and reads four rows side by side on Zen 5 only (cpus.ROW_STREAMS)."""
    target = table_target(cpu)
    for k, expected in lanes.items():
        s = tc.Schedule(rows((4, k))[1])
        reduce = DEFAULTS["reduce"](s, "Y", target)
        assert reduce["lanes"] == (16 if k >= 64 else expected), k
        assert reduce["streams"] == (4 if cpu == "znver5" else 1), k
        sm = tc.Schedule(tc.ops.softmax(tc.placeholder((4, k), name="X")))
        assert DEFAULTS["softmax"](sm, "softmax", target)["lanes"] == expected, k


def test_lanes_zero_keeps_the_rows_unrolled():
    """lanes=0 (the default for short rows): the SLP layout, rows unrolled inside the
    reduction loop, no rf stage; other lane counts, whole registers or not, give the same sums."""
    X, Y = rows((37, 45))
    x = np.random.default_rng(2).standard_normal((37, 45)).astype("float32")
    for lanes in (0, 7, 8, 16, 45, 60):
        s = template_schedule(Y, "llvm", lanes=lanes)
        text = str(tc.lower(s))
        assert ("_rf" in text) == (1 < lanes < 45), lanes
        if lanes == 0:
            assert re.search(r"for r1 in range\(45\):\n\s+for i0_i_1 in unrolled\(8\):", text)
        np.testing.assert_allclose(tc.build(s, args=[X, Y])(x), x.sum(-1), **TOL)
    with pytest.raises(tc.ScheduleError, match="reduce template: lanes must be an int >= 0"):
        template_schedule(Y, "llvm", lanes=-1)
    with pytest.raises(tc.ScheduleError, match="softmax template: lanes must be an int >= 0"):
        template_schedule(tc.ops.softmax(X), "llvm", lanes=2.0)


def test_full_reduction_is_parallel_per_core():
    kernel = str(tc.lower(template_schedule(_workloads()["full sum"], AVX2)))
    assert "parallel(2)" in kernel and "sum_rf_rf" in kernel


@pytest.mark.parametrize(
    "make,reference",
    [
        (lambda X: tc.ops.sum(X, axis=-1), lambda x: x.sum(-1)),
        (lambda X: tc.ops.max(X, axis=-1), lambda x: x.max(-1)),
        (lambda X: tc.ops.mean(X), lambda x: np.array([x.mean()])),
        (tc.ops.softmax, tc.ops.reference.softmax),
        (lambda X: tc.ops.layer_norm(X, None, None), lambda x: tc.ops.reference.layer_norm(x, None, None)),
    ],
    ids=["sum", "max", "full mean", "softmax", "layer_norm"],
)
@pytest.mark.parametrize("shape", [(37, 1001), (3, 5, 64), (300,)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_template_kernels_match_numpy(make, reference, shape, dtype):
    """Shapes whose rows the vector partial loop does or does not divide, 3-D, 1-D (one row)."""
    x = (np.random.default_rng(3).standard_normal(shape) * 2).astype(dtype)
    X = tc.placeholder(shape, dtype, name="X")
    got = tc.build(make(X))(x)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, reference(x), **tol)


def test_template_max_keeps_nan():
    x = np.random.default_rng(4).standard_normal((19, 1001)).astype("float32")
    x[3, 0] = x[7, 1000] = x[11, 500] = np.nan
    X = tc.placeholder(x.shape, name="X")
    got = tc.build(tc.ops.max(X, axis=-1))(x)
    np.testing.assert_array_equal(got, x.max(-1))
    got = tc.build(tc.ops.softmax(X))(x)
    assert np.isnan(got[[3, 7, 11]]).all() and not np.isnan(np.delete(got, [3, 7, 11], 0)).any()
