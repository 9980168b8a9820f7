"""Templates of the memory-bound operators (minitc/templates/{elementwise,reduce,norm}.py):
tc.build(out) with the defaults against tc.ops.reference on shapes that do and do not divide
the vector width and tiles, explicit non-default parameters, the loop structure they promise,
and trace round trips."""

import numpy as np
import pytest
from helpers import roundtrip

import minitc as tc
from minitc.interp import interpret
from minitc.target import parse_target
from minitc.templates import DEFAULTS, TEMPLATES, load_templates

pytestmark = pytest.mark.avx2
load_templates()
TOL = dict(rtol=1e-4, atol=1e-5)
AVX2 = "llvm -mcpu=znver2 -num-cores=2"  # for tests of a template's structure, whatever the host
AVX512 = "llvm -mcpu=skylake-avx512 -num-cores=2"  # 16 float32 lanes: other splits than AVX2's
PAR = "parallel"  # AVX2 has two cores


def _data(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


def _schedule(out, target="llvm", **params):
    """The template of out's tag for `target`, its defaults overridden by `params`."""
    s = tc.Schedule(out)
    name = s.state.outputs[0]
    tag = s.state.stage(name).tag
    target = parse_target(target)
    p = DEFAULTS[tag](s, name, target)
    p.update(params)
    TEMPLATES[tag](s, name, target, **p)
    return s


def _check(out, placeholders, arrays, expected, **params):
    """Build with the defaults (tc.build(out)), or with `params` through the template; compare;
    and check the schedule's trace round trip."""
    s = _schedule(out, **params)
    f = tc.build(s, args=list(placeholders) + [out]) if params else tc.build(out)
    np.testing.assert_allclose(f(*arrays), expected, **TOL)
    roundtrip(s)
    return s


# -- elementwise ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7, 13), (1000,), (2, 3, 37), (4, 70), (5,)])
def test_elementwise_chain(shape):
    rng = np.random.default_rng(0)
    x = _data(rng, shape)
    X = tc.placeholder(shape, name="X")
    out = tc.ops.relu(tc.ops.add(tc.ops.mul(X, 1.5), -0.25))
    s = _check(out, [X], [x], np.maximum(x * 1.5 - 0.25, 0))
    assert [st.name for st in s.state.stages if not st.inline and not st.is_placeholder] == [out.name]


def test_elementwise_single_compute_and_broadcast():
    rng = np.random.default_rng(1)
    x, b = _data(rng, (6, 5, 33)), _data(rng, (5, 1))
    X, B = tc.placeholder(x.shape, name="X"), tc.placeholder(b.shape, name="B")
    out = tc.ops.sigmoid(tc.ops.add(X, B))
    _check(out, [X, B], [x, b], tc.ops.reference.sigmoid(x + b))
    y = tc.compute(x.shape, lambda i, j, k: tc.maximum(X[i, j, k] * 2.0 + 1.0, 0.0), name="y", tag="elementwise")
    _check(y, [X], [x], np.maximum(x * 2 + 1, 0))


@pytest.mark.parametrize("op", ["gelu", "tanh", "exp", "sigmoid"])
def test_elementwise_activations(op):
    rng = np.random.default_rng(2)
    x = _data(rng, (9, 41), 2.0)
    X = tc.placeholder(x.shape, name="X")
    out = getattr(tc.ops, op)(X)
    np.testing.assert_allclose(tc.build(out)(x), getattr(tc.ops.reference, op)(x), rtol=1e-5, atol=1e-6)


def test_bias_add_channels():
    rng = np.random.default_rng(3)
    x, b = _data(rng, (2, 6, 5, 7)), _data(rng, (6,))
    X, B = tc.placeholder(x.shape, name="X"), tc.placeholder(b.shape, name="B")
    out = tc.ops.bias_add(X, B, axis=1)
    _check(out, [X, B], [x, b], tc.ops.reference.bias_add(x, b, axis=1))


@pytest.mark.parametrize(
    "params", [dict(vector=8, parallel=True), dict(vector=5, parallel=False, inline=False), dict(vector=64)]
)
def test_elementwise_params(params):
    rng = np.random.default_rng(4)
    x = _data(rng, (3, 100))
    X = tc.placeholder(x.shape, name="X")
    out = tc.ops.tanh(tc.ops.mul(X, 0.5))
    _check(out, [X], [x], np.tanh(x * 0.5), **params)


def test_elementwise_loop_structure():
    X = tc.placeholder((64, 4096), name="X")
    text = str(tc.lower(tc.ops.relu(tc.ops.mul(X, 2.0)), target=AVX2))
    assert f"{PAR}(64)" in text and "vectorized(32)" in text
    X1 = tc.placeholder((1 << 20,), name="X")
    text = str(tc.lower(tc.ops.relu(X1), target=AVX2))
    assert f"{PAR}(32768)" in text and "vectorized(32)" in text  # 1-D: the chunks are shared
    small = str(tc.lower(tc.ops.relu(tc.placeholder((7, 13), name="X")), target=AVX2))
    assert "parallel" not in small and "vectorized(13)" in small  # whole rows, no tail


# -- reductions ----------------------------------------------------------------------------------

REDUCTIONS = [
    ((7, 13), -1, False),
    ((7, 13), 0, True),
    ((7, 13), None, False),
    ((1000,), 0, False),
    ((3, 4, 37), 0, False),
    ((3, 4, 37), 1, True),
    ((3, 4, 37), 2, False),
    ((2, 3, 4, 5), (0, 3), False),
    ((2, 9, 20), (1, 2), True),
    ((300, 64), -1, False),
    ((64, 300), 0, False),
]


@pytest.mark.parametrize("shape,axis,keepdims", REDUCTIONS)
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_reduce(op, shape, axis, keepdims):
    rng = np.random.default_rng(5)
    x = _data(rng, shape)
    X = tc.placeholder(shape, name="X")
    out = getattr(tc.ops, op)(X, axis=axis, keepdims=keepdims)
    _check(out, [X], [x], getattr(tc.ops.reference, op)(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize(
    "params",
    [
        dict(vector=8, rows=3, chunk=16, parallel=True),
        dict(vector=13, rows=16, chunk=40, parallel=False),
        dict(vector=8, lanes=8, rows=6, streams=4, parallel=True),  # a group of 4 and one of 2
        dict(vector=8, lanes=16, rows=5, streams=3, parallel=False),
    ],
)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reduce_params(params, axis):
    rng = np.random.default_rng(6)
    x = _data(rng, (10, 11, 50))
    X = tc.placeholder(x.shape, name="X")
    out = tc.ops.min(X, axis=axis)
    _check(out, [X], [x], x.min(axis=axis), **params)


def test_reduce_loop_structure():
    X = tc.placeholder((512, 1024), name="X")
    rows = str(tc.lower(tc.ops.sum(X, axis=-1), target="llvm -mcpu=znver5 -num-cores=2"))
    # per tile of 8 rows: partial sums of a cache line (16 floats) per row (rfactor), 4 rows
    # read side by side (Zen 5's row_streams), then the final step
    assert f"{PAR}(64)" in rows and 'alloc("local", float32[8, 16]) as sum_rf' in rows
    partial = rows[rows.index("for r1_o in range(64):") :]
    assert partial.index("for i0_i_1 in unrolled(4):") < partial.index("for r1_i_1 in vectorized(16):")
    assert "+ X[i0_o * 8 + i0_o_1 * 4 + i0_i_1, r1_o * 16 + r1_i_1]" in partial
    assert "for i0_i_3 in unrolled(8):" in rows  # the final step: 8 rows side by side
    # one row at a time, 4 vectors of partial sums per row
    one = str(tc.lower(_schedule(tc.ops.sum(X, axis=-1), target=AVX2, streams=1, lanes=32)))
    assert "sum_rf[i0, r1_i_1] = sum_rf[i0, r1_i_1] + X[i0_o * 8 + i0, r1_o * 32 + r1_i_1]" in one
    cols = str(tc.lower(tc.ops.sum(tc.placeholder((64, 16384), name="X"), axis=0), target=AVX2))
    assert f"{PAR}(4)" in cols and "for r0 in range(64)" in cols  # 16 KiB column chunks
    assert cols.index("for r0") < cols.rindex("vectorized(32)")  # rows streamed, chunk in L1


# Axis sets whose kept axes of extent 1 (keepdims, or size-1 dimensions) sit after the rows the
# template tiles, so the outer loops are not adjacent until reordered; the shapes make the
# template split the rows, the reduced contiguous axis (vector partial results) or the columns.
AXIS_SETS = [
    ((1, 8, 16, 16), (2, 3), True),  # adaptive_avg_pool2d(1) of a small CNN
    ((1, 8, 32, 32), (2, 3), True),
    ((1, 8, 32, 32), (2, 3), False),
    ((2, 8, 8, 8), (2, 3), True),
    ((2, 20, 9, 64), (1, 3), True),  # 9 rows: a tile of 8 and a guarded tail
    ((2, 20, 9, 64), (1, 3), False),
    ((1, 8, 1, 64), (3,), False),  # size-1 axes around the rows without keepdims
    ((3, 2, 4, 40), (0, 2), True),  # contiguous axis kept
    ((3, 2, 4, 40), (0, 2), False),
    ((4, 6, 70), (0, 2), True),
    ((4, 6, 70), (1,), True),
    ((5, 9, 48), (2,), True),
    ((2, 3, 4, 40), None, True),  # a full reduction
]


@pytest.mark.parametrize("target", [AVX2, AVX512])
@pytest.mark.parametrize("shape,axis,keepdims", AXIS_SETS)
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reduce_axis_sets(op, shape, axis, keepdims, target):
    """The default schedule for a pinned target is legal, replays, and computes the numpy
    result in the reference interpreter (whatever the host runs); natively too for AVX2."""
    rng = np.random.default_rng(9)
    x = _data(rng, shape)
    X = tc.placeholder(shape, name="X")
    out = getattr(tc.ops, op)(X, axis=axis, keepdims=keepdims)
    expected = getattr(tc.ops.reference, op)(x, axis=axis, keepdims=keepdims)
    kernel = roundtrip(_schedule(out, target=target))
    got = np.zeros(expected.shape, "float32")
    interpret(kernel, [x, got])
    np.testing.assert_allclose(got, expected, **TOL)
    if target == AVX2:
        np.testing.assert_allclose(tc.build(out, target=AVX2)(x), expected, **TOL)


@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_reduce_keepdims_rows_tiled(target):
    """A mean over (2, 3) with keepdims: vector partial results per channel, the channels'
    final step unrolled, the size-1 loops outside fused around them."""
    X = tc.placeholder((1, 8, 32, 32), name="X")
    text = str(tc.lower(tc.ops.mean(X, axis=(2, 3), keepdims=True), target=target))
    assert "as mean_rf" in text and "vectorized(" in text and "unrolled(8)" in text


def test_reduce_reading_no_reduced_axis():
    """A reduction whose body does not read along its reduction axis, with size-1 kept axes
    between the others: those are parallelized, fused."""
    rng = np.random.default_rng(10)
    x = _data(rng, (6, 1, 5))
    X = tc.placeholder(x.shape, name="X")
    k = tc.reduce_axis(4, name="k")
    y = tc.compute(x.shape, lambda i, j, m: tc.sum(X[i, j, m] * 2.0, axis=k), name="y", tag="reduce")
    s = _check(y, [X], [x], 8 * x, parallel=True)
    assert f"{PAR}(30)" in str(tc.lower(s))


def test_adaptive_avg_pool_head_compiles():
    """tc.compile of a CNN whose head is adaptive_avg_pool2d, at a shape where the mean's
    default schedule tiles the channels with vector partial results."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()
    x = torch.randn(1, 3, 32, 32)
    compiled = tc.compile(model, x, target=AVX2, fallback=False)
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(compiled(x)), model(x).numpy(), **TOL)


# -- softmax and layer_norm ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,axis",
    [((7, 13), -1), ((7, 13), 0), ((17,), 0), ((3, 4, 37), 1), ((3, 4, 37), 0), ((3, 5, 37), -1), ((40, 128), -1)],
)
def test_softmax(shape, axis):
    rng = np.random.default_rng(7)
    x = _data(rng, shape, 3.0)
    X = tc.placeholder(shape, name="X")
    out = tc.ops.softmax(X, axis=axis)
    _check(out, [X], [x], tc.ops.reference.softmax(x, axis=axis))


@pytest.mark.parametrize(
    "params", [dict(rows=3, vector=8, chunk=8, parallel=True), dict(rows=1, vector=16, chunk=5, parallel=False)]
)
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_params(params, axis):
    rng = np.random.default_rng(8)
    x = _data(rng, (11, 29), 2.0)
    X = tc.placeholder(x.shape, name="X")
    out = tc.ops.softmax(X, axis=axis, name="sm")
    _check(out, [X], [x], tc.ops.reference.softmax(x, axis=axis), **params)


def test_softmax_loop_structure():
    X = tc.placeholder((1536, 128), name="X")
    text = str(tc.lower(tc.ops.softmax(X), target=AVX2))
    head = text.splitlines()[1]
    assert head.strip() == f"for i0_o in {PAR}(48):"  # one tile loop of 32 short rows; everything inside it
    assert text.count(f"{PAR}(") == 1 and "float32[32, 128]" in text and "unrolled(32)" in text
    for stat in ("softmax_max_rf", "softmax_sum_rf"):  # vector partial results: 32 rows x 2 vectors
        assert f'alloc("local", float32[32, 16]) as {stat}' in text


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_inlines_an_elementwise_prologue(axis):
    """Attention's scores plus mask, computed inside the softmax's tiles (read twice, never
    stored), with a fully masked row."""
    rng = np.random.default_rng(10)
    x, m = _data(rng, (2, 6, 24), 2.0), _data(rng, (1, 6, 24))
    m[0, 2, :] = -np.inf
    X, M = tc.placeholder(x.shape, name="X"), tc.placeholder(m.shape, name="M")
    out = tc.ops.softmax(tc.ops.add(X, M), axis=axis, safe=True)
    text = str(tc.lower(out, target=AVX2))
    assert 'alloc("global"' not in text and " add[" not in text  # the sum is never stored
    with np.errstate(invalid="ignore"):
        expected = np.nan_to_num(tc.ops.reference.softmax(x + m, axis=axis), nan=0.0)
    _check(out, [X, M], [x, m], expected)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_gives_no_denormals_under_a_large_mask(axis):
    """Swin's shifted-window mask adds -100: exp(-100) is a denormal float32 that slows every
    kernel reading it ~20x. Terms far below the row's max are 0 (ops.norm.FLUSH_BELOW), within
    the tolerance of the exact softmax."""
    rng = np.random.default_rng(11)
    x = _data(rng, (9, 49))
    far = np.add.outer(np.arange(9), np.arange(49)) % 3 == 0  # in every row and every column
    x[far] -= 100.0
    X = tc.placeholder(x.shape, name="X")
    got = tc.build(tc.ops.softmax(X, axis=axis))(x)
    np.testing.assert_allclose(got, tc.ops.reference.softmax(x, axis=axis), **TOL)
    tiny = (got != 0) & (np.abs(got) < np.finfo(np.float32).tiny)
    assert not tiny.any() and (got[far] == 0).all()


@pytest.mark.parametrize("shape", [(7, 13), (2, 3, 40), (16,), (33, 64)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, affine):
    rng = np.random.default_rng(9)
    x = _data(rng, shape, 2.0) + 1
    g, b = _data(rng, shape[-1:]), _data(rng, shape[-1:])
    X = tc.placeholder(shape, name="X")
    G, B = (tc.placeholder(shape[-1:], name="G"), tc.placeholder(shape[-1:], name="B")) if affine else (None, None)
    out = tc.ops.layer_norm(X, G, B)
    phs, arrays = ([X, G, B], [x, g, b]) if affine else ([X], [x])
    expected = tc.ops.reference.layer_norm(x, g if affine else None, b if affine else None)
    _check(out, phs, arrays, expected)
    _check(out, phs, arrays, expected, rows=5, vector=8, parallel=True)


def test_bad_parameters_are_schedule_errors():
    X = tc.placeholder((8, 8), name="X")
    with pytest.raises(tc.ScheduleError, match="vector must be a positive int"):
        _schedule(tc.ops.relu(X), vector=0)
    with pytest.raises(tc.ScheduleError, match="rows must be a positive int"):
        _schedule(tc.ops.softmax(X), rows=2.5)
