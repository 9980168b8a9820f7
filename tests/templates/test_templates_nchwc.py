"""Templates of channel-blocked data (minitc/templates/conv_nchwc.py): conv2d_nchwc and the window
template of depthwise convolution and pooling, with their defaults and explicit sizes, against
the numpy references; the choices each target description gives (without running them); a
fused epilogue; the traces round-trip."""

import numpy as np
import pytest
from helpers import roundtrip, template_with

import minitc as tc
from minitc.ops import nchwc
from minitc.ops import reference as ref
from minitc.target import parse_target
from minitc.templates import DEFAULTS, TEMPLATES, load_templates
from minitc.templates.gemm_blocking import kc_from_l1

pytestmark = pytest.mark.avx2
TOL = dict(rtol=2e-4, atol=2e-4)
TARGETS = {  # name: (target, vector registers, float lanes)
    "haswell": (parse_target("llvm -mcpu=haswell -num-cores=4"), 16, 8),
    "znver2": (parse_target("llvm -mcpu=znver2 -num-cores=2"), 16, 8),
    "znver4": (parse_target("llvm -mcpu=znver4 -num-cores=2"), 32, 16),
    "sapphirerapids": (parse_target("llvm -mcpu=sapphirerapids -num-cores=56"), 32, 16),
}


def _blocked_conv(n, c, h, w, k, r, cb, kb, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    x = ref.to_nchwc(rng.standard_normal((n, c, h, w)).astype("float32"), cb)
    wt = ref.to_blocked_weight(rng.standard_normal((k, c, r, r)).astype("float32"), cb, kb)
    X, W = tc.placeholder(x.shape, name="X"), tc.placeholder(wt.shape, name="W")
    return nchwc.conv2d_nchwc(X, W, **attrs), x, wt


def _schedule(out, target, **params):
    return template_with(out, target, **params)


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((1, 16, 9, 9, 16, 3, 8, 8), dict(padding=1)),
        ((2, 3, 10, 12, 8, 3, 3, 8), dict(stride=2, padding=1)),  # a network's input: one block of 3
        ((1, 16, 7, 7, 32, 1, 16, 16), {}),
        ((1, 1024, 7, 7, 64, 1, 16, 16), {}),  # a 1x1 whose weights overflow the L1d: k blocked
        ((1, 8, 11, 11, 8, 3, 8, 4), dict(stride=(2, 1), padding=2, dilation=2)),
    ],
)
def test_conv2d_nchwc_default_matches_numpy(shape, attrs):
    out, x, w = _blocked_conv(*shape, **attrs)
    f = tc.build(out)
    assert "conv2d_nchwc_local" in str(f.kernel)  # the template, not the naive nest
    np.testing.assert_allclose(f(x, w), ref.conv2d_nchwc(x, w, **attrs), **TOL)
    roundtrip(_schedule(out, parse_target("llvm")))


@pytest.mark.parametrize(
    "params",
    [
        dict(kb=1, pixels=3, ohb=2, rcb=1, pad="tile"),  # tiles that do not divide the shape
        dict(kb=2, pixels=4, ohb=1, rcb=0, pad="inline", unroll_window=False),
        dict(kb=1, pixels=5, ohb=3, rcb=1, pad="tile", rows_task=True),  # each task runs every channel group
        dict(kb=2, pixels=5, ohb=2, rcb=0, pad="root", rows_task=True),
    ],
)
def test_conv2d_nchwc_explicit_params(params):
    out, x, w = _blocked_conv(1, 16, 9, 10, 24, 3, 8, 8, seed=1, padding=1)
    f = tc.build(_schedule(out, parse_target("llvm"), **params))
    np.testing.assert_allclose(f(x, w), ref.conv2d_nchwc(x, w, padding=1), **TOL)


def test_conv2d_nchwc_applies_a_fused_epilogue_as_it_stores():
    conv, x, w = _blocked_conv(1, 8, 6, 6, 16, 3, 8, 8, seed=2, padding=1)
    B, R = tc.placeholder((2, 1, 1, 8), name="B"), tc.placeholder(conv.shape, name="R")
    y = tc.ops.relu(tc.ops.add(tc.ops.add(conv, B), R))
    out = tc.compute(y.shape, lambda *i: y[i], name="epilogue", tag="conv2d_nchwc")
    rng = np.random.default_rng(3)
    b, r = rng.standard_normal((2, 1, 1, 8)).astype("float32"), rng.standard_normal(conv.shape).astype("float32")
    f = tc.build(out)
    text = str(f.kernel)
    assert text.count("epilogue[") == 1 and "conv2d_nchwc_local[" in text.split("epilogue[")[1]
    np.testing.assert_allclose(f(x, w, b, r), np.maximum(ref.conv2d_nchwc(x, w, padding=1) + b + r, 0), **TOL)


