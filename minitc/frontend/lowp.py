"""Whole models in bfloat16 or int8: `tc.compile(model, inputs, dtype="bfloat16" | "int8")`.

`lower_dense` (a graph pass, run before the fp32 dense weights are packed) turns every dense
layer with a constant weight into a `dense_lowp` node whose weight is cast or quantized once,
here, at compile time, and packed for the low-precision GEMM template of the target
(templates/gemm_bf16.py, gemm_int8.py: AMX, the dot-product instructions or their emulation):

- `bfloat16`: the weight rounded to bf16; the activation cast to bf16 at the GEMM's input;
  float32 accumulation and output (as torch.autocast computes a linear layer, except that
  autocast also rounds the output to bf16).
- `int8`: dynamic quantization as ONNX Runtime's `quantize_dynamic`: the weight symmetric int8
  per output channel; the activation uint8 with a zero point, per tensor, from its range at
  run time; the int32 product dequantized (its zero point's compensation, the scales) after
  the GEMM.

The bias becomes an `add` node after the GEMM, so that the fusion passes join it to the
elementwise work that follows (GELU, the residual add) in one float32 kernel.

Everything else (softmax, layer norm, residuals, attention's batch matmuls) stays float32.
A dense layer the templates cannot take (an odd input width) stays float32 too.
`dense_lowp` nodes are not tasks of the tensor-expression templates: `lowp_kernels` builds
one `DenseKernel` per node, which the plan (runtime.py) calls as it calls a compiled kernel.
"""

from __future__ import annotations

import numpy as np

from minitc.errors import ConfigError
from minitc.frontend.graph import Graph, Node
from minitc.target import is_gpu, parse_target

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "int8": "int8"}
OP = "dense_lowp"


def check_dtype(dtype, target) -> str:
    """The compile option `dtype` as "float32", "bfloat16" or "int8"; ConfigError otherwise."""
    name = DTYPES.get(str(dtype).removeprefix("torch."))
    if name is None:
        raise ConfigError(f"dtype must be one of {', '.join(map(repr, DTYPES))}, got {dtype!r}")
    if name != "float32" and is_gpu(target):
        raise ConfigError(f"dtype={dtype!r} compiles for CPU targets only so far (issue 54), got target {target!r}")
    return name


def lower_dense(graph: Graph, dtype: str, target) -> Graph:
    """Each float32 dense layer with a constant [in, out] or [out, in] weight becomes a
    `dense_lowp` node reading (x, packed weight[, per-channel scales, column sums]), and its
    bias, if any, an `add` after it."""
    if dtype == "float32":
        return graph
    t = parse_target(target)
    g, values, done, nodes = graph.copy(), graph.values(), {}, []
    for node in g.nodes:
        nodes.append(node)
        weight = g.constants.get(node.inputs[1]) if node.op == "dense" else None
        if weight is None or node.dtype != "float32" or node.attrs.get("activation") or node.attrs.get("weight_block"):
            continue
        rows = weight if node.attrs.get("weight_in_out") else weight.T  # [K, N]
        M, K = values[node.inputs[0]].shape[0], rows.shape[0]
        if K % (2 if dtype == "bfloat16" else 4):
            continue  # pairs (quads) of k: the weight and every activation would need a zero column
        key = (node.inputs[1], M)
        if key not in done:
            done[key] = _pack(g, node.inputs[1], rows, M, dtype, t)
        packed, attrs = done[key]
        gemm = Node(node.name, OP, (node.inputs[0], *packed), dict(attrs), node.shape, "float32")
        if len(node.inputs) > 2:  # the bias: an add of its own, which fusion joins to what follows (GELU, residual)
            gemm.name = _unique(f"{node.name}_gemm", values)
            node.op, node.inputs, node.attrs = "add", (gemm.name, node.inputs[2]), {}
            nodes[-1:] = [gemm, node]
        else:
            nodes[-1] = gemm
    g.nodes = nodes
    return g.prune()


def _unique(base: str, taken: dict) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken[name] = None
    return name


def _pack(g: Graph, name: str, rows: np.ndarray, M: int, dtype: str, target) -> tuple:
    """(constant names, attrs) of the weight `rows` [K, N] cast or quantized and packed for an
    [M, K] activation. N is padded with zero columns to AMX's 32 (at least the register
    tile's 16): GPT-2's 50257 words."""
    K, N = rows.shape
    padded = np.pad(rows.astype(np.float32), ((0, 0), (0, -N % 32)))
    gemm = _gemm(dtype, M, padded.shape[1], K, target)
    attrs = {"dtype": dtype, "path": gemm.path, "n_padded": padded.shape[1], "out_features": N}
    if dtype == "bfloat16":
        bp = gemm.pack(padded.astype("bfloat16"))
        return (g.add_constant(f"{name}_bf16", bp),), attrs
    scale = np.abs(padded).max(axis=0) / 127  # symmetric, per output channel
    scale[scale == 0] = 1
    q = np.clip(np.rint(padded / scale), -127, 127).astype(np.int8)
    bp = gemm.pack(q)
    names = (
        g.add_constant(f"{name}_s8", bp.data),
        g.add_constant(f"{name}_scale", scale.astype(np.float32)),
        g.add_constant(f"{name}_colsum", q.sum(axis=0, dtype=np.int32)),
    )
    return names, attrs


