"""tc.ops: every operator's tensor-expression definition, evaluated with te_eval, against its
plain-numpy reference; the references against torch; argument errors. te_eval's own
semantics are in test_te_eval.py."""

import numpy as np
import pytest

import minitc as tc
import minitc.ops as ops
from minitc import te, te_eval
from minitc.errors import DTypeError, ShapeError
from minitc.ops import reference as ref

RTOL, ATOL = 1e-4, 1e-5


def _rand(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed + len(shape) * 7 + sum(shape)).standard_normal(shape).astype(dtype)


def _check(build, refn, arrays, names=None, **params):
    """Build the op on placeholders for `arrays` (None entries passed through), evaluate it
    with te_eval and compare with the reference."""
    names = names or [f"in{i}" for i in range(len(arrays))]
    phs = [None if a is None else tc.placeholder(a.shape, a.dtype.name, name=n) for a, n in zip(arrays, names)]
    out = build(*phs, **params)
    (got,) = te_eval.evaluate(out, {p: a for p, a in zip(phs, arrays) if p is not None})
    expected = refn(*arrays, **params)
    assert got.shape == out.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    return out


def _stages(out):
    return [t.name for t in te.graph([out]) if isinstance(t.op, te.ComputeOp)]


# ---------------------------------------------------------------------------------------------
# every registered op, random examples


@pytest.mark.parametrize("name", sorted(ops.OPS))
def test_registry_examples_match_reference(name):
    spec = ops.OPS[name]
    build, reference, make_inputs = spec  # the registry entries unpack as triples
    assert build is getattr(ops, name) and reference is getattr(ref, name)
    rng = np.random.default_rng(42)
    for size in ("tiny", "small", "small", "small"):
        inst = spec.instantiate(size, rng)
        (got,) = te_eval.evaluate(inst.output, inst.inputs)
        np.testing.assert_allclose(got, inst.expected(), rtol=RTOL, atol=ATOL, err_msg=f"{name} {inst.params}")


def test_registry_medium_shapes_are_built():
    for name, spec in ops.OPS.items():
        arrays, params = spec.make_inputs("medium")
        out = spec.build(*[tc.placeholder(a.shape, a.dtype.name) for a in arrays], **params)
        assert out.shape == spec.reference(*[np.ones(a.shape, a.dtype) for a in arrays], **params).shape, name


def test_registry_rejects_unknown_size():
    with pytest.raises(ValueError, match="size class"):
        ops.OPS["matmul"].make_inputs("huge")


# ---------------------------------------------------------------------------------------------
# linear algebra