@pytest.mark.parametrize("rcb, local", [(0, "[1, 2, 1, 7, 16]"), (2, "[1, 2, 1, 7, 16]"), (1, "[1, 2, 7, 7, 16]")])
def test_conv2d_nchwc_keeps_a_task_tile_only_for_a_split_reduction(rcb, local):
    """One pass over the reduction (rcb 0, or all input blocks) accumulates each micro-tile in
    registers and stores it through the epilogue; a split reduction keeps the task's tile."""
    conv, x, w = _blocked_conv(1, 32, 7, 7, 32, 3, 16, 16, seed=4, padding=1)
    B = tc.placeholder((2, 1, 1, 16), name="B")
    y = tc.ops.relu(tc.ops.add(conv, B))
    out = tc.compute(y.shape, lambda *i: y[i], name="epilogue", tag="conv2d_nchwc")
    b = np.random.default_rng(5).standard_normal((2, 1, 1, 16)).astype("float32")
    s = _schedule(out, parse_target("llvm -mcpu=znver4 -num-cores=2"), kb=2, pixels=7, ohb=7, rcb=rcb)
    assert f'alloc("local", float32{local}) as conv2d_nchwc_local' in str(roundtrip(s))
    s = _schedule(out, parse_target("llvm -mcpu=haswell -num-cores=2"), kb=2, pixels=7, ohb=7, rcb=rcb)
    f = tc.build(s)
    np.testing.assert_allclose(f(x, w, b), np.maximum(ref.conv2d_nchwc(x, w, padding=1) + b, 0), **TOL)


