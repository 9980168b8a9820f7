"""Matrix-vector templates (minitc/templates/gemv.py): a dense of M <= 8 rows takes gemv (W read
along N: the model compiler's packed weight, or [K, N]) or gemv_dot (torch's [N, K]); every
kernel checked against numpy with its epilogue (bias, GELU, a fused residual add), for M = 1..8
and N, K that do not divide the vector lanes; the traces round-trip; the tuner's space is the
template's; larger M keeps the GEMM template."""

import numpy as np
import pytest
import torch
from helpers import interpret_outputs, roundtrip

import minitc as tc
from minitc.autotune.space import Space
from minitc.errors import ScheduleError
from minitc.ops import reference
from minitc.target import parse_target
from minitc.templates import DEFAULTS, TEMPLATES, template_schedule, template_tag
from minitc.templates.gemv import MAX_ROWS, gemv_vectors, step_bytes_per_cycle

TARGET = parse_target("llvm")
AVX2 = parse_target("llvm -mcpu=znver2 -num-cores=2")
LAYOUTS = ("packed", "nk", "kn")
EPILOGUES = ("none", "bias", "bias_gelu", "residual")
# M = 1..8, each with N and K that leave tails of the vector lanes and of the tiles
SHAPES = [(1, 37, 29), (2, 53, 70), (3, 100, 33), (4, 19, 5), (5, 64, 256), (6, 45, 17), (7, 130, 48), (8, 71, 90)]


