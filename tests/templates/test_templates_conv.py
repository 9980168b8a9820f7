"""Schedule templates of the convolution family (minitc/templates/conv.py): conv2d,
depthwise_conv2d, max_pool2d and avg_pool2d built with their defaults (`tc.build(Y)`) and with
explicit sizes, against the numpy references, on shapes that do not divide the tile sizes;
every template's trace round-trips through JSON."""

import re

import numpy as np
import pytest
from helpers import roundtrip, template_with

import minitc as tc
from minitc.ops import reference as ref
from minitc.target import parse_target
from minitc.templates import DEFAULTS, TEMPLATES, load_templates

pytestmark = pytest.mark.avx2
TARGET = parse_target("llvm")
AVX2 = parse_target("llvm -mcpu=znver2 -num-cores=2")  # for tests of a template's structure, whatever the host
TOL = dict(rtol=2e-4, atol=2e-4)


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def _schedule(out, target=TARGET, **params):
    return template_with(out, target, **params)


def _check(out, inputs, expected, **params):
    """Build `out` with its template (defaults when no params: through tc.build(out)), compare
    with the reference, and check the template's trace round-trips."""
    s = _schedule(out, **params)
    f = tc.build(s) if params else tc.build(out)
    if not params:
        assert str(f.kernel) == str(tc.lower(s))  # tc.build(out) uses the template
    np.testing.assert_allclose(f(*inputs), expected, **TOL)
    roundtrip(s)
    return f


# -- conv2d -----------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, stride, padding, dilation
    ((1, 3, 7, 9), (5, 3, 3, 3), 1, 1, 1),
    ((2, 3, 7, 9), (5, 3, 3, 3), 2, 0, 1),
    ((1, 4, 9, 11), (6, 4, 3, 3), 1, 2, 2),
    ((1, 5, 10, 12), (7, 5, 3, 2), (2, 1), (1, 0), 1),
    ((1, 16, 8, 16), (24, 16, 1, 1), 1, 0, 1),
    ((1, 2, 9, 10), (3, 2, 2, 4), 2, (1, 2), (2, 1)),
]


@pytest.mark.parametrize("xs, ws, stride, padding, dilation", CONV_CASES)
def test_conv2d_default(xs, ws, stride, padding, dilation):
    X, W = tc.placeholder(xs, name="X"), tc.placeholder(ws, name="W")
    Y = tc.ops.conv2d(X, W, stride=stride, padding=padding, dilation=dilation)
    x, w = _arrays(xs, ws)
    _check(Y, [x, w], ref.conv2d(x, w, stride=stride, padding=padding, dilation=dilation))