@pytest.mark.parametrize("m,k,n", [(3, 4, 5), (1, 7, 1), (16, 9, 12)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(m, k, n, ta, tb):
    a = _rand(k, m) if ta else _rand(m, k)
    b = _rand(n, k, seed=1) if tb else _rand(k, n, seed=1)
    out = _check(ops.matmul, ref.matmul, [a, b], transpose_a=ta, transpose_b=tb)
    assert out.shape == (m, n) and _stages(out) == ["matmul"]


def test_matmul_int32():
    a = np.arange(12, dtype="int32").reshape(3, 4) - 5
    b = np.arange(8, dtype="int32").reshape(4, 2)
    _check(ops.matmul, ref.matmul, [a, b])


@pytest.mark.parametrize(
    "sa,sb,ta,tb",
    [
        ((2, 3, 4), (2, 4, 5), False, False),
        ((3, 4, 2), (3, 4, 5), True, False),
        ((1, 3, 4), (4, 5, 4), False, True),
        ((4, 3, 6), (1, 6, 2), False, False),
    ],
)
def test_batch_matmul(sa, sb, ta, tb):
    _check(ops.batch_matmul, ref.batch_matmul, [_rand(*sa), _rand(*sb, seed=3)], transpose_a=ta, transpose_b=tb)


@pytest.mark.parametrize(
    "bias,act,stages",
    [
        (False, None, ["dense"]),
        (True, None, ["dense", "dense_bias"]),
        (False, "relu", ["dense", "dense_relu"]),
        (True, "relu", ["dense", "dense_bias_relu"]),
        (True, "gelu", ["dense", "dense_bias_gelu"]),
        (True, "sigmoid", ["dense", "dense_bias_sigmoid"]),
        (False, "tanh", ["dense", "dense_tanh"]),
    ],
)
def test_dense(bias, act, stages):
    x, w = _rand(5, 7), _rand(6, 7, seed=2)
    b = _rand(6, seed=4) if bias else None
    out = _check(ops.dense, ref.dense, [x, w, b], names=["X", "W", "bias"], activation=act)
    assert _stages(out) == stages


def test_dense_custom_name():
    X, W, b = tc.placeholder((2, 3)), tc.placeholder((4, 3)), tc.placeholder((4,))
    assert _stages(ops.dense(X, W, b, "relu", name="fc1")) == ["fc1", "fc1_bias_relu"]


# ---------------------------------------------------------------------------------------------
# convolution and pooling


@pytest.mark.parametrize(
    "xs,ws,stride,padding,dilation",
    [
        ((1, 3, 7, 7), (4, 3, 3, 3), 1, 0, 1),
        ((1, 3, 7, 7), (4, 3, 3, 3), 1, 1, 1),
        ((2, 4, 10, 8), (3, 4, 3, 3), 2, 1, 1),
        ((1, 2, 11, 11), (5, 2, 3, 3), 1, 2, 2),
        ((1, 2, 9, 13), (3, 2, 3, 5), (2, 1), (1, 2), (1, 2)),
        ((2, 3, 6, 5), (2, 3, 1, 1), 1, 0, 1),
        ((1, 1, 8, 8), (1, 1, 2, 2), 2, 0, 1),
    ],
)
def test_conv2d(xs, ws, stride, padding, dilation):
    out = _check(
        ops.conv2d,
        ref.conv2d,
        [_rand(*xs), _rand(*ws, seed=5)],
        names=["X", "W"],
        stride=stride,
        padding=padding,
        dilation=dilation,
    )
    assert _stages(out) == (["conv2d_pad", "conv2d"] if padding else ["conv2d"])


@pytest.mark.parametrize(
    "xs,ws,stride,padding,dilation",
    [
        ((1, 4, 8, 8), (4, 1, 3, 3), 1, 1, 1),
        ((2, 3, 9, 7), (3, 3, 3), 2, 1, 1),
        ((1, 2, 8, 8), (4, 1, 3, 3), 1, 0, 1),
        ((1, 3, 10, 10), (3, 1, 3, 3), 1, 2, 2),
    ],
)
def test_depthwise_conv2d(xs, ws, stride, padding, dilation):
    _check(
        ops.depthwise_conv2d,
        ref.depthwise_conv2d,
        [_rand(*xs), _rand(*ws, seed=6)],
        stride=stride,
        padding=padding,
        dilation=dilation,
    )


@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize(
    "xs,kernel,stride,padding",
    [
        ((1, 3, 8, 8), 2, None, 0),
        ((2, 2, 9, 7), 3, 2, 1),
        ((1, 4, 10, 10), (3, 2), (1, 2), (1, 0)),
        ((1, 1, 5, 5), 3, 1, 1),
    ],
)
def test_pool(pool, xs, kernel, stride, padding):
    x = -np.abs(_rand(*xs)) - 1  # all negative: zero padding would win a max, -inf must not
    out = _check(getattr(ops, pool), getattr(ref, pool), [x], kernel=kernel, stride=stride, padding=padding)
    assert _stages(out) == ([f"{pool}_pad", pool] if padding else [pool])


# ---------------------------------------------------------------------------------------------
# normalisation


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((4, 6), 0), ((3, 4, 5), 1), ((3, 4, 5), -3), ((9,), 0)])
def test_softmax(shape, axis):
    out = _check(ops.softmax, ref.softmax, [_rand(*shape) * 4], axis=axis)
    assert _stages(out) == ["softmax_max", "softmax_exp", "softmax_sum", "softmax"]


def test_softmax_is_stable_for_large_inputs():
    _check(ops.softmax, ref.softmax, [_rand(3, 5) * 50 + 500])


@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8), (10,)])
def test_layer_norm(shape):
    x = _rand(*shape) * 3 + 2
    out = _check(ops.layer_norm, ref.layer_norm, [x, _rand(shape[-1], seed=8), _rand(shape[-1], seed=9)])
    assert _stages(out) == ["layer_norm_mean", "layer_norm_var", "layer_norm"]


def test_layer_norm_without_affine():
    _check(ops.layer_norm, ref.layer_norm, [_rand(3, 8), None, None], eps=1e-3)


# ---------------------------------------------------------------------------------------------
# elementwise


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum"])
@pytest.mark.parametrize("sx,sy", [((4, 5), (4, 5)), ((3, 1, 5), (4, 1)), ((5,), (2, 3, 5)), ((2, 1), (1, 3))])
def test_broadcasting_binary(op, sx, sy):
    out = _check(getattr(ops, op), getattr(ref, op), [_rand(*sx), _rand(*sy, seed=1)])
    assert out.shape == np.broadcast_shapes(sx, sy)


