"""`OPS`: every operator of `tc.ops` with its numpy reference and an example-input maker, so
tests, the fuzzer and the benchmarks can loop over "every op".

    for name, (build, reference, make_inputs) in tc.ops.OPS.items():
        arrays, params = make_inputs("small", np.random.default_rng(0))
        placeholders = [tc.placeholder(a.shape, a.dtype.name) for a in arrays]
        out = build(*placeholders, **params)
        expected = reference(*arrays, **params)

or, the same in one call: `inst = OPS["conv2d"].instantiate("small", rng)` gives
`inst.output`, `inst.inputs` ({placeholder: array}) and `inst.expected()`.

Size classes: "tiny" (a few hundred points, for the loop-nest interpreter), "small" (a few
thousand to a few hundred thousand points, random shapes and parameters: strides, padding,
dilation, transposes, axes), "medium" (fixed, realistic workloads for benchmarks, e.g. matmul
256^3 and a ResNet-18 3x3 convolution). tiny and medium are deterministic; small draws from rng.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from minitc.ops import elementwise, linalg, nchwc, nn, norm, reduce, reference, winograd
from minitc.te import Tensor, placeholder

SIZES = ("tiny", "small", "medium")


class Example(NamedTuple):
    arrays: tuple  # numpy arrays, passed positionally (first parameters of the builder)
    params: dict  # keyword arguments (stride, axis, activation, ...)


@dataclass
class Instance:
    """One concrete use of an operator: placeholders named after the builder's parameters."""

    name: str
    output: Tensor
    placeholders: tuple
    arrays: tuple
    params: dict
    reference: Callable

    @property
    def inputs(self) -> dict:
        return dict(zip(self.placeholders, self.arrays))

    def expected(self) -> np.ndarray:
        return self.reference(*self.arrays, **self.params)


class OpSpec(NamedTuple):
    build: Callable  # tc.ops.<name>(tensors..., **params) -> Tensor
    reference: Callable  # tc.ops.reference.<name>(arrays..., **params) -> ndarray
    make_inputs: Callable  # (size="small", rng=None) -> Example

    def instantiate(self, size: str = "small", rng=None) -> Instance:
        arrays, params = self.make_inputs(size, rng)
        names = list(inspect.signature(self.build).parameters)[: len(arrays)]
        phs = tuple(placeholder(a.shape, a.dtype.name, name=n) for a, n in zip(arrays, names))
        out = self.build(*phs, **params)
        return Instance(self.build.__name__, out, phs, tuple(arrays), dict(params), self.reference)


# ---------------------------------------------------------------------------------------------
# example makers