@pytest.mark.parametrize(
    "params",
    [
        dict(kb=3, ohb=2, owv=2, lanes=8, rcb=2, kgroups=2, unroll_window=False),  # nothing divides
        dict(kb=2, ohb=3, owv=1, lanes=4, rcb=0, kgroups=1, unroll_window=False),
        dict(kb=5, ohb=1, owv=1, lanes=7, pad="inline"),
        dict(kb=2, ohb=2, owv=1, lanes=8, pad="root", kgroups=3),
    ],
)
def test_conv2d_explicit_params(params):
    X, W = tc.placeholder((1, 5, 9, 13), name="X"), tc.placeholder((7, 5, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    x, w = _arrays((1, 5, 9, 13), (7, 5, 3, 3), seed=1)
    _check(Y, [x, w], ref.conv2d(x, w, padding=1), **params)


@pytest.mark.parametrize(
    "stride, params",
    [(1, {}), (2, {}), (1, dict(kb=3, ohb=2, owv=1, lanes=4, kgroups=2, pad="root"))],
    ids=["defaults", "strided", "nothing-divides"],
)
def test_conv2d_with_an_elementwise_epilogue(stride, params):
    """A fused kernel of the model front end: relu(conv + bias + residual), tagged conv2d. The
    template finds the convolution under the epilogue and applies the epilogue to each
    accumulator tile as it is stored: no separate pass over the output."""
    X, W = tc.placeholder((1, 6, 11, 13), name="X"), tc.placeholder((8, 6, 3, 3), name="W")
    conv = tc.ops.conv2d(X, W, stride=stride, padding=1)
    B, R = tc.placeholder((8, 1, 1), name="B"), tc.placeholder(conv.shape, name="R")
    y = tc.ops.relu(tc.ops.add(tc.ops.add(conv, B), R))
    out = tc.compute(y.shape, lambda *i: y[i], name="epilogue", tag="conv2d")
    x, w, b, r = _arrays((1, 6, 11, 13), (8, 6, 3, 3), (8, 1, 1), conv.shape, seed=2)
    f = _check(out, [x, w, b, r], np.maximum(ref.conv2d(x, w, stride=stride, padding=1) + b + r, 0), **params)
    text = str(f.kernel)
    assert text.count("epilogue[") == 1 and "conv2d_local[" in text.split("epilogue[")[1]  # stored from the tile
    assert "conv2d[" not in text  # the product is never written out whole


def test_conv2d_resnet_defaults_divide_the_shape():
    """conv-resnet (C=K=64, 56x56, 3x3): a full-width vector micro-kernel whose accumulators
    hide the FMA latency (latency x rate of the target's description) within AVX2's 12
    accumulator registers, and a row tile for the padding."""
    X, W = tc.placeholder((1, 64, 56, 56), name="X"), tc.placeholder((64, 64, 3, 3), name="W")
    s = tc.Schedule(tc.ops.conv2d(X, W, padding=1))
    load_templates()
    p = DEFAULTS["conv2d"](s, "conv2d", AVX2)
    accumulators = p["kb"] * p["ohb"] * p["owv"]
    assert p["lanes"] == 8 and AVX2.hardware.fma_chains <= accumulators <= 12
    text = str(tc.lower(_schedule(s.outputs[0], AVX2)))
    assert 'alloc("local", float32[1, 64, ' in text  # padded rows of one tile
    assert "vectorized(8)" in text and "parallel(" in text


def test_conv2d_micro_kernel_is_register_blocked():
    """The micro-kernel's accumulators live in registers: FMAs on vector registers, with the
    weights broadcast, and no accumulator traffic through memory in the innermost loop."""
    X, W = tc.placeholder((1, 8, 6, 16), name="X"), tc.placeholder((8, 8, 3, 3), name="W")
    f = tc.build(_schedule(tc.ops.conv2d(X, W, padding=1), kb=4, ohb=2, owv=2, lanes=8))
    assert "vfmadd231ps" in f.asm and "vbroadcastss" in f.asm


# -- conv2d with weights [C, R, S, K]: output channels in the lanes (conv_channels.py) ----------

CHANNEL_CASES = [
    # x shape, K, R x S, stride, padding, dilation
    ((1, 16, 7, 7), 32, (3, 3), 1, 1, 1),  # ResNet's last stage, scaled down
    ((1, 8, 14, 14), 16, (1, 1), 2, 0, 1),  # a strided 1x1 (the downsampling branch)
    ((2, 6, 9, 11), 24, (3, 2), (2, 1), (1, 0), (2, 1)),  # K not a multiple of the lanes
    ((1, 5, 5, 13), 7, (3, 3), 1, 2, 2),  # nothing divides
]


def _crsk(xs, k, rs, seed=0):
    X, W = tc.placeholder(xs, name="X"), tc.placeholder((xs[1], *rs, k), name="W")
    x, w = _arrays(xs, (xs[1], *rs, k), seed=seed)
    return X, W, x, w


@pytest.mark.parametrize("xs, k, rs, stride, padding, dilation", CHANNEL_CASES)
def test_conv2d_channel_vectors_default(xs, k, rs, stride, padding, dilation):
    X, W, x, w = _crsk(xs, k, rs)
    Y = tc.ops.conv2d(X, W, stride=stride, padding=padding, dilation=dilation, weight_layout="CRSK")
    kcrs = np.ascontiguousarray(w.transpose(3, 0, 1, 2))
    want = ref.conv2d(x, kcrs, stride=stride, padding=padding, dilation=dilation)
    np.testing.assert_allclose(want, ref.conv2d(x, w, stride, padding, dilation, weight_layout="CRSK"), **TOL)
    f = _check(Y, [x, w], want)
    assert "conv2d_local[" in str(f.kernel)


@pytest.mark.parametrize(
    "params",
    [
        dict(kb=3, ohb=2, owv=3, lanes=8, rcb=3, kgroups=2, unroll_window=False, pad="tile"),  # nothing divides
        dict(kb=1, ohb=5, owv=5, lanes=4, rcb=0, kgroups=1, pad="inline"),
        dict(kb=2, ohb=1, owv=1, lanes=16, rcb=2, kgroups=3, pad="root"),
    ],
)
def test_conv2d_channel_vectors_explicit_params(params):
    """Any sizes are legal (the design space samples them): partial tiles get guards."""
    X, W, x, w = _crsk((1, 5, 9, 13), 20, (3, 3), seed=1)
    Y = tc.ops.conv2d(X, W, padding=1, weight_layout="CRSK")
    _check(Y, [x, w], ref.conv2d(x, w, padding=1, weight_layout="CRSK"), **params)


def test_conv2d_channel_vectors_read_padded_weight_rows():
    """Weights [C, R, S, K'] with K' > out_channels (rows padded off a 1 KiB stride): only the
    first out_channels of each row are read."""
    X, W, x, w = _crsk((1, 8, 7, 7), 272, (1, 1), seed=4)
    w[..., 256:] = np.nan  # the padding is never read
    Y = tc.ops.conv2d(X, W, weight_layout="CRSK", out_channels=256)
    assert Y.shape == (1, 256, 7, 7) and Y.op.attrs["out_channels"] == 256
    _check(Y, [x, w], ref.conv2d(x, w, weight_layout="CRSK", out_channels=256))
    with pytest.raises(tc.ShapeError, match="out_channels=300 does not fit"):
        tc.ops.conv2d(X, W, weight_layout="CRSK", out_channels=300)


def test_conv2d_channel_vectors_apply_the_epilogue_per_tile():
    X, W, x, w = _crsk((1, 8, 7, 7), 32, (3, 3), seed=2)
    conv = tc.ops.conv2d(X, W, padding=1, weight_layout="CRSK")
    B, R = tc.placeholder((32, 1, 1), name="B"), tc.placeholder(conv.shape, name="R")
    y = tc.ops.relu(tc.ops.add(tc.ops.add(conv, B), R))
    out = tc.compute(y.shape, lambda *i: y[i], name="epilogue", tag="conv2d")
    b, r = _arrays((32, 1, 1), conv.shape, seed=3)
    want = np.maximum(ref.conv2d(x, w, padding=1, weight_layout="CRSK") + b + r, 0)
    text = str(_check(out, [x, w, b, r], want).kernel)
    assert text.count("epilogue[") == 1 and "conv2d_local[" in text.split("epilogue[")[1]


def test_conv2d_channel_vectors_micro_kernel_for_each_target():
    """Lanes and the accumulator tile follow the target: whole vectors of output channels, a
    tile of output columns that divides the row, the accumulators stored [n, oh, ow, k]."""
    X, W = tc.placeholder((1, 64, 14, 14), name="X"), tc.placeholder((64, 3, 3, 128), name="W")
    Y = tc.ops.conv2d(X, W, padding=1, weight_layout="CRSK")
    for target, lanes in ((AVX2, 8), (parse_target("llvm -mcpu=skylake-avx512 -num-cores=2"), 16)):
        s = tc.Schedule(Y)
        load_templates()
        p = DEFAULTS["conv2d"](s, "conv2d", target)
        acc = p["kb"] * p["owv"]
        assert p["lanes"] == lanes and 14 % p["owv"] == 0 and 128 % (p["kb"] * lanes) == 0
        assert acc + p["kb"] + 3 <= target.vector_registers and acc >= 6
        text = str(tc.lower(_schedule(Y, target)))
        assert (
            f"vectorized({lanes})" in text and f"float32[1, {p['ohb']}, 14, {p['kb'] * lanes}]) as conv2d_local" in text
        )


def test_channel_vectors_pay_where_rows_waste_lanes():
    from minitc.templates.conv_channels import channel_vectors_pay

    avx512 = parse_target("llvm -mcpu=skylake-avx512")

    def pay(target, k, c, r, width, stride=1):
        return channel_vectors_pay(target, "float32", (k, c, r, r), width, stride)

    assert pay(avx512, 512, 512, 3, 7) and pay(avx512, 64, 64, 3, 56) and pay(avx512, 512, 1024, 1, 7)
    assert not pay(avx512, 64, 64, 3, 112)  # 7 whole vectors per row
    assert not pay(avx512, 256, 64, 1, 56) and not pay(avx512, 384, 64, 1, 14)  # wide or shallow 1x1
    assert pay(avx512, 512, 256, 1, 28, stride=2)
    assert not pay(AVX2, 64, 64, 3, 56) and pay(AVX2, 64, 64, 3, 56, stride=2) and pay(AVX2, 64, 64, 3, 28)
    assert not pay(AVX2, 3, 16, 3, 7)  # three channels fill no vector


# -- depthwise_conv2d and pooling -------------------------------------------------------------

WINDOW_CASES = [
    # operator, x shape, w shape (or None), kwargs
    ("depthwise_conv2d", (1, 5, 7, 9), (5, 1, 3, 3), dict(padding=1)),
    ("depthwise_conv2d", (2, 3, 11, 13), (6, 1, 3, 3), dict(stride=2, padding=2, dilation=2)),
    ("depthwise_conv2d", (1, 4, 16, 16), (4, 3, 3), dict(stride=1, padding=0)),
    ("max_pool2d", (1, 5, 9, 11), None, dict(kernel=3, stride=2, padding=1)),
    ("max_pool2d", (2, 3, 8, 10), None, dict(kernel=2)),
    ("avg_pool2d", (1, 5, 9, 11), None, dict(kernel=3, stride=1, padding=1)),
    ("avg_pool2d", (1, 4, 16, 24), None, dict(kernel=(2, 3), stride=(2, 1), padding=(1, 1))),
]


def _window(op, xs, ws, kwargs, seed=0):
    X = tc.placeholder(xs, name="X")
    if ws is None:
        (x,) = _arrays(xs, seed=seed)
        return getattr(tc.ops, op)(X, **kwargs), [x], getattr(ref, op)(x, **kwargs)
    W = tc.placeholder(ws, name="W")
    x, w = _arrays(xs, ws, seed=seed)
    return getattr(tc.ops, op)(X, W, **kwargs), [x, w], getattr(ref, op)(x, w, **kwargs)


@pytest.mark.parametrize("op, xs, ws, kwargs", WINDOW_CASES)
def test_window_default(op, xs, ws, kwargs):
    Y, inputs, expected = _window(op, xs, ws, kwargs)
    _check(Y, inputs, expected)


@pytest.mark.parametrize(
    "case, params",
    [
        (WINDOW_CASES[0], dict(oht=3, ohb=2, owv=2, lanes=4)),  # nothing divides
        (WINDOW_CASES[3], dict(oht=5, ohb=5, owv=1, lanes=8, unroll_window=False, pad="inline")),
        (WINDOW_CASES[5], dict(oht=2, ohb=1, owv=3, lanes=3, pad="root")),
        (WINDOW_CASES[1], dict(oht=4, ohb=3, owv=1, lanes=2, pad="inline")),
    ],
)
def test_window_explicit_params(case, params):
    op, xs, ws, kwargs = case
    Y, inputs, expected = _window(op, xs, ws, kwargs, seed=2)
    _check(Y, inputs, expected, **params)


def test_every_conv_family_tag_has_a_template_and_defaults():
    load_templates()
    for tag in ("conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d"):
        assert tag in TEMPLATES and tag in DEFAULTS


def test_conv2d_pad_fill_wider_than_the_row():
    """lanes=16 on 7-wide rows fills the padded tile with 9-lane masked loads, which LLVM
    miscompiled (a wrong last column) until the backend made them 16 lanes, 7 masked off."""
    X, W = tc.placeholder((1, 16, 2, 7), name="X"), tc.placeholder((1, 16, 3, 3), name="W")
    x, w = _arrays((1, 16, 2, 7), (1, 16, 3, 3))
    params = dict(kb=1, ohb=1, owv=1, lanes=16, rcb=16, kgroups=1, unroll_window=True, pad="tile")
    f = tc.build(_schedule(tc.ops.conv2d(X, W, padding=1), AVX2, **params))
    np.testing.assert_allclose(f(x, w), ref.conv2d(x, w, padding=1), **TOL)


AVX512 = parse_target("llvm -mcpu=skylake-avx512 -num-cores=2")


@pytest.mark.parametrize("hw, lanes, wide", [(28, 14, 16), (7, 7, 8)])
def test_conv2d_odd_lane_rows_load_in_one_masked_load(hw, lanes, wide):
    """On AVX-512 an input vector of 14 or 7 lanes (rows of 56, 28, 14 or 7 columns) is one
    masked load of 16 or 8 lanes, not 8 + 4 + 2 pieces joined by shuffles on the FMA ports
    (llvm-mca: 71% -> 92% of the FMA peak on the Skylake-server model); the accumulator tile
    keeps plain loads, which LLVM keeps in registers. Built for the host, it matches numpy."""
    from minitc.backends import lower_schedule
    from minitc.backends.llvm.codegen import render
    from minitc.backends.llvm.vector import updated_buffers

    X, W = tc.placeholder((1, 8, hw, hw), name="X"), tc.placeholder((8, 8, 3, 3), name="W")
    Y = tc.ops.conv2d(X, W, padding=1)
    s = _schedule(Y, AVX512)
    assert DEFAULTS["conv2d"](tc.Schedule(Y), s.state.outputs[0], AVX512)["lanes"] == lanes
    kernel = lower_schedule(s, AVX512)
    assert {b.name for b in updated_buffers(kernel.body)} == {"conv2d_local"}
    ir = render(kernel, AVX512)
    base = dict(re.findall(r"(%p\.\d+) = getelementptr inbounds float, ptr %(\w+)", ir))
    masked = {base[p] for p in re.findall(rf"@llvm\.masked\.load\.v{wide}f32\.p0\(ptr (%p\.\d+)", ir)}
    plain = {base[p] for p in re.findall(rf"= load <{lanes} x float>, ptr (%p\.\d+)", ir)}
    assert any(b.startswith("conv2d_pad") for b in masked), masked  # (and X's under the padding guard)
    assert not any(b.startswith("conv2d_local") for b in masked), masked
    assert any(b.startswith("conv2d_local") for b in plain), plain
    x, w = _arrays((1, 8, hw, hw), (8, 8, 3, 3))
    np.testing.assert_allclose(tc.build(_schedule(Y))(x, w), ref.conv2d(x, w, padding=1), **TOL)