def test_div_and_scalars():
    x, y = _rand(3, 4), np.abs(_rand(4, seed=2)) + 0.5
    _check(ops.div, ref.div, [x, y])
    X = tc.placeholder((3, 4), name="X")
    for build, expected in [
        (lambda: ops.add(X, 2.5), x + np.float32(2.5)),
        (lambda: ops.add(1.0, X), x + np.float32(1)),
        (lambda: ops.mul(X, 3), x * np.float32(3)),
        (lambda: ops.sub(2.0, X), np.float32(2) - x),
    ]:
        (got,) = te_eval.evaluate(build(), {X: x})
        np.testing.assert_allclose(got, expected, rtol=RTOL)
    np.testing.assert_allclose(ref.add(x, 2.5), x + np.float32(2.5), rtol=RTOL)


def test_int_elementwise():
    a = np.arange(-6, 6, dtype="int32").reshape(3, 4)
    _check(ops.add, ref.add, [a, a[0]])
    _check(ops.relu, ref.relu, [a])


@pytest.mark.parametrize("op", ["relu", "gelu", "sigmoid", "tanh", "exp"])
@pytest.mark.parametrize("shape", [(7, 9), (2, 3, 4, 5)])
def test_unary(op, shape):
    out = _check(getattr(ops, op), getattr(ref, op), [_rand(*shape) * 3])
    assert _stages(out) == [op]


def test_sigmoid_extremes():
    _check(ops.sigmoid, ref.sigmoid, [np.array([-100.0, -20.0, 0.0, 20.0, 100.0], dtype="float32")])


@pytest.mark.parametrize("shape,axis", [((2, 5, 4, 3), 1), ((6, 7), 1), ((6, 7), -1), ((3, 4, 5), 2), ((3, 4, 5), 0)])
def test_bias_add(shape, axis):
    ax = axis % len(shape)
    _check(ops.bias_add, ref.bias_add, [_rand(*shape), _rand(shape[ax], seed=3)], axis=axis)


# ---------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, (0, 2), (1, -1), None])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(op, axis, keepdims):
    _check(getattr(ops, op), getattr(ref, op), [_rand(3, 4, 5)], axis=axis, keepdims=keepdims)


def test_reduction_shapes():
    X = tc.placeholder((3, 4, 5))
    assert ops.sum(X, axis=1).shape == (3, 5)
    assert ops.max(X, axis=(0, 2), keepdims=True).shape == (1, 4, 1)
    assert ops.mean(X).shape == (1,)  # every axis reduced: (1,), minitc has no 0-d tensors
    assert ops.min(tc.placeholder((6,)), axis=0).shape == (1,)
    _check(ops.sum, ref.sum, [_rand(6)], axis=0)
    _check(ops.max, ref.max, [np.arange(24, dtype="int32").reshape(4, 6) - 12], axis=1)


# ---------------------------------------------------------------------------------------------
# errors a user sees


