"""Hand-written GPU schedules shared by the CUDA tests (renderer, simulator, nvcc): each
function returns (schedule, numpy reference function of the inputs, input shapes)."""
import runpy
from pathlib import Path

import numpy as np

import minitc as tc

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
    s = tc.Schedule(Y)
    for st in s.state.stages:
        if st.is_placeholder:
            continue
        loops = s.loops(st.name)
        spatial = [lp for lp, l in zip(loops, st.loops) if not l.reduce]
        fused = s.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        bo, ti = s.split(fused, factor=threads)
        s.bind(bo, "blockIdx.x")
        s.bind(ti, "threadIdx.x")

    def reference(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return s, reference, [(rows, cols)]


ALL = {"matmul_shared": matmul_shared, "elementwise": elementwise, "row_sum": row_sum, "softmax_rows": softmax_rows}