@pytest.mark.parametrize("name", list(TARGETS))
def test_conv2d_nchwc_micro_kernel_fits_each_targets_registers(name):
    """ResNet's 3x3 layer at 14x14 in the target's blocks: the accumulators, kb weight vectors
    and a broadcast fit the vector registers, the tile divides the row and the blocks, and the
    accumulator vectors are whole blocks."""
    target, registers, lanes = TARGETS[name]
    out, _, _ = _blocked_conv(1, 256, 14, 14, 256, 3, lanes, lanes, padding=1)
    s = tc.Schedule(out)
    load_templates()
    p = DEFAULTS["conv2d_nchwc"](s, "conv2d_nchwc", target)
    accumulators = p["kb"] * p["pixels"]
    assert accumulators + p["kb"] + 1 <= registers - 2 and accumulators >= 6
    assert 14 % p["pixels"] == 0 and (256 // lanes) % p["kb"] == 0
    assert f"vectorized({lanes})" in str(tc.lower(_schedule(out, target)))


@pytest.mark.parametrize("name", list(TARGETS))
def test_conv2d_nchwc_splits_a_windows_reduction_and_a_1x1s_only_past_the_l1(name):
    """ResNet's layer3 at 14x14, 1024 channels: a 3x3 window's reduction is split into blocks
    whose weights and input rows fit half the L1d (one block where none fits); a 1x1's into the
    BLIS kc from L1 of its kc x (kb x block) weight panel, as its task's weights overflow the
    L1d; a 1x1 over 64 channels, whose weights fit, runs its whole reduction in one pass."""
    target, _, lanes = TARGETS[name]
    load_templates()
    window, _, _ = _blocked_conv(1, 1024, 14, 14, 256, 3, lanes, lanes, padding=1)
    pointwise, _, _ = _blocked_conv(1, 1024, 14, 14, 256, 1, lanes, lanes)
    narrow, _, _ = _blocked_conv(1, 64, 14, 14, 256, 1, lanes, lanes)
    p = DEFAULTS["conv2d_nchwc"](tc.Schedule(window), "conv2d_nchwc", target)
    blocks = 1024 // lanes
    assert 0 < p["rcb"] < blocks and blocks % p["rcb"] == 0
    in_rows, in_cols = p["ohb"] + 2, 16
    per_block = 4 * lanes * (9 * p["kb"] * lanes + in_rows * in_cols)
    assert p["rcb"] == 1 or p["rcb"] * per_block <= target.cache_bytes("l1d") // 2
    q = DEFAULTS["conv2d_nchwc"](tc.Schedule(pointwise), "conv2d_nchwc", target)
    kc = kc_from_l1(target.hardware, q["pixels"], q["kb"] * lanes, 4)
    assert 0 < q["rcb"] < blocks and blocks % q["rcb"] == 0
    assert q["rcb"] * lanes <= kc < 2 * q["rcb"] * lanes
    assert DEFAULTS["conv2d_nchwc"](tc.Schedule(narrow), "conv2d_nchwc", target)["rcb"] == 0


@pytest.mark.parametrize("name", list(TARGETS))
def test_conv2d_nchwc_orders_tasks_to_read_less(name):
    """ResNet's 256 -> 64 1x1 at 56x56 (3.2 MB of input, 64 KiB of weights): tasks over row
    blocks, each running every output-channel group, read the input once; the 2048 -> 512 1x1
    at 7x7 (0.4 MB of input, 4 MiB of weights) keeps tasks over channel groups, which read the
    weights once. Either way at least four tasks per core where the rows allow: 56 cores get too few row
    blocks."""
    target, _, lanes = TARGETS[name]
    load_templates()
    wide, _, _ = _blocked_conv(1, 256, 56, 56, 64, 1, lanes, lanes)
    deep, _, _ = _blocked_conv(1, 2048, 7, 7, 512, 1, lanes, lanes)
    p = DEFAULTS["conv2d_nchwc"](tc.Schedule(wide), "conv2d_nchwc", target)
    assert p["rows_task"] == (56 >= 4 * target.num_cores)
    assert not p["rows_task"] or 56 // p["ohb"] >= 4 * target.num_cores
    q = DEFAULTS["conv2d_nchwc"](tc.Schedule(deep), "conv2d_nchwc", target)
    assert not q["rows_task"] and (q["ohb"] == 1 or (512 // lanes // q["kb"]) * (7 // q["ohb"]) >= 4 * target.num_cores)


@pytest.mark.parametrize("name", list(TARGETS))
def test_conv2d_nchwc_reads_a_narrow_input_block_through_its_padding(name):
    """A network's input (one block of 3 colours, narrower than a vector) is padded inside the
    reads; a block of whole vectors is padded once, before the convolution."""
    target, _, lanes = TARGETS[name]
    load_templates()
    stem, _, _ = _blocked_conv(1, 3, 32, 32, 64, 7, 3, lanes, stride=2, padding=3)
    layer, _, _ = _blocked_conv(1, 64, 14, 14, 64, 3, lanes, lanes, padding=1)
    assert DEFAULTS["conv2d_nchwc"](tc.Schedule(stem), "conv2d_nchwc", target)["pad"] == "inline"
    assert DEFAULTS["conv2d_nchwc"](tc.Schedule(layer), "conv2d_nchwc", target)["pad"] == "root"


def test_sixteen_channel_blocks_on_an_avx2_target_take_two_registers_a_vector():
    target, registers, _ = TARGETS["znver2"]
    out, _, _ = _blocked_conv(1, 64, 14, 14, 64, 3, 16, 16)
    p = DEFAULTS["conv2d_nchwc"](tc.Schedule(out), "conv2d_nchwc", target)
    assert 2 * p["kb"] * p["pixels"] + 2 * p["kb"] + 1 <= registers - 2


WINDOW_CASES = [
    (nchwc.depthwise_conv2d_nchwc, dict(stride=1, padding=1), (3, 3)),
    (nchwc.depthwise_conv2d_nchwc, dict(stride=2, padding=2, dilation=2), (3, 3)),
    (nchwc.max_pool2d_nchwc, dict(kernel=3, stride=2, padding=1), None),
    (nchwc.avg_pool2d_nchwc, dict(kernel=(2, 3), stride=(2, 1), padding=(1, 0)), None),
]


@pytest.mark.parametrize("op, attrs, window", WINDOW_CASES)
def test_window_templates_match_numpy(op, attrs, window):
    rng = np.random.default_rng(4)
    x = ref.to_nchwc(rng.standard_normal((2, 16, 9, 11)).astype("float32"), 8)
    X = tc.placeholder(x.shape, name="X")
    args = [x]
    if window:
        w = rng.standard_normal((2, *window, 8)).astype("float32")
        out = op(X, tc.placeholder(w.shape, name="W"), **attrs)
        args.append(w)
    else:
        out = op(X, **attrs)
    want = getattr(ref, op.__name__)(*args, **attrs)
    np.testing.assert_allclose(tc.build(out)(*args), want, **TOL)
    s = _schedule(out, parse_target("llvm"), oht=2, pixels=4)
    np.testing.assert_allclose(tc.build(s)(*args), want, **TOL)
    roundtrip(s)


def test_every_blocked_tag_has_a_template_and_defaults():
    load_templates()
    for tag in ("conv2d_nchwc", "depthwise_conv2d_nchwc", "max_pool2d_nchwc", "avg_pool2d_nchwc"):
        assert tag in TEMPLATES and tag in DEFAULTS


def test_depthwise_reads_its_padding_in_place_and_pools_pad_their_tiles():
    load_templates()
    x = tc.placeholder((1, 4, 28, 28, 16), name="X")
    dw = nchwc.depthwise_conv2d_nchwc(x, tc.placeholder((4, 3, 3, 16), name="W"), padding=1)
    pool = nchwc.max_pool2d_nchwc(x, kernel=3, stride=2, padding=1)
    for out, pad in ((dw, "inline"), (pool, "tile")):
        s = tc.Schedule(out)
        name = s.state.outputs[0]
        assert DEFAULTS[s.state.stage(name).tag](s, name, parse_target("llvm -mcpu=znver4"))["pad"] == pad
