"""Plain-numpy references for every operator of `tc.ops`, with the same names and arguments
(minus `name=`), taking and returning numpy arrays.

They are written independently of the tensor-expression definitions (einsum, np.pad, sliding
windows) so that the two can check each other. Float inputs are computed in float64 and the
result is cast back to the inputs' dtype; integer inputs stay integers.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _out_dtype(*arrays):
    return np.result_type(*arrays)


def _work(a):
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu64(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _sigmoid64(x):
    return np.exp(-np.logaddexp(0.0, -x))


_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu64,
    "sigmoid": _sigmoid64,
    "tanh": np.tanh,
}

# ---------------------------------------------------------------------------------------------
# linear algebra


def matmul(A, B, transpose_a=False, transpose_b=False):
    a, b = _work(A), _work(B)
    a = a.T if transpose_a else a
    b = b.T if transpose_b else b
    return np.einsum("ik,kj->ij", a, b).astype(_out_dtype(A, B))


def batch_matmul(A, B, transpose_a=False, transpose_b=False):
    a, b = _work(A), _work(B)
    a = np.swapaxes(a, 1, 2) if transpose_a else a
    b = np.swapaxes(b, 1, 2) if transpose_b else b
    return np.matmul(a, b).astype(_out_dtype(A, B))


def dense(X, W, bias=None, activation=None):
    y = _work(X) @ _work(W).T
    if bias is not None:
        y = y + _work(bias)[None, :]
    if activation is not None:
        y = _ACTIVATIONS[activation](y)
    dtype = _out_dtype(X, W) if bias is None else _out_dtype(X, W, bias)
    return y.astype(dtype)


# ---------------------------------------------------------------------------------------------
# convolution and pooling (NCHW)


def _windows(x, kh, kw, sh, sw, dh, dw):
    """[N, C, OH, OW, kh, kw] view of the (already padded) x."""
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    win = sliding_window_view(x, (span_h, span_w), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


def conv2d(X, W, stride=1, padding=0, dilation=1, weight_layout="KCRS", out_channels=None):
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    x = np.pad(_work(X), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    w = _work(W) if weight_layout == "KCRS" else _work(W).transpose(3, 0, 1, 2)[:out_channels]
    win = _windows(x, w.shape[2], w.shape[3], sh, sw, dh, dw)
    return np.einsum("nchwrs,kcrs->nkhw", win, w, optimize=True).astype(_out_dtype(X, W))


def conv2d_gemm(X, W, kernel_size, stride=1, padding=0, dilation=1):
    (r, s), n, k = _pair(kernel_size), X.shape[0], W.shape[0]
    y = conv2d(X, np.asarray(W).reshape(k, -1, r, s), stride, padding, dilation)
    return y.reshape(n, k, -1)


def depthwise_conv2d(X, W, stride=1, padding=0, dilation=1):
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    w = _work(W)
    if w.ndim == 4:
        w = w[:, 0]
    x = np.pad(_work(X), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    mult = w.shape[0] // x.shape[1]
    x = np.repeat(x, mult, axis=1)  # output channel k reads input channel k // mult
    win = _windows(x, w.shape[1], w.shape[2], sh, sw, dh, dw)
    return np.einsum("nkhwrs,krs->nkhw", win, w).astype(_out_dtype(X, W))


def max_pool2d(X, kernel, stride=None, padding=0):
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    x = np.asarray(X)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=low)
    return _windows(x, kh, kw, sh, sw, 1, 1).max(axis=(4, 5)).astype(x.dtype)


def avg_pool2d(X, kernel, stride=None, padding=0):
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    x = np.pad(_work(X), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return _windows(x, kh, kw, sh, sw, 1, 1).mean(axis=(4, 5)).astype(np.asarray(X).dtype)


# ---------------------------------------------------------------------------------------------
# channel-blocked data, NCHW[c] (minitc/ops/nchwc.py)


def to_nchwc(x, block):
    """[N, C, H, W] -> [N, C/block, H, W, block]."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(np.asarray(x).reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_nchwc(x):
    """[N, C/c, H, W, c] -> [N, C, H, W]."""
    n, cb, h, w, c = x.shape
    return np.ascontiguousarray(np.asarray(x).transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, w))


