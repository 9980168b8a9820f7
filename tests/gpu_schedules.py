"""Hand-written GPU schedules shared by the CUDA tests (renderer, simulator, nvcc): each
function returns (schedule, numpy reference function of the inputs, input shapes)."""
import numpy as np

import minitc as tc


def matmul_shared(M=64, N=48, K=32, tile=16, reg=4, kstep=8):
    """The classic: a block computes a tile x tile block of C, each thread a reg x reg register
    tile, A and B tiles staged in shared memory by all threads of the block."""
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    C = tc.ops.matmul(A, B, name="C")
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s.loops(C)
    io, ii = s.split(i, factor=tile)
    jo, ji = s.split(j, factor=tile)
    ty, iii = s.split(ii, factor=reg)
    tx, jii = s.split(ji, factor=reg)
    s.reorder(io, jo, ty, tx, iii, jii)
    s.bind(io, "blockIdx.y")
    s.bind(jo, "blockIdx.x")
    s.bind(ty, "threadIdx.y")
    s.bind(tx, "threadIdx.x")
    s.compute_at(CL, tx)
    ci, cj, ck = s.loops(CL)
    ko, ki = s.split(ck, factor=kstep)
    s.reorder(ko, ki, ci, cj)
    s.unroll(ci)
    s.unroll(cj)
    nt = tile // reg
    for cache in (s.cache_read(A, "shared", [CL]), s.cache_read(B, "shared", [CL])):
        s.compute_at(cache, ko)
        fused = s.fuse(*s.loops(cache))
        rest, fx = s.split(fused, factor=nt)
        _, fy = s.split(rest, factor=nt)
        s.bind(fx, "threadIdx.x")
        s.bind(fy, "threadIdx.y")
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