def _p(*shape, dtype="float32"):
    return tc.placeholder(shape, dtype)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ops.matmul(_p(3, 4), _p(5, 6)), r"matmul: inner dimensions differ.*K=4.*K=5"),
        (lambda: ops.matmul(_p(3, 4, 1), _p(4, 6)), r"matmul: A must be 2-D"),
        (lambda: ops.matmul(_p(4, 3), _p(4, 6), transpose_a=False), r"inner dimensions"),
        (lambda: ops.batch_matmul(_p(2, 3, 4), _p(3, 4, 5)), r"batch extents differ"),
        (lambda: ops.batch_matmul(_p(3, 4), _p(3, 4, 5)), r"batch_matmul: A must be 3-D"),
        (lambda: ops.dense(_p(2, 3), _p(4, 5)), r"dense: X \(2, 3\) has 3 input features but W"),
        (lambda: ops.dense(_p(2, 3), _p(4, 3), activation="swish"), r"unknown activation 'swish'"),
        (lambda: ops.dense(_p(2, 3), _p(4, 3), _p(5)), r"bias has 5 elements"),
        (lambda: ops.conv2d(_p(1, 3, 8, 8), _p(4, 2, 3, 3)), r"conv2d: X .* has 3 input channels but W"),
        (lambda: ops.conv2d(_p(3, 8, 8), _p(4, 3, 3, 3)), r"conv2d: X must be 4-D \(NCHW\)"),
        (lambda: ops.conv2d(_p(1, 3, 4, 4), _p(4, 3, 5, 5)), r"window spans 5"),
        (lambda: ops.conv2d(_p(1, 3, 8, 8), _p(4, 3, 3, 3), stride=0), r"stride must be >= 1"),
        (lambda: ops.conv2d(_p(1, 3, 8, 8), _p(4, 3, 3, 3), padding=(1, 2, 3)), r"padding must be an int or a pair"),
        (lambda: ops.conv2d_gemm(_p(1, 3, 8, 8), _p(4, 3, 3, 3), 3), r"conv2d_gemm: W must be 2-D"),
        (lambda: ops.conv2d_gemm(_p(1, 3, 8, 8), _p(4, 18), 3), r"W \(4, 18\) must be \[K, C\*R\*S\] = \[K, 27\]"),
        (lambda: ops.depthwise_conv2d(_p(1, 3, 8, 8), _p(4, 1, 3, 3)), r"not a multiple of the 3 input channels"),
        (lambda: ops.depthwise_conv2d(_p(1, 3, 8, 8), _p(3, 2, 3, 3)), r"axis 1 must be 1"),
        (lambda: ops.max_pool2d(_p(1, 3, 8, 8), 2, padding=2), r"at most half the kernel"),
        (lambda: ops.avg_pool2d(_p(1, 8, 8), 2), r"avg_pool2d: X must be 4-D"),
        (lambda: ops.softmax(_p(3, 4), axis=2), r"softmax: axis 2 is out of range"),
        (lambda: ops.layer_norm(_p(3, 4), _p(5), _p(4)), r"gamma has 5 elements"),
        (lambda: ops.add(_p(3, 4), _p(3, 5)), r"add: shapes \(3, 4\) and \(3, 5\) do not broadcast"),
        (lambda: ops.bias_add(_p(2, 3, 4), _p(4)), r"bias has 4 elements but axis 1"),
        (lambda: ops.sum(_p(3, 4), axis=(0, -2)), r"names the same axis twice"),
        (lambda: ops.max(_p(3, 4), axis=5), r"axis 5 is out of range"),
    ],
)
def test_shape_errors(make, match):
    with pytest.raises(ShapeError, match=match):
        make()


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ops.softmax(_p(3, 4, dtype="int32")), r"softmax needs float inputs, got int32"),
        (lambda: ops.matmul(_p(3, 4), _p(4, 2, dtype="int32")), r"matmul: inputs .* float32 and int32"),
        (lambda: ops.matmul(np.zeros((3, 4)), _p(4, 2)), r"matmul: A must be a minitc Tensor"),
        (lambda: ops.add(1, 2), r"at least one operand must be a minitc Tensor"),
        (lambda: ops.add(_p(3, dtype="int32"), 0.5), r"add: cannot combine the float 0.5"),
        (lambda: ops.relu(_p(3, dtype="bool")), r"relu: .* is boolean"),
        (lambda: ops.dense(_p(2, 3, dtype="int32"), _p(4, 3, dtype="int32"), activation="gelu"), r"needs float"),
    ],
)
def test_dtype_errors(make, match):
    with pytest.raises(DTypeError, match=match):
        make()


# ---------------------------------------------------------------------------------------------
# the references against torch (skipped where torch is missing)


def test_references_match_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    t = torch.from_numpy
    x, w = _rand(2, 3, 9, 8), _rand(4, 3, 3, 2, seed=1)
    for stride, padding, dilation in [(1, 0, 1), (2, 1, 1), ((1, 2), (2, 1), 2)]:
        np.testing.assert_allclose(
            ref.conv2d(x, w, stride, padding, dilation),
            F.conv2d(t(x), t(w), stride=stride, padding=padding, dilation=dilation).numpy(),
            rtol=RTOL,
            atol=ATOL,
        )
    dw = _rand(6, 1, 3, 3, seed=2)
    np.testing.assert_allclose(
        ref.depthwise_conv2d(x, dw, 2, 1),
        F.conv2d(t(x), t(dw), stride=2, padding=1, groups=3).numpy(),
        rtol=RTOL,
        atol=ATOL,
    )
    for kernel, stride, padding in [(2, None, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 0))]:
        np.testing.assert_allclose(
            ref.max_pool2d(x, kernel, stride, padding), F.max_pool2d(t(x), kernel, stride, padding).numpy(), rtol=RTOL
        )
        np.testing.assert_allclose(
            ref.avg_pool2d(x, kernel, stride, padding),
            F.avg_pool2d(t(x), kernel, stride, padding).numpy(),
            rtol=RTOL,
            atol=ATOL,
        )
    a, g, b = _rand(4, 3, 10) * 3, _rand(10, seed=3), _rand(10, seed=4)
    np.testing.assert_allclose(
        ref.layer_norm(a, g, b), F.layer_norm(t(a), (10,), t(g), t(b)).numpy(), rtol=RTOL, atol=ATOL
    )
    for axis in (0, 1, -1):
        np.testing.assert_allclose(ref.softmax(a, axis), F.softmax(t(a), dim=axis).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(ref.gelu(a), F.gelu(t(a)).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(ref.sigmoid(a), torch.sigmoid(t(a)).numpy(), rtol=RTOL, atol=ATOL)
    xd, wd, bd = _rand(5, 7), _rand(6, 7, seed=5), _rand(6, seed=6)
    np.testing.assert_allclose(ref.dense(xd, wd, bd), F.linear(t(xd), t(wd), t(bd)).numpy(), rtol=RTOL, atol=ATOL)
