"""The numpy meaning of each intrinsic (`tc.exp`, `tc.sigmoid`, ...): one table that the
reference interpreter (interp.py), the tensor-expression evaluator (te_eval.py) and the GPU
simulator all use, so the correctness oracles cannot disagree. Each function takes a numpy
scalar or array and keeps its dtype; the code generators implement the same functions
(backends/llvm/vecmath.py, backends/cuda/exprs.py)."""

from __future__ import annotations

import math

import numpy as np

from minitc.expr import INTRINSICS

_vector_erf = np.vectorize(math.erf, otypes=[np.float64])  # numpy has no erf; math.erf is exact in float64


def erf(x):
    x = np.asarray(x)
    return np.asarray(_vector_erf(x)).astype(x.dtype)[()]


def sigmoid(x):
    # exp(-logaddexp(0, -x)) = 1 / (1 + exp(-x)), without overflow for large |x|
    x = np.asarray(x)
    return np.exp(-np.logaddexp(np.zeros((), x.dtype), -x))[()]


NUMPY_INTRINSICS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "erf": erf,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "sigmoid": sigmoid,
}
assert set(NUMPY_INTRINSICS) == set(INTRINSICS), "an intrinsic has no numpy meaning"