def to_blocked_weight(w, in_block, out_block):
    """A conv2d weight [K, C, R, S] -> [K/kb, C/cb, R, S, cb, kb] (kb = out_block, cb = in_block)."""
    k, c, r, s = w.shape
    blocked = np.asarray(w).reshape(k // out_block, out_block, c // in_block, in_block, r, s)
    return np.ascontiguousarray(blocked.transpose(0, 2, 4, 5, 3, 1))


def conv2d_nchwc(X, W, stride=1, padding=0, dilation=1):
    kb_, cb_, r, s, cb, kb = W.shape
    w = np.asarray(W).transpose(0, 5, 1, 4, 2, 3).reshape(kb_ * kb, cb_ * cb, r, s)
    return to_nchwc(conv2d(from_nchwc(X), w, stride, padding, dilation), kb)


def conv2d_winograd_nchwc(X, U, padding=1):
    """F(2x2, 3x3) with the kernel's sums of nonzero terms (so NaN and infinities spread alike),
    the channel products by einsum; `conv2d_nchwc` on the untransformed weight, up to rounding."""
    from minitc.ops.winograd import A_T, B_T, TILE, combine, tiles

    x, u = _work(X), _work(U)
    n, cb_, h, w, cb = x.shape
    ph, pw = _pair(padding)
    oh, ow = h + 2 * ph - 2, w + 2 * pw - 2
    th, tw = tiles(oh), tiles(ow)
    p = np.zeros((n, cb_, TILE * th + 2, TILE * tw + 2, cb))
    p[:, :, ph : ph + h, pw : pw + w] = x
    with np.errstate(invalid="ignore", over="ignore"):
        d = [[p[:, :, i : i + TILE * th : TILE, j : j + TILE * tw : TILE] for j in range(4)] for i in range(4)]
        cols = [[combine(row, [d[i][j] for i in range(4)]) for j in range(4)] for row in B_T]
        v = [[combine(row, cols[xi]) for row in B_T] for xi in range(4)]
        m = [[np.einsum("ncyxi,kcio->nkyxo", v[xi][nu], u[xi, nu]) for nu in range(4)] for xi in range(4)]
        rows = [[combine(col, m[xi]) for col in A_T] for xi in range(4)]
        y = np.zeros((n, u.shape[2], TILE * th, TILE * tw, u.shape[5]))
        for i, col in enumerate(A_T):
            for j in range(TILE):
                y[:, :, i::TILE, j::TILE] = combine(col, [rows[xi][j] for xi in range(4)])
    return y[:, :, :oh, :ow].astype(_out_dtype(X, U))


def conv2d_winograd(X, U, padding=1):
    """conv2d_winograd_nchwc's arithmetic on NCHW data: one block of all C and all K channels."""
    x = np.asarray(X).transpose(0, 2, 3, 1)[:, None]
    y = conv2d_winograd_nchwc(x, np.asarray(U)[:, :, None, None], padding)
    return np.ascontiguousarray(y[:, 0].transpose(0, 3, 1, 2))


def depthwise_conv2d_nchwc(X, W, stride=1, padding=0, dilation=1):
    cb_, r, s, c = W.shape
    w = np.asarray(W).transpose(0, 3, 1, 2).reshape(cb_ * c, r, s)
    return to_nchwc(depthwise_conv2d(from_nchwc(X), w, stride, padding, dilation), c)


def max_pool2d_nchwc(X, kernel, stride=None, padding=0):
    return to_nchwc(max_pool2d(from_nchwc(X), kernel, stride, padding), X.shape[-1])


def avg_pool2d_nchwc(X, kernel, stride=None, padding=0):
    return to_nchwc(avg_pool2d(from_nchwc(X), kernel, stride, padding), X.shape[-1])


# ---------------------------------------------------------------------------------------------
# normalisation


def softmax(X, axis=-1, safe=False):
    x = _work(X)
    top = x.max(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):  # a row of -inf: NaN, or 0 when safe
        e = np.exp(x - top)
        y = e / e.sum(axis=axis, keepdims=True)
    if safe:
        y = np.where(top == -np.inf, 0.0, y)
    return y.astype(np.asarray(X).dtype)


def layer_norm(X, gamma, beta, eps=1e-5):
    x = _work(X)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if gamma is not None:
        y = y * _work(gamma)
    if beta is not None:
        y = y + _work(beta)
    return y.astype(np.asarray(X).dtype)


# ---------------------------------------------------------------------------------------------
# elementwise


def _binary(fn, X, Y):
    dtype = np.result_type(*(v for v in (X, Y) if isinstance(v, np.ndarray)))
    x = _work(X) if isinstance(X, np.ndarray) else X
    y = _work(Y) if isinstance(Y, np.ndarray) else Y
    return np.asarray(fn(x, y)).astype(dtype)


def add(X, Y):
    return _binary(np.add, X, Y)


def sub(X, Y):
    return _binary(np.subtract, X, Y)


def mul(X, Y):
    return _binary(np.multiply, X, Y)


def div(X, Y):
    return _binary(np.divide, X, Y)


def maximum(X, Y):
    return _binary(np.maximum, X, Y)


def minimum(X, Y):
    return _binary(np.minimum, X, Y)


def _unary(fn, X):
    return fn(_work(X)).astype(np.asarray(X).dtype)


def relu(X):
    return _unary(_ACTIVATIONS["relu"], X)


def gelu(X):
    return _unary(_gelu64, X)


def sigmoid(X):
    return _unary(_sigmoid64, X)


def tanh(X):
    return _unary(np.tanh, X)


def exp(X):
    return _unary(np.exp, X)


def bias_add(X, bias, axis=1):
    x = _work(X)
    shape = [1] * x.ndim
    shape[axis] = -1
    return (x + _work(bias).reshape(shape)).astype(_out_dtype(X, bias))


# ---------------------------------------------------------------------------------------------
# reductions: like numpy's, except that reducing every axis gives shape (1,) (minitc tensors
# have at least one dimension)


def _reduce(fn, X, axis, keepdims):
    x = np.asarray(X)
    axis = tuple(axis) if isinstance(axis, list) else axis
    out = np.asarray(fn(_work(x), axis=axis, keepdims=keepdims))
    if out.ndim == 0:
        out = out.reshape(1)
    return out.astype(x.dtype)


def sum(X, axis=None, keepdims=False):  # noqa: A001
    return _reduce(np.sum, X, axis, keepdims)


def max(X, axis=None, keepdims=False):  # noqa: A001
    return _reduce(np.max, X, axis, keepdims)


def min(X, axis=None, keepdims=False):  # noqa: A001
    return _reduce(np.min, X, axis, keepdims)


def mean(X, axis=None, keepdims=False):
    return _reduce(np.mean, X, axis, keepdims)