def _gemm(dtype: str, M: int, N: int, K: int, target, path=None):
    if dtype == "bfloat16":
        from minitc.templates.gemm_bf16 import bf16_gemm

        return bf16_gemm(M, N, K, target, path=path)
    from minitc.templates.gemm_int8 import int8_gemm

    return int8_gemm(M, N, K, target, path=path)


def lowp_kernels(graph: Graph, target) -> dict:
    """{node name: DenseKernel} for the graph's `dense_lowp` nodes, one GEMM per shape."""
    values, gemms, kernels = graph.values(), {}, {}
    for node in graph.nodes:
        if node.op != OP:
            continue
        a = node.attrs
        M, K = values[node.inputs[0]].shape
        key = (a["dtype"], M, a["n_padded"], K, a["path"])
        if key not in gemms:
            gemms[key] = _gemm(a["dtype"], M, a["n_padded"], K, parse_target(target), a["path"])
            gemms[key].kernel()  # compiled now: an error belongs to compile time, not to the first call
        kernels[node.name] = DenseKernel(node, gemms[key])
    return kernels


class DenseKernel:
    """One `dense_lowp` node's call, shaped like a compiled kernel for the plan: `k(*inputs,
    out=)`, `run_unchecked([*inputs, out])` and `bind(arrays)`. The casts, the quantization and
    the dequantization around the GEMM run in torch (vectorised, on arrays shared with numpy),
    into buffers made once; the GEMM is called by its pointers, without the template's checks
    (the plan checked the shapes): in BERT-base the checked call cost about 0.1 ms a layer."""

    def __init__(self, node, gemm):
        self.node, self.gemm, self.dtype = node, gemm, node.attrs["dtype"]
        self.name = f"{gemm.kind}_dense_{gemm.path}_{gemm.shape.M}x{node.attrs['out_features']}x{gemm.shape.K}"
        M, K, Np = gemm.shape.M, gemm.shape.K, node.attrs["n_padded"]
        self.cut = node.attrs["out_features"] if Np != node.attrs["out_features"] else None
        self.padded = np.empty((M, Np), np.float32) if self.cut else None
        self.a = np.empty((M, K), np.dtype("bfloat16") if self.dtype == "bfloat16" else np.uint8)
        if self.dtype == "int8":
            self.scaled = np.empty((M, K), np.float32)  # x / scale + zero point, before the cast
            self.acc = np.empty((M, Np), np.int32)
        self.cfunc = gemm.kernel().cfunc

    def __call__(self, *args, out=None):
        if out is None:
            out = np.empty(self.node.shape, np.float32)
        self.run_unchecked([*args, out])
        return out

    def bind(self, arrays: list):
        return self._call(arrays)

    def run_unchecked(self, arrays: list) -> None:
        self._call(arrays)()

    def _call(self, arrays: list):
        """A call with the buffers and pointers of `arrays` worked out once."""
        import torch

        x, bp, out = arrays[0], arrays[1], arrays[-1]
        C = self.padded if self.cut else out
        x_t, a_t, C_t = (
            torch.from_numpy(x),
            torch.from_numpy(self.a.view(np.int16 if self.a.itemsize == 2 else np.uint8)),
            torch.from_numpy(C),
        )
        ptr = lambda arr: arr.__array_interface__["data"][0]  # noqa: E731
        cfunc, pa, pb = self.cfunc, ptr(self.a), ptr(bp)
        cut = (lambda: np.copyto(out, self.padded[:, : self.cut])) if self.cut else (lambda: None)
        if self.dtype == "bfloat16":
            a_bf16, pc = a_t.view(torch.bfloat16), ptr(C)

            def call():
                a_bf16.copy_(x_t)  # float32 -> bfloat16, round to nearest even
                cfunc(pa, pb, pc)
                cut()

            return call
        scale_t, colsum_t = torch.from_numpy(arrays[2]), torch.from_numpy(arrays[3])
        scaled_t, acc_t, pacc = torch.from_numpy(self.scaled), torch.from_numpy(self.acc), ptr(self.acc)

        def call():
            lo, hi = torch.aminmax(x_t)
            lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
            sa = (hi - lo) / 255 or 1.0
            za = round(-lo / sa)
            torch.mul(x_t, 1 / sa, out=scaled_t).add_(za).round_().clamp_(0, 255)
            a_t.copy_(scaled_t)
            cfunc(pa, pb, pacc)
            scales = scale_t * sa  # C = (acc - za * colsum) * scales, in one pass
            torch.addcmul(-za * colsum_t * scales, acc_t, scales, out=C_t)
            cut()

        return call
