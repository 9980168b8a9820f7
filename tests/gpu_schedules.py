"""Hand-written GPU schedules shared by the CUDA tests (renderer, simulator, nvcc): each
function in ALL returns (schedule, numpy reference function of the inputs, input shapes).

Below them, the examples of the CUDA renderer tests (test_cuda_codegen.py, test_cuda_runtime.py):
ALL, a few custom kernels (negative modulo, integers, intrinsics), every tc.ops operator with a
trivial binding and the shared-memory templates with their default GPU schedule; `example(name)`
gives (schedule, reference, input arrays) and `lower_examples()` all of them lowered."""

import math
import runpy
from pathlib import Path

import numpy as np

import minitc as tc
from minitc.driver import lower_gpu
from minitc.expr import const
from minitc.templates import template_schedule

# examples/ is no package: take the function from the script (run_path does not run its main)
_EXAMPLE = Path(__file__).parent.parent / "examples" / "gpu_matmul.py"
_example_matmul_schedule = runpy.run_path(str(_EXAMPLE))["matmul_schedule"]


def matmul_shared(M=64, N=48, K=32, tile=16, reg=4, kstep=8):
    """The classic, examples/gpu_matmul.py's schedule: a block computes a tile x tile block of
    C, each thread a reg x reg register tile (float4 stores), A and B tiles staged in shared
    memory by all threads of the block."""
    s = _example_matmul_schedule(M, N, K, tile, reg, kstep)
    return s, (lambda a, b: a @ b), [(M, K), (K, N)]


def elementwise(n=1000, threads=128):
    """A fused elementwise op over a non-dividing size: one thread per element, guarded tail."""
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: tc.exp(X[i]) * 2.0 + 1.0, name="Y")
    s = tc.Schedule(Y)
    (i,) = s.loops(Y)
    bo, ti = s.split(i, factor=threads)
    s.bind(bo, "blockIdx.x")
    s.bind(ti, "threadIdx.x")
    return s, (lambda x: np.exp(x) * 2 + 1), [(n,)]


def row_sum(rows=33, cols=70, threads=32):
    """A reduction with one thread per row (the reduction loop stays serial in each thread)."""
    X = tc.placeholder((rows, cols), name="X")
    k = tc.reduce_axis(cols, name="k")
    Y = tc.compute((rows,), lambda i: tc.sum(X[i, k], axis=k), name="Y")
    s = tc.Schedule(Y)
    i, _ = s.loops(Y)
    bo, ti = s.split(i, factor=threads)
    s.bind(bo, "blockIdx.x")
    s.bind(ti, "threadIdx.x")
    return s, (lambda x: x.sum(axis=1)), [(rows, cols)]


