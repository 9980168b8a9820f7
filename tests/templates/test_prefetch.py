"""Software prefetch (issue 41): the schedule's `prefetch` step, its LLVM lowering to
`llvm.prefetch`, the GEMM templates' `l2` decision and where the design space offers it.
Targets and descriptions are pinned (x86-64-v3, the recorded hosts of tests/fixtures/hosts),
so nothing here depends on this host's cpu."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers import recorded_target, template_with

import minitc as tc
from minitc.autotune.space import Space
from minitc.backends.llvm.prefetch import expand_prefetches
from minitc.errors import ScheduleError
from minitc.interp import interpret
from minitc.ir import For, Kernel, Prefetch, walk_stmts
from minitc.printer import format_expr
from minitc.schedule.trace import Trace, step_call
from minitc.target import parse_target
from minitc.templates import CHOICES, DEFAULTS, template_tag
from minitc.templates import gemm_prefetch as prefetch

AVX2 = "llvm -mcpu=x86-64-v3 -num-cores=2"
ph = tc.placeholder


def _matmul(M=24, K=20, N=24):
    return tc.ops.matmul(ph((M, K), name="A"), ph((K, N), name="B"))


def _requests(s, target=AVX2) -> list:
    kernel = tc.lower(s, target=target)
    loops = [f for f in walk_stmts(kernel.body) if isinstance(f, For)]
    return [f.prefetch for f in loops if f.prefetch]


# -- the schedule step ---------------------------------------------------------------------------


def _k_blocked():
    """A matmul with B read through a local copy and k split by 4 inside i: (s, C, B_local, k_i, j)."""
    C = _matmul()
    s = tc.Schedule(C)
    BL = s.cache_read(s.tensor("B"), "local", [C])
    i, j, k = s.loops(C)
    ko, ki = s.split(k, factor=4)
    s.reorder(i, ko, ki, j)
    return s, C, BL, ki, j


def _hand_scheduled():
    s, C, BL, ki, _ = _k_blocked()
    s.unroll(ki)
    s.prefetch(ki, BL, ahead=3)
    return s, C


def test_the_step_is_recorded_replayed_and_carried_by_the_loop():
    s, C = _hand_scheduled()
    step = s.trace.steps[-1]
    assert (step.kind, step.loops, step.args, step.decisions) == ("prefetch", ("k_i",), ("B_local", 3), (3,))
    assert step_call(step) == "prefetch(matmul.k_i, B_local, ahead=3, locality=3)"
    again = tc.Schedule.from_trace(C, Trace.from_json(s.trace.to_json()))
    assert again.trace == s.trace
    (requests,) = _requests(again)
    assert [(r.buffer, r.ahead, r.locality) for r in requests] == [("B_local", 3, 3)]
    loop = again.state.stage("matmul").loop("k_i")
    assert loop.kind == "unrolled" and loop.prefetch == requests


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s, C, ki, BL: s.prefetch(ki, s.tensor("B"), ahead=2), "does not read"),
        (lambda s, C, ki, BL: s.prefetch(ki, BL, ahead=0), "positive int"),
        (lambda s, C, ki, BL: s.prefetch(ki, BL, ahead=2, locality=1), "locality"),
        (lambda s, C, ki, BL: s.prefetch(s.loops(C)[-1], BL, ahead=2), "vectorized"),
    ],
)
def test_illegal_prefetches_say_why(call, match):
    s, C, BL, ki, j = _k_blocked()
    s.vectorize(j)
    with pytest.raises(ScheduleError, match=match):
        call(s, C, ki, BL)


def test_llvm_emits_one_prefetch_per_line_ahead_and_the_interpreter_ignores_them():
    s, C = _hand_scheduled()
    text = tc.codegen(s, AVX2)
    assert "declare void @llvm.prefetch.p0" in text and "i32 0, i32 3, i32 1)" in text
    assert "llvm.prefetch" not in tc.codegen(tc.Schedule(C), AVX2)
    kernel = tc.lower(s, target=AVX2)
    expanded = expand_prefetches(kernel.body)
    shown = [st for st in walk_stmts(expanded) if isinstance(st, Prefetch)]
    assert len(shown) == 1 and "k_i + 3" in format_expr(shown[0].indices[0])
    (line_loop,) = [st for st in walk_stmts(expanded) if isinstance(st, For) and st.var.name == "j_pf"]
    assert line_loop.extent == 2  # 24 floats of B's row: two 64-byte lines (if aligned), not 24 prefetches
    a, b = np.random.rand(24, 20).astype("float32"), np.random.rand(20, 24).astype("float32")
    c = np.zeros((24, 24), "float32")
    interpret(Kernel(kernel.name, kernel.params, kernel.num_inputs, expanded), [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    c2 = np.zeros_like(c)
    tc.build(s, AVX2)(a, b, c2)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-5)


# -- the GEMM templates --------------------------------------------------------------------------


def _dense_gelu(M, K, N):
    return tc.ops.dense(ph((M, K), name="X"), ph((N, K), name="W"), ph((N,), name="b"), activation="gelu")


def _bmm(B, M, K, N):
    return tc.ops.batch_matmul(ph((B, M, K), name="A"), ph((B, K, N), name="B"))


CASES = {
    "matmul": (lambda: _matmul(64, 96, 48), lambda a, b: a @ b),
    "matmul-tail": (lambda: _matmul(37, 29, 45), lambda a, b: a @ b),
    "bmm": (lambda: _bmm(3, 20, 32, 40), lambda a, b: a @ b),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("params", [dict(l2=2), dict(l2=8, ku=1), dict(l2=3, kc=16)])
def test_prefetching_gemms_match_numpy(name, params):
    make, reference = CASES[name]
    out = make()
    s = template_with(out, AVX2, **params)
    assert any(st.kind == "prefetch" for st in s.trace.steps)
    assert "llvm.prefetch" in tc.codegen(s, AVX2)
    a_shape, b_shape = [st.shape for st in s.state.stages if st.is_placeholder]
    a, b = np.random.rand(*a_shape).astype("float32"), np.random.rand(*b_shape).astype("float32")
    c = np.zeros(out.shape, "float32")
    tc.build(s, AVX2)(a, b, c)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("M, block", [(32, 0), (13, 0), (16, 8)])
def test_a_prefetching_dense_with_its_epilogue_matches_numpy(M, block):
    """Packed W, and W stored in blocks of 8 columns (read in place: the prefetch reads W)."""
    erf = np.vectorize(math.erf)
    K, N = 48, 40
    x, w, bias = (np.random.rand(*shape).astype("float32") - 0.5 for shape in ((M, K), (N, K), (N,)))
    if block:
        X, W = ph((M, K), name="X"), ph((N // block, K, block), name="W")
        out = tc.ops.dense(X, W, ph((N,), name="b"), activation="gelu", weight_block=block)
        weights = np.ascontiguousarray(w.reshape(N // block, block, K).transpose(0, 2, 1))
    else:
        out, weights = _dense_gelu(M, K, N), w
    s = template_with(out, AVX2, l2=4)
    assert "llvm.prefetch" in tc.codegen(s, AVX2)
    y = np.zeros((M, N), "float32")
    tc.build(s, AVX2)(x, weights, bias, y)
    z = x @ w.T + bias
    np.testing.assert_allclose(y, 0.5 * z * (1 + erf(z / np.sqrt(2))), rtol=1e-4, atol=1e-5)


def test_l2_zero_or_absent_is_the_program_without_prefetch():
    out = _matmul()
    plain = template_with(out, AVX2)
    assert template_with(out, AVX2, l2=0).trace == plain.trace
    assert all(st.kind != "prefetch" for st in plain.trace.steps)


# -- the design space ----------------------------------------------------------------------------


def _slots(space) -> dict:
    c = space.replay(space.default_values())
    return {d.name.split(".")[-1]: d for d in c.decisions}


def test_the_intel_server_gets_the_analytical_distance_among_its_candidates():
    target = recorded_target("intel-sapphirerapids-kvm.json")
    hw = target.hardware
    out = _matmul(1024, 1024, 1024)
    s = tc.Schedule(out)
    stage = s.state.outputs[0]
    tiles = DEFAULTS["matmul"](s, stage, target)
    d = prefetch.distance(hw, tiles["mr"], tiles["nr"] // target.lanes("float32"))
    # t_k = 6 x 4 FMAs / 2 per cycle = 12 cycles; 16 cycles of L2 latency: 2 k steps ahead
    assert (tiles["mr"], tiles["nr"], d) == (6, 64, 2)
    assert CHOICES["matmul"](s, stage, target)["l2"] == (0, 2, 4, 8)
    assert tiles["l2"] == 0  # off unless measured better
    slots = _slots(Space(out, target))
    assert slots["l2"].value == 0 and d in slots["l2"].domain


@pytest.mark.parametrize(
    "target",
    ["intel-sapphirerapids-kvm.json", "amd-zen4.json", "intel-haswell-avx2.json", AVX2, "llvm -num-cores=2"],
)
def test_every_cpu_gemm_space_has_the_slot_and_its_default_program_prefetches_nothing(target):
    target = recorded_target(target) if target.endswith(".json") else target
    for out in (_matmul(), _bmm(2, 8, 16, 16), _dense_gelu(24, 16, 16)):  # 8 rows take the gemv template
        space = Space(out, target)
        slot = _slots(space)["l2"]
        assert slot.value == 0 and len(slot.domain) > 1
        assert '"prefetch"' not in space.replay(space.default_values()).trace


def test_a_sentence_with_the_slot_prints_parses_and_replays_without_new_tokens(monkeypatch):
    from minitc.lm.hardware import hardware as sentence_hardware
    from minitc.lm.language import parse, sentence, space_values
    from minitc.lm.tokenizer import Tokenizer, cpu_vocab

    monkeypatch.setattr(prefetch, "IN_DESIGN_SPACE", True)
    target = recorded_target("intel-sapphirerapids-kvm.json")
    space = Space(_matmul(), target)
    values = space.default_values()
    decisions = space.replay(values).decisions
    n = [d.name.split(".")[-1] for d in decisions].index("l2")
    d = values[n] = decisions[n].domain[1]  # the analytical distance
    c = space.replay(values)
    assert any(st.kind == "prefetch" for st in c.schedule.trace.steps)
    text = str(sentence(space, sentence_hardware(target, measured={"gflops": 260.0, "gbps": 20.0}), c.decisions))
    assert " l2 | generic" in text and f"s2.l2 = {d} ;" in text
    assert space.replay(space_values(space, parse(text))).key == c.key
    tok = Tokenizer.default()
    assert len(cpu_vocab()) == 441 and tok.unk not in tok.encode(parse(text))[0]


def test_the_datasets_gemm_programs_replay_unchanged():
    """lm/data's sentences of GEMMs replay in today's spaces, on an Intel description and on a
    Zen 5's (this kind of host's): those written before the slot existed without a prefetch
    step, those written since with one exactly where they chose a distance."""
    from minitc.lm.dataset import load
    from minitc.lm.language import parse, space_values
    from minitc.lm.training_set import workload

    machines = ["rocketlake-2c-43bb2171", "znver5-2c-3cc6f2b4"]
    entries = load(hardware=machines, workloads=["matmul-256", "bert-attn-av"], sentences=False)
    assert {e.fingerprint for e in entries} == set(machines) and len(entries) >= 32
    spaces, older = {}, 0
    for e in entries:
        space = spaces.setdefault((e.name, e.target), Space(workload(e.name), e.target))
        trace = space.replay(space_values(space, parse(e.sentence))).trace
        older += ".l2 = " not in e.sentence
        assert ('"prefetch"' in trace) == bool(re.search(r"\.l2 = [1-9]", e.sentence))
    assert older >= 32


def test_prefetches_leave_the_accumulators_in_registers():
    """The Sapphire Rapids fixture's matmul 1024^3 accumulates C in place over k blocks: the
    prefetch calls carry B's alias scopes, or LLVM would store the 24 accumulators every k step."""
    import re

    from minitc.backends import lower_schedule
    from minitc.backends.llvm import jit
    from minitc.backends.llvm.codegen import render

    target = recorded_target("intel-sapphirerapids-kvm.json")
    s = template_with(_matmul(1024, 1024, 1024), target, l2=2)
    assert DEFAULTS["matmul"](tc.Schedule(_matmul(1024, 1024, 1024)), "matmul", target)["kc"]  # in place
    with jit._LOCK:
        module, machine = jit.optimized_module(render(lower_schedule(s, target), target, name="k"), "k", target)
        asm = machine.emit_assembly(module)
    blocks = [b.split("\n\tj")[0] for b in re.split(r"\n\.LBB\d+_\d+:", asm)]  # label to branch
    kernel = max((b for b in blocks if "prefetcht0" in b), key=lambda b: b.count("vfmadd231ps"))
    assert kernel.count("prefetcht0") == 16 and kernel.count("vfmadd231ps") == 96  # a line per vector, 4 k steps
    assert not re.search(r"vmovups\s+%zmm\d+, ", kernel)  # no stores


# -- A packed in k-major panels (gemm_schedule's a_panels; not a template parameter yet) ----------


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("params", [dict(), dict(kc=16, mc=12), dict(kc=16, prefetch_b=2)])
def test_gemms_with_a_panels_match_numpy(name, params):
    from minitc.templates import gemm

    make, reference = CASES[name]
    out = make()
    s = tc.Schedule(out)
    stage = s.state.outputs[0]
    tiles = {k: v for k, v in DEFAULTS[template_tag(s, stage)](s, stage, parse_target(AVX2)).items() if k != "l2"}
    gemm._matmul_like(s, stage, parse_target(AVX2), **{**tiles, **params, "a_panels": True})
    panels = [st for st in s.state.stages if st.name.startswith("A_local")]
    assert len(panels) == 1 and panels[0].attach is not None
    a_shape, b_shape = [st.shape for st in s.state.stages if st.is_placeholder]
    a, b = np.random.rand(*a_shape).astype("float32"), np.random.rand(*b_shape).astype("float32")
    c = np.zeros(out.shape, "float32")
    tc.build(s, AVX2)(a, b, c)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-4, atol=1e-5)
