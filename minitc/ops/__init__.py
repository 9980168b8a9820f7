"""`tc.ops`: the operator library. Each function takes minitc Tensors (placeholders or computes)
and returns the output Tensor, checking shapes and dtypes up front (ShapeError / DTypeError).

    linear algebra  matmul(A, B, transpose_a=False, transpose_b=False)
                    batch_matmul(A, B, transpose_a=False, transpose_b=False)
                    dense(X, W, bias=None, activation=None)        torch.nn.Linear layout
    NCHW            conv2d(X, W, stride=1, padding=0, dilation=1)
                    conv2d_gemm(X, W_rows, kernel_size, ...)       implicit GEMM: [N, K, OH*OW]
                    depthwise_conv2d(X, W, stride=1, padding=0, dilation=1)
                    max_pool2d(X, kernel, stride=None, padding=0)
                    avg_pool2d(X, kernel, stride=None, padding=0)  count_include_pad=True
    NCHW[c]         conv2d_nchwc, depthwise_conv2d_nchwc, max_pool2d_nchwc, avg_pool2d_nchwc:
                    the same on channel-blocked data (nchwc.py; reference.to_nchwc converts)
                    conv2d_winograd_nchwc(X, U, padding=1): a 3x3 stride-1 convolution by
                    Winograd's F(2x2, 3x3), U = winograd_weights(W, cb, kb) (winograd.py)
    NCHW, GPU       conv2d_winograd(X, U, padding=1): the same on NCHW data, U =
                    winograd_weights_ck(W); its channel products are 16 GEMMs
    normalisation   softmax(X, axis=-1), layer_norm(X, gamma, beta, eps=1e-5)
    elementwise     add, sub, mul, div, maximum, minimum (numpy broadcasting, numbers allowed),
                    relu, gelu, sigmoid, tanh, exp, bias_add(X, bias, axis=1)
    reductions      sum, max, min, mean (X, axis=None, keepdims=False)

Every operator also takes `name=`. Stage names (they appear in printed loop nests, and
schedules refer to stages by them) are valid identifiers: the operator's main stage is called
`name` (default: the operator's name), helper stages `<name>_<role>`: `conv2d_pad`,
`softmax_max`/`softmax_exp`/`softmax_sum`, `layer_norm_mean`/`layer_norm_var`, and dense's
epilogue `dense_bias`/`dense_relu`/`dense_bias_gelu`. Names are not made unique: give two
instances of the same operator in one graph different `name=`s.

`reference` holds a plain-numpy version of each operator with the same name and arguments;
`OPS` maps every operator name to (build, reference, make_inputs), see registry.py.
"""

from minitc.ops import reference
from minitc.ops._util import window_output_size
from minitc.ops.elementwise import add, bias_add, div, exp, gelu, maximum, minimum, mul, relu, sigmoid, sub, tanh
from minitc.ops.linalg import batch_matmul, dense, matmul
from minitc.ops.nchwc import avg_pool2d_nchwc, conv2d_nchwc, depthwise_conv2d_nchwc, max_pool2d_nchwc
from minitc.ops.nn import avg_pool2d, conv2d, conv2d_gemm, depthwise_conv2d, max_pool2d
from minitc.ops.norm import layer_norm, softmax
from minitc.ops.reduce import max, mean, min, sum  # noqa: A004 - numpy-style names inside the namespace
from minitc.ops.registry import OPS, SIZES, Example, Instance, OpSpec
from minitc.ops.winograd import conv2d_winograd, conv2d_winograd_nchwc, winograd_weights, winograd_weights_ck

__all__ = [
    "OPS",
    "SIZES",
    "Example",
    "Instance",
    "OpSpec",
    "reference",
    "window_output_size",
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d",
    "conv2d_gemm",
    "depthwise_conv2d",
    "max_pool2d",
    "avg_pool2d",
    "conv2d_nchwc",
    "conv2d_winograd",
    "conv2d_winograd_nchwc",
    "winograd_weights",
    "winograd_weights_ck",
    "depthwise_conv2d_nchwc",
    "max_pool2d_nchwc",
    "avg_pool2d_nchwc",
    "softmax",
    "layer_norm",
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "relu",
    "gelu",
    "sigmoid",
    "tanh",
    "exp",
    "bias_add",
    "sum",
    "max",
    "min",
    "mean",
]
