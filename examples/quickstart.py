"""Quickstart: define a matmul, schedule it, look at the loop nest, compile it for this CPU and
benchmark it against numpy. Run: python examples/quickstart.py"""

import time

import numpy as np

import minitc as tc

M, N, K = 512, 512, 512
A = tc.placeholder((M, K), "float32", name="A")
B = tc.placeholder((K, N), "float32", name="B")
k = tc.reduce_axis(K, name="k")
C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")

s = tc.Schedule(C)
i, j, kk = s.loops(C)  # C's loops, outermost first: spatial, then reduction
io, ii = s.split(i, factor=32)
jo, ji = s.split(j, factor=8)
s.reorder(io, jo, kk, ii, ji)
s.vectorize(ji)
s.unroll(ii)
s.parallel(io)
print(tc.lower(s))  # readable loop nest
f = tc.build(s, target="llvm")  # host CPU; "llvm -mcpu=znver1" etc. also accepted
a = np.random.rand(M, K).astype("float32")
b = np.random.rand(K, N).astype("float32")
c = f(a, b)  # returns the output
f(a, b, out=c)  # or writes in place; contiguous CPU torch tensors work too
print(f.llvm_ir[:500], f.asm[:500])
np.testing.assert_allclose(c, a @ b, rtol=1e-4)


if __name__ == "__main__":  # the timing; `minitc explain examples/quickstart.py` skips it

    def median_ms(fn, repeats=20):
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return 1e3 * float(np.median(times))

    flops = 2 * M * N * K
    naive = tc.build(tc.Schedule(C))
    rows = [
        ("minitc, quickstart schedule", median_ms(lambda: f(a, b, out=c))),
        ("minitc, naive loop nest", median_ms(lambda: naive(a, b, out=c), repeats=3)),
        ("numpy (BLAS)", median_ms(lambda: np.matmul(a, b, out=c))),
    ]
    print(f"\nmatmul {M}x{N}x{K} float32, median of repeats:")
    for name, ms in rows:
        print(f"  {name:30s} {ms:8.2f} ms  {flops / ms / 1e6:7.1f} GFLOP/s")