def softmax_rows(rows=8, cols=40, threads=32):
    """Softmax over rows: four root stages (max, exp, sum, divide), so four launches that pass
    full-size temporaries between them."""
    X = tc.placeholder((rows, cols), name="X")
    Y = tc.ops.softmax(X, name="Y")
    s = trivial_binding(Y, factor=threads)  # every stage its own launch

    def reference(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return s, reference, [(rows, cols)]


ALL = {"matmul_shared": matmul_shared, "elementwise": elementwise, "row_sum": row_sum, "softmax_rows": softmax_rows}


# -- the renderer tests' examples ---------------------------------------------------------------


def trivial_binding(outputs, factor=64) -> tc.Schedule:
    """Every stage: spatial loops fused, split by `factor`, bound to blockIdx.x / threadIdx.x."""
    s = tc.Schedule(outputs)
    for st in s.state.stages:
        if st.is_placeholder:
            continue
        loops = s.loops(st.name)
        spatial = [lp for lp, info in zip(loops, st.loops) if not info.reduce]
        fused = s.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        bo, ti = s.split(fused, factor=factor)
        s.bind(bo, "blockIdx.x")
        s.bind(ti, "threadIdx.x")
    return s


def negative_mod(n=100):
    """An index that is negative before `%`: C's truncating % would read out of bounds."""
    X = tc.placeholder((n,), name="X")
    Y = tc.compute((n,), lambda i: X[(i * 7 - 20) % n] + tc.cast((i - 50) // 3, "float32"), name="Y")
    i = np.arange(n)
    reference = lambda x: x[(i * 7 - 20) % n] + ((i - 50) // 3).astype("float32")  # noqa: E731
    return trivial_binding(Y), reference, [np.random.default_rng(0).standard_normal(n).astype("float32")]


def integers(n=90):
    """int32 and int64 data: floor division and modulo by data, wrapping products, min/max,
    comparisons, not, select, casts to and from bool and float."""
    A = tc.placeholder((n,), "int32", name="A")
    B = tc.placeholder((n,), "int64", name="B")
    Y = tc.compute(
        (n,),
        lambda i: (
            tc.cast(A[i], "int64") // B[i]
            + B[i] % tc.cast(A[i], "int64")
            + B[i] * 3_000_000_000
            + tc.maximum(B[i], 7)
            - tc.minimum(tc.cast(A[i], "int64"), -2)
            + tc.select(
                ~(A[i] > 3) & (B[i] != 0),
                tc.cast(tc.cast(B[i], "bool"), "int64"),
                tc.cast(tc.cast(A[i], "float32") * 0.5, "int64"),
            )
        ),
        name="Y",
    )

    def reference(a, b):
        a64 = a.astype("int64")
        with np.errstate(all="ignore"):
            pick = np.where(
                ~(a > 3) & (b != 0), b.astype(bool).astype("int64"), (a.astype("float32") * 0.5).astype("int64")
            )
            return a64 // b + b % a64 + b * 3_000_000_000 + np.maximum(b, 7) - np.minimum(a64, -2) + pick

    rng = np.random.default_rng(1)
    a = rng.integers(-9, 10, n).astype("int32")
    a[a == 0] = 5
    b = rng.integers(-(2**40), 2**40, n).astype("int64")
    b[:9] = [1, -1, 5, -5, 7, -7, 2**40, -(2**40), 3]
    return trivial_binding(Y), reference, [a, b]


def intrinsics(dtype):
    """Every intrinsic, min/max with nan, division and inf/nan constants in `dtype`."""
    X = tc.placeholder((70,), dtype, name="X")
    fns = (tc.exp, tc.log, tc.sqrt, tc.tanh, tc.erf, tc.abs, tc.floor, tc.ceil, tc.sigmoid)
    one = lambda f, i: tc.select(X[i] > 0, f(X[i]), f(tc.abs(X[i]) + 0.25)) if f in (tc.log, tc.sqrt) else f(X[i])  # noqa: E731
    Y = tc.compute(
        (70,),
        lambda i: sum((one(f, i) for f in fns), const(0.0, dtype)) / 3.0 + tc.maximum(X[i], -float("inf")),
        name="Y",
    )
    Z = tc.compute((70,), lambda i: tc.minimum(tc.select(X[i] > 1.5, const(float("nan"), dtype), X[i]), 0.1), name="Z")

    def reference(x):
        safe = lambda v: np.where(x > 0, v(np.where(x > 0, x, 1)), v(np.abs(x) + 0.25))  # noqa: E731
        e = np.array([math.erf(v) for v in x], dtype)
        total = (
            np.exp(x)
            + safe(np.log)
            + safe(np.sqrt)
            + np.tanh(x)
            + e
            + np.abs(x)
            + np.floor(x)
            + np.ceil(x)
            + 1 / (1 + np.exp(-x))
        )
        return (total / 3 + x).astype(dtype), np.minimum(np.where(x > 1.5, np.nan, x), 0.1).astype(dtype)

    x = np.random.default_rng(2).standard_normal(70).astype(dtype)
    return trivial_binding([Y, Z]), reference, [x]


CUSTOM = {
    "negative_mod": negative_mod,
    "integers": integers,
    "intrinsics_f32": lambda: intrinsics("float32"),
    "intrinsics_f64": lambda: intrinsics("float64"),
}


TEMPLATES = ("batch_matmul", "conv2d", "dense", "depthwise_conv2d", "matmul")  # shared-memory tiles


def example(name: str):
    """(schedule, reference(*arrays), input arrays) for an example name: `op_<op>` is the op with
    a trivial binding, `tpl_<op>` the op with its default GPU schedule (minitc/templates/gpu)."""
    if name.startswith(("op_", "tpl_")):
        kind, op = name.split("_", 1)
        inst = tc.ops.OPS[op].instantiate("small", np.random.default_rng(0))
        s = trivial_binding(inst.output) if kind == "op" else template_schedule(inst.output, "cuda")
        return s, lambda *a: inst.expected(), list(inst.arrays)
    if name in CUSTOM:
        return CUSTOM[name]()
    s, reference, shapes = ALL[name]()
    rng = np.random.default_rng(0)
    return s, reference, [rng.standard_normal(shape).astype("float32") for shape in shapes]


EXAMPLES = sorted(ALL) + sorted(CUSTOM) + [f"op_{n}" for n in sorted(tc.ops.OPS)] + [f"tpl_{n}" for n in TEMPLATES]


def lower_examples() -> dict:
    """name -> (GpuProgram, reference, inputs) for every example, kernels named after the example."""
    out = {}
    for name in EXAMPLES:
        s, reference, inputs = example(name)
        out[name] = (lower_gpu(s, "cuda", name=name), reference, inputs)
    return out