def dense(M, N, K, epilogue="none", layout="packed", lanes=None):
    """(output, inputs) of a dense layer with its epilogue; a residual add is fused as the model
    compiler fuses it (one stage tagged dense_epilogue)."""
    lanes = lanes or TARGET.lanes("float32")
    X = tc.placeholder((M, K), name="X")
    if layout == "packed":
        W = tc.placeholder((-(-N // lanes), K, lanes), name="W")
        kw = {"weight_block": lanes, "out_features": N if N % lanes else None}
    else:
        W = tc.placeholder((K, N) if layout == "kn" else (N, K), name="W")
        kw = {"weight_in_out": layout == "kn"}
    b = tc.placeholder((N,), name="b") if "bias" in epilogue else None
    Y = tc.ops.dense(X, W, b, activation="gelu" if "gelu" in epilogue else None, **kw)
    if epilogue == "residual":
        R = tc.placeholder((M, N), name="R")
        Y = tc.compute((M, N), lambda i, j: Y[i, j] + R[i, j], name="epilogue", tag="dense_epilogue")
    return Y


def arrays(M, N, K, epilogue="none", layout="packed", lanes=None, seed=0):
    """(kernel arguments, numpy reference) for `dense`."""
    lanes = lanes or TARGET.lanes("float32")
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((M, K)).astype("float32"), rng.standard_normal((N, K)).astype("float32")
    b, r = rng.standard_normal(N).astype("float32"), rng.standard_normal((M, N)).astype("float32")
    ref = reference.dense(x, w, b if "bias" in epilogue else None, "gelu" if "gelu" in epilogue else None)
    if layout == "packed":
        blocks = -(-N // lanes)
        w = np.pad(w.T, ((0, 0), (0, blocks * lanes - N))).reshape(K, blocks, lanes).transpose(1, 0, 2).copy()
    elif layout == "kn":
        w = w.T.copy()
    args = [x, w] + ([b] if "bias" in epilogue else []) + ([r] if epilogue == "residual" else [])
    return args, ref + r if epilogue == "residual" else ref


def check(s_or_tensor, M, N, K, epilogue, layout, target="llvm", lanes=None):
    args, ref = arrays(M, N, K, epilogue, layout, lanes)
    got = tc.build(s_or_tensor, target=target)(*args)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def tag_of(Y) -> str:
    s = tc.Schedule(Y)
    return template_tag(s, s.state.outputs[0])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_every_row_count_layout_and_epilogue_matches_numpy(M, N, K, layout):
    epilogue = EPILOGUES[M % len(EPILOGUES)]
    Y = dense(M, N, K, epilogue, layout)
    assert tag_of(Y) == ("gemv_dot" if layout == "nk" else "gemv")
    check(Y, M, N, K, epilogue, layout)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_epilogue_at_one_row(layout, epilogue):
    check(dense(1, 77, 40, epilogue, layout), 1, 77, 40, epilogue, layout)


@pytest.mark.parametrize(
    "layout,params",
    [
        ("packed", {"nr": 16, "nc": 16, "ku": 1, "parallel": False}),
        ("packed", {"nr": 48, "nc": 96, "ku": 2}),
        ("kn", {"nr": 32, "nc": 160, "ku": 4}),
        ("nk", {"rows": 1, "lanes": 16, "nc": 5, "ku": 1}),
        ("nk", {"rows": 3, "lanes": 32, "nc": 12, "ku": 2}),
        ("nk", {"rows": 2, "lanes": 0, "nc": 8}),  # no partial sums: one product per step
        ("nk", {"rows": 4, "lanes": 64, "parallel": False}),  # lanes past K: one product per step
        ("nk", {"rows": 2, "lanes": 45, "nc": 50}),  # lanes equal to K: the whole row in one step
    ],
)
def test_explicit_parameters_and_tails(layout, params):
    M, N, K = 3, 50, 45
    Y = dense(M, N, K, "bias_gelu", layout)
    check(template_schedule(Y, "llvm", **params), M, N, K, "bias_gelu", layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_trace_round_trips_and_the_interpreter_agrees(layout):
    M, N, K = 2, 21, 19
    s = template_schedule(dense(M, N, K, "bias", layout), "llvm")
    kernel = roundtrip(s)
    args, ref = arrays(M, N, K, "bias", layout)
    (got,) = interpret_outputs(kernel, args)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_more_rows_keep_the_gemm_template():
    for layout in LAYOUTS:
        assert tag_of(dense(MAX_ROWS + 1, 64, 32, "none", layout)) == "dense"
        assert tag_of(dense(MAX_ROWS + 1, 64, 32, "bias", layout)) == "dense_epilogue"
        assert tag_of(dense(MAX_ROWS, 64, 32, "bias", layout)) in ("gemv", "gemv_dot")
    X, B = tc.placeholder((1, 32), name="X"), tc.placeholder((32, 64), name="B")
    assert tag_of(tc.ops.matmul(X, B)) == "matmul"  # only dense layers


def test_build_streams_the_packed_weight_in_place():
    """tc.build takes gemv: all rows in one register tile over the whole of K (no k blocks, no
    packed copy of W), parallel over column panels."""
    lanes = TARGET.lanes("float32")
    f = tc.build(dense(4, 32 * lanes, 256, "bias_gelu"))
    text = str(f.kernel)
    nr = gemv_vectors(TARGET, 4, 32 * lanes, "float32", lanes) * lanes
    assert f'alloc("local", float32[4, {nr}]) as dense' in text and "W_local" not in text
    assert "parallel(" in text and "k_o in range(64)" in text  # 256 / ku=4: one loop over the whole of K


def test_tiles_come_from_the_target():
    """AVX2's 16 registers hold 8 rows x 1 vector; AVX-512's 32 hold more vectors; a tile of
    more vectors never reads W slower per cycle."""
    assert gemv_vectors(AVX2, 8, 4096, "float32") == 1
    assert gemv_vectors(AVX2, 1, 4096, "float32") > 1
    wide = parse_target("llvm -mcpu=skylake-avx512 -num-cores=2")
    assert gemv_vectors(wide, 8, 4096, "float32") >= 2
    hw = wide.hardware
    rates = [step_bytes_per_cycle(hw, 4 * n, n, 4, 64 * n) for n in range(1, 6)]
    assert rates == sorted(rates)
    p = DEFAULTS["gemv"](tc.Schedule(dense(1, 1024, 64, "none", "packed", 8)), "dense", AVX2)
    assert p["nr"] % 8 == 0 and p["nc"] % p["nr"] == 0


def test_avx2_target_builds_and_matches():
    check(template_schedule(dense(5, 45, 33, "bias", "packed", 8), AVX2), 5, 45, 33, "bias", "packed", AVX2, 8)
    check(template_schedule(dense(5, 45, 33, "bias", "nk"), AVX2), 5, 45, 33, "bias", "nk", AVX2)


def test_wrong_form_and_bad_parameters_are_schedule_errors():
    Y = dense(2, 40, 30, "bias", "nk")
    s = tc.Schedule(Y)
    with pytest.raises(ScheduleError, match="gemv template: dense reads W along K"):
        TEMPLATES["gemv"](s, s.state.outputs[0], TARGET)
    with pytest.raises(ScheduleError, match="lanes must be an int >= 0"):
        template_schedule(Y, "llvm", lanes=-1)
    with pytest.raises(ScheduleError, match="nr must be a positive int"):
        template_schedule(dense(2, 40, 30), "llvm", nr=0)


@pytest.mark.parametrize("layout", ["packed", "nk"])
def test_the_tuners_space_is_the_templates(layout):
    M, N, K = 3, 70, 40
    Y = dense(M, N, K, "bias", layout)
    space = Space([Y], TARGET)
    assert space.tag == ("gemv" if layout == "packed" else "gemv_dot")
    first = space.first_program()
    assert str(tc.lower(first.schedule)) == str(tc.lower(template_schedule(Y, TARGET)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        try:
            candidate = space.sample(rng)
        except ScheduleError:
            continue
        check(candidate.schedule, M, N, K, "bias", layout)


def test_a_decode_step_of_the_model_compiler_takes_gemv():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.proj = torch.nn.Linear(40, 72), torch.nn.Linear(72, 40)

        def forward(self, x):
            return x + self.proj(torch.nn.functional.gelu(self.fc(x)))

    model, x = Block().eval(), torch.randn(2, 40)
    compiled = tc.compile(model, (x,))
    with torch.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
    dense_tasks = [t for t in compiled.tasks if "dense" in str(t)]
    assert dense_tasks and all(tag_of(t.outputs) == "gemv" for t in dense_tasks)
