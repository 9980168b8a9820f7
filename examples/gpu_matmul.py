"""A GPU matmul scheduled by hand, step by step: blocks and threads, a register tile per thread,
shared-memory tiles filled by the whole block. Prints the loop nest and the CUDA C, checks the
kernel in the GPU simulator, and runs it on the GPU when CuPy finds one.
Run: python examples/gpu_matmul.py"""

import numpy as np

import minitc as tc

M, N, K = 128, 128, 64
TILE, REG, KSTEP = 32, 4, 8  # a block computes TILE x TILE of C, a thread REG x REG of it


def matmul_schedule(M=M, N=N, K=K, tile=TILE, reg=REG, kstep=KSTEP):
    """The schedule of C = A @ B (tests/gpu_schedules.py reuses it at smaller sizes)."""
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    C = tc.ops.matmul(A, B, name="C")
    s = tc.Schedule(C)

    # 1. Blocks and threads: C's loops split into (block, thread, register) levels, then bound.
    CL = s.cache_write(C, "local")  # C is copied out of CL, each thread's accumulators
    i, j = s.loops(C)
    bi, ii = s.split(i, factor=tile)
    bj, jj = s.split(j, factor=tile)
    ti, ri = s.split(ii, factor=reg)
    tj, rj = s.split(jj, factor=reg)
    s.reorder(bi, bj, ti, tj, ri, rj)
    s.bind(bi, "blockIdx.y")
    s.bind(bj, "blockIdx.x")
    s.bind(ti, "threadIdx.y")  # (tile/reg)^2 threads per block: 64 with the defaults
    s.bind(tj, "threadIdx.x")
    s.vectorize(rj)  # the copy-out stores float4 rows

    # 2. The register tile: CL computed per thread, the k loop outermost so the tile stays in
    #    registers.
    s.compute_at(CL, tj)
    ci, cj, ck = s.loops(CL)
    ko, ki = s.split(ck, factor=kstep)
    s.reorder(ko, ki, ci, cj)
    s.unroll(ci)
    s.unroll(cj)

    # 3. Shared memory: per k-step, the block's A and B tiles are copied once by all its threads
    #    (lowering adds the barriers) and then read tile/reg times each from shared memory.
    threads = tile // reg
    for cache in (s.cache_read(A, "shared", [CL]), s.cache_read(B, "shared", [CL])):
        s.compute_at(cache, ko)
        fused = s.fuse(*s.loops(cache))
        rest, fx = s.split(fused, factor=threads)
        _, fy = s.split(rest, factor=threads)
        s.bind(fx, "threadIdx.x")
        s.bind(fy, "threadIdx.y")
    return s


def main():
    s = matmul_schedule()
    print(tc.lower(s))  # the loop nest: bind(...) loops, alloc("shared", ...), barrier()
    print(tc.codegen(s, "cuda"))  # the CUDA C; needs neither a GPU nor CuPy

    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    sim = tc.build(s, target="cuda-sim")  # every thread in numpy, with race checks
    np.testing.assert_allclose(sim(a, b), a @ b, rtol=1e-4)
    print("the simulator agrees with numpy")

    try:
        f = tc.build(s, target="cuda")
    except tc.BuildError as e:
        print(f"no GPU run: {e}")
    else:
        import cupy

        ag, bg = cupy.asarray(a), cupy.asarray(b)  # on the GPU: no copies per call
        np.testing.assert_allclose(cupy.asnumpy(f(ag, bg)), a @ b, rtol=1e-4)
        print(f"GPU: {np.median(f.time_ms(ag, bg, number=10, repeat=5)):.4f} ms")


if __name__ == "__main__":
    main()