def _normal(rng, *shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def _maker(fn):
    """Wrap `fn(size, rng)` with size checking and a default rng."""

    def make_inputs(size: str = "small", rng=None) -> Example:
        if size not in SIZES:
            raise ValueError(f"unknown size class {size!r}; use one of {SIZES}")
        rng = np.random.default_rng(0) if rng is None else rng
        arrays, params = fn(size, rng)
        return Example(tuple(arrays), params)

    make_inputs.__name__ = fn.__name__
    return make_inputs


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


@_maker
def _matmul(size, rng):
    if size == "medium":
        return (_normal(rng, 256, 256), _normal(rng, 256, 256)), {}
    m, k, n = (4, 5, 3) if size == "tiny" else rng.integers(8, 48, size=3)
    ta, tb = (False, False) if size == "tiny" else (bool(rng.integers(2)), bool(rng.integers(2)))
    a = _normal(rng, k, m) if ta else _normal(rng, m, k)
    b = _normal(rng, n, k) if tb else _normal(rng, k, n)
    return (a, b), {"transpose_a": ta, "transpose_b": tb}


@_maker
def _batch_matmul(size, rng):
    b, m, k, n = {"tiny": (2, 3, 4, 5), "medium": (12, 128, 64, 128)}.get(size) or rng.integers(2, 24, size=4)
    b = min(b, 4) if size == "small" else b
    return (_normal(rng, b, m, k), _normal(rng, b, k, n)), {}


@_maker
def _dense(size, rng):
    m, i, o = {"tiny": (3, 6, 4), "medium": (128, 768, 768)}.get(size) or rng.integers(4, 40, size=3)
    with_bias = size != "small" or bool(rng.integers(2))
    act = {"tiny": "relu", "medium": "gelu"}.get(size) or _pick(rng, [None, "relu", "gelu"])
    arrays = (_normal(rng, m, i), _normal(rng, o, i)) + ((_normal(rng, o),) if with_bias else ())
    return arrays, {"activation": act}


_CONV_SMALL = [  # (N, C, H, W, K, R, S, stride, padding, dilation)
    (1, 3, 9, 9, 4, 3, 3, 1, 1, 1),
    (2, 4, 10, 8, 3, 3, 3, 2, 1, 1),
    (1, 2, 11, 11, 5, 3, 3, 1, 2, 2),
    (1, 3, 8, 12, 2, 1, 1, 1, 0, 1),
    (1, 2, 9, 7, 3, 3, 2, (2, 1), (1, 0), (1, 2)),
]


def _conv_case(size, rng, medium: tuple) -> tuple:
    """(N, C, H, W, K, R, S, stride, padding, dilation) of a convolution of this size class."""
    return {"tiny": (1, 2, 5, 5, 3, 3, 3, 1, 1, 1), "medium": medium}.get(size) or _pick(rng, _CONV_SMALL)


@_maker
def _conv2d(size, rng):
    n, c, h, w, k, r, s, st, pad, dil = _conv_case(size, rng, (1, 64, 56, 56, 64, 3, 3, 1, 1, 1))
    params = {"stride": st, "padding": pad, "dilation": dil}
    if size == "small" and rng.integers(2):  # weights packed [C, R, S, K], as the model front end does
        return (_normal(rng, n, c, h, w), _normal(rng, c, r, s, k)), {**params, "weight_layout": "CRSK"}
    return (_normal(rng, n, c, h, w), _normal(rng, k, c, r, s)), params


@_maker
def _conv2d_gemm(size, rng):
    n, c, h, w, k, r, s, st, pad, dil = _conv_case(size, rng, (8, 256, 14, 14, 256, 3, 3, 1, 1, 1))
    x, weight_rows = _normal(rng, n, c, h, w), _normal(rng, k, c * r * s)
    return (x, weight_rows), {"kernel_size": (r, s), "stride": st, "padding": pad, "dilation": dil}


@_maker
def _depthwise_conv2d(size, rng):
    n, c, h, w, m, r, st, pad = {
        "tiny": (1, 2, 5, 5, 1, 3, 1, 1),
        "medium": (1, 128, 56, 56, 1, 3, 1, 1),
    }.get(size) or _pick(rng, [(1, 4, 9, 9, 1, 3, 1, 1), (2, 3, 10, 10, 2, 3, 2, 1), (1, 5, 8, 8, 1, 5, 1, 2)])
    return (_normal(rng, n, c, h, w), _normal(rng, c * m, 1, r, r)), {"stride": st, "padding": pad}


def _pool(size, rng):
    n, c, h, w, k, st, pad = {
        "tiny": (1, 2, 6, 6, 2, None, 0),
        "medium": (1, 64, 112, 112, 3, 2, 1),
    }.get(size) or _pick(rng, [(1, 3, 8, 8, 2, None, 0), (2, 2, 9, 7, 3, 2, 1), (1, 4, 10, 10, (3, 2), (1, 2), (1, 0))])
    return (_normal(rng, n, c, h, w),), {"kernel": k, "stride": st, "padding": pad}


_max_pool2d = _maker(_pool)
_avg_pool2d = _maker(_pool)


_NCHWC_SMALL = [  # (N, C, H, W, K, R, stride, padding, in block, out block)
    (1, 8, 9, 9, 16, 3, 1, 1, 8, 8),
    (2, 3, 10, 8, 8, 3, 2, 1, 3, 8),
    (1, 16, 7, 7, 32, 1, 1, 0, 16, 16),
    (1, 8, 11, 11, 8, 5, 2, 2, 4, 4),
]


@_maker
def _conv2d_nchwc(size, rng):
    n, c, h, w, k, r, st, pad, cb, kb = {
        "tiny": (1, 4, 5, 5, 4, 3, 1, 1, 2, 2),
        "medium": (1, 256, 14, 14, 256, 3, 1, 1, 16, 16),
    }.get(size) or _pick(rng, _NCHWC_SMALL)
    x = reference.to_nchwc(_normal(rng, n, c, h, w), cb)
    return (x, reference.to_blocked_weight(_normal(rng, k, c, r, r), cb, kb)), {"stride": st, "padding": pad}


@_maker
def _conv2d_winograd_nchwc(size, rng):
    n, c, h, w, k, pad, cb, kb = {
        "tiny": (1, 4, 5, 5, 4, 1, 2, 2),
        "medium": (1, 256, 14, 14, 256, 1, 16, 16),
    }.get(size) or _pick(rng, [(1, 8, 9, 9, 16, 1, 8, 8), (2, 8, 6, 7, 8, 0, 4, 8), (1, 16, 7, 7, 16, 1, 16, 8)])
    x = reference.to_nchwc(_normal(rng, n, c, h, w), cb)
    return (x, winograd.winograd_weights(_normal(rng, k, c, 3, 3), cb, kb)), {"padding": pad}


@_maker
def _conv2d_winograd(size, rng):
    n, c, h, w, k, pad = {"tiny": (1, 4, 5, 5, 4, 1), "medium": (1, 128, 28, 28, 128, 1)}.get(size) or _pick(
        rng, [(1, 8, 9, 9, 16, 1), (2, 8, 6, 7, 8, 0), (1, 16, 7, 7, 16, 1)]
    )
    return (_normal(rng, n, c, h, w), winograd.winograd_weights_ck(_normal(rng, k, c, 3, 3))), {"padding": pad}


@_maker
def _depthwise_conv2d_nchwc(size, rng):
    n, c, h, w, r, st, pad, block = {
        "tiny": (1, 4, 5, 5, 3, 1, 1, 2),
        "medium": (1, 144, 56, 56, 3, 1, 1, 16),
    }.get(size) or _pick(rng, [(1, 16, 9, 9, 3, 1, 1, 8), (2, 8, 10, 10, 3, 2, 1, 4), (1, 16, 8, 8, 5, 1, 2, 16)])
    weight = _normal(rng, c // block, r, r, block)
    return (reference.to_nchwc(_normal(rng, n, c, h, w), block), weight), {"stride": st, "padding": pad}


def _pool_nchwc(size, rng):
    (x,), params = _pool(size, rng)
    block = 16 if size == "medium" else x.shape[1]  # one block of all channels
    return (reference.to_nchwc(x, block),), params


_max_pool2d_nchwc = _maker(_pool_nchwc)
_avg_pool2d_nchwc = _maker(_pool_nchwc)


@_maker
def _softmax(size, rng):
    if size != "small":
        shape = (4, 7) if size == "tiny" else (512, 512)
        return (_normal(rng, *shape),), {"axis": -1}
    shape = _pick(rng, [(6, 10), (3, 4, 5), (17,)])
    return (_normal(rng, *shape) * 3,), {"axis": int(rng.integers(-len(shape), len(shape)))}


@_maker
def _layer_norm(size, rng):
    shape = {"tiny": (3, 8), "medium": (512, 768)}.get(size) or _pick(rng, [(6, 10), (2, 3, 16)])
    d = shape[-1]
    return (_normal(rng, *shape) * 2 + 1, _normal(rng, d), _normal(rng, d)), {"eps": 1e-5}


_BROADCAST_SMALL = [((4, 5), (4, 5)), ((3, 1, 5), (4, 1)), ((5,), (2, 3, 5)), ((2, 1, 4, 1), (3, 1, 6))]


def _binary_maker(positive_y=False):
    def fn(size, rng):
        fixed = {"tiny": ((3, 4), (4,)), "medium": ((1024, 1024), (1024, 1024))}
        sx, sy = fixed.get(size) or _pick(rng, _BROADCAST_SMALL)
        y = _normal(rng, *sy)
        if positive_y:  # keep divisors away from zero
            y = (np.abs(y) + 0.5).astype("float32")
        return (_normal(rng, *sx), y), {}

    return _maker(fn)


def _unary_maker(scale=1.0):
    def fn(size, rng):
        shape = {"tiny": (4, 6), "medium": (1024, 1024)}.get(size) or _pick(rng, [(7, 9), (2, 3, 4, 5), (33,)])
        return ((_normal(rng, *shape) * scale).astype("float32"),), {}

    return _maker(fn)


@_maker
def _bias_add(size, rng):
    shape, axis = {"tiny": ((2, 3, 4), 1), "medium": ((1, 64, 56, 56), 1)}.get(size) or _pick(
        rng, [((2, 5, 4, 3), 1), ((6, 7), 1), ((6, 7), -1), ((3, 4, 5), 2)]
    )
    return (_normal(rng, *shape), _normal(rng, shape[axis])), {"axis": axis}


@_maker
def _reduction(size, rng):
    if size != "small":
        shape = (3, 4, 5) if size == "tiny" else (512, 1024)
        return (_normal(rng, *shape),), {"axis": -1, "keepdims": False}
    shape = _pick(rng, [(5, 6), (3, 4, 5), (2, 3, 4, 5)])
    axis = _pick(rng, list(range(-len(shape), len(shape))) + [None, (0, len(shape) - 1)])
    return (_normal(rng, *shape),), {"axis": axis, "keepdims": bool(rng.integers(2))}


def _spec(module, name, make_inputs) -> OpSpec:
    return OpSpec(getattr(module, name), getattr(reference, name), make_inputs)


OPS: dict = {
    "matmul": _spec(linalg, "matmul", _matmul),
    "batch_matmul": _spec(linalg, "batch_matmul", _batch_matmul),
    "dense": _spec(linalg, "dense", _dense),
    "conv2d": _spec(nn, "conv2d", _conv2d),
    "conv2d_gemm": _spec(nn, "conv2d_gemm", _conv2d_gemm),
    "depthwise_conv2d": _spec(nn, "depthwise_conv2d", _depthwise_conv2d),
    "max_pool2d": _spec(nn, "max_pool2d", _max_pool2d),
    "avg_pool2d": _spec(nn, "avg_pool2d", _avg_pool2d),
    "conv2d_nchwc": _spec(nchwc, "conv2d_nchwc", _conv2d_nchwc),
    "conv2d_winograd_nchwc": _spec(winograd, "conv2d_winograd_nchwc", _conv2d_winograd_nchwc),
    "conv2d_winograd": _spec(winograd, "conv2d_winograd", _conv2d_winograd),
    "depthwise_conv2d_nchwc": _spec(nchwc, "depthwise_conv2d_nchwc", _depthwise_conv2d_nchwc),
    "max_pool2d_nchwc": _spec(nchwc, "max_pool2d_nchwc", _max_pool2d_nchwc),
    "avg_pool2d_nchwc": _spec(nchwc, "avg_pool2d_nchwc", _avg_pool2d_nchwc),
    "softmax": _spec(norm, "softmax", _softmax),
    "layer_norm": _spec(norm, "layer_norm", _layer_norm),
    "add": _spec(elementwise, "add", _binary_maker()),
    "sub": _spec(elementwise, "sub", _binary_maker()),
    "mul": _spec(elementwise, "mul", _binary_maker()),
    "div": _spec(elementwise, "div", _binary_maker(positive_y=True)),
    "maximum": _spec(elementwise, "maximum", _binary_maker()),
    "minimum": _spec(elementwise, "minimum", _binary_maker()),
    "relu": _spec(elementwise, "relu", _unary_maker()),
    "gelu": _spec(elementwise, "gelu", _unary_maker(2.0)),
    "sigmoid": _spec(elementwise, "sigmoid", _unary_maker(3.0)),
    "tanh": _spec(elementwise, "tanh", _unary_maker(2.0)),
    "exp": _spec(elementwise, "exp", _unary_maker()),
    "bias_add": _spec(elementwise, "bias_add", _bias_add),
    "sum": _spec(reduce, "sum", _reduction),
    "max": _spec(reduce, "max", _reduction),
    "min": _spec(reduce, "min", _reduction),
    "mean": _spec(reduce, "mean", _reduction),
}
