"""Tests of the LLVM backend's JIT-compiled kernels (backends/llvm/jit.py); target parsing and
rendering alone are test_llvm_codegen.py.

Kernels are built by hand from the IR classes, compiled with `compile_kernel`, called through
ctypes and compared with numpy: vectorized and guarded loops, lazy selects, Python's floor
division and modulo, intrinsics, casts, gathers and scatters, heap and stack allocations,
parallel loops (with a serial stand-in for the runtime when backends/llvm/runtime.py is
missing), the compile cache and its thread safety, and LLVM's errors. Checks of the generated
machine code (ymm, vfmadd) need an AVX2+FMA host and skip elsewhere.
"""

import ctypes
import importlib.util
import math
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest
from helpers import relu_kernel

from minitc.backends.llvm.jit import compile_kernel
from minitc.errors import BuildError
from minitc.expr import Var, call, cast, const, maximum, minimum, select
from minitc.ir import Allocate, Buffer, For, IfThenElse, Kernel, Load, Store, seq
from minitc.target import parse_target
from minitc.target.cpu import enabled_features

HOST_FEATURES = enabled_features(parse_target("llvm"))
needs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= HOST_FEATURES, reason="needs an AVX2+FMA host")


@pytest.fixture(scope="module", autouse=True)
def parallel_runtime():
    """The real runtime when backends/llvm/runtime.py exists, else a serial stand-in."""
    if importlib.util.find_spec("minitc.backends.llvm.runtime") is not None:
        yield
        return
    task_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    def launch(task, closure, n):
        fn = task_type(task)
        for t in range(n):
            fn(closure, t, n)

    @ctypes.CFUNCTYPE(ctypes.c_int64)
    def num_threads():
        return 2

    llvm.add_symbol("minitc_parallel_launch", ctypes.cast(launch, ctypes.c_void_p).value)
    llvm.add_symbol("minitc_num_threads", ctypes.cast(num_threads, ctypes.c_void_p).value)
    yield


def run(kernel, *arrays):
    ck = compile_kernel(kernel)
    assert all(a.flags.c_contiguous for a in arrays)
    ck.cfunc(*[a.ctypes.data for a in arrays])
    return ck


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- compiled kernels -------------------------------------------------------------------------------


@needs_avx2
def test_elementwise_relu_vectorized():
    k = relu_kernel()
    x, a, b = f32(16, 64), f32(64, seed=1), f32(64, seed=2)
    y = np.zeros((16, 64), np.float32)
    ck = run(k, x, a, b, y)
    np.testing.assert_allclose(y, np.maximum(x * a + b, 0), rtol=1e-6, atol=1e-6)
    assert "<8 x float>" in ck.llvm_ir
    assert "ymm" in ck.asm and "vfmadd" in ck.asm


def matmul_kernel(n=64, tile=8):
    """C = A @ B: parallel row tiles, an 8x8 local accumulator (unrolled rows, vectorized
    columns), a serial k loop with FMA, and the copy-back."""
    A, B, C = (Buffer(name, (n, n), "float32") for name in "ABC")
    acc = Buffer("acc", (tile, tile), "float32", scope="local")
    io, jo, k = Var("io"), Var("jo"), Var("k")
    ii0, ji0, ii1, ji1, ii2, ji2 = (Var(s) for s in ("ii", "ji", "ii", "ji", "ii", "ji"))

    def tile_loop(ii, ji, stmt):
        return For(ii, tile, "unrolled", For(ji, tile, "vectorized", stmt))

    init = tile_loop(ii0, ji0, Store(acc, (ii0, ji0), const(0.0, "float32")))
    update = For(
        k,
        n,
        "serial",
        tile_loop(
            ii1,
            ji1,
            Store(
                acc, (ii1, ji1), Load(acc, (ii1, ji1)) + Load(A, (io * tile + ii1, k)) * Load(B, (k, jo * tile + ji1))
            ),
        ),
    )
    copy = tile_loop(ii2, ji2, Store(C, (io * tile + ii2, jo * tile + ji2), Load(acc, (ii2, ji2))))
    body = For(io, n // tile, "parallel", For(jo, n // tile, "serial", Allocate(acc, seq(init, update, copy))))
    return Kernel("matmul", [A, B, C], 2, body)


@needs_avx2
def test_matmul_tiled_parallel_fma():
    a, b = f32(64, 64), f32(64, 64, seed=1)
    c = np.zeros((64, 64), np.float32)
    ck = run(matmul_kernel(), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert "@minitc_parallel_launch" in ck.llvm_ir_unoptimized
    task_asm = ck.asm[ck.asm.index(f"{ck.name}_par0:") :]
    # FMA vector code inside the task; which of the three operand orders LLVM picks depends on the cpu
    assert re.search(r"vfmadd(132|213|231)ps", task_asm) and "ymm" in task_asm
    task_ir = ck.llvm_ir[ck.llvm_ir.index(f"@{ck.name}_par0(") :]
    assert "alloca" not in task_ir and "phi <8 x float>" in task_ir  # the tile lives in registers


def test_guard_in_vectorized_and_serial_loops():
    X, Y = Buffer("X", (10,), "float32"), Buffer("Y", (10,), "float32")
    io, ii, jo, ji = Var("io"), Var("ii"), Var("jo"), Var("ji")
    i, j = io * 8 + ii, jo * 4 + ji
    vec = For(io, 2, "serial", For(ii, 8, "vectorized", IfThenElse(i < 10, Store(Y, (i,), Load(X, (i,)) * 3.0))))
    ser = For(jo, 3, "serial", For(ji, 4, "serial", IfThenElse(j < 10, Store(X, (j,), Load(X, (j,)) + 1.0))))
    x = f32(10)
    x0 = x.copy()
    y = np.zeros(10, np.float32)
    ck = run(Kernel("guard", [X, Y], 1, seq(vec, ser)), x, y)
    np.testing.assert_allclose(y, x0 * 3.0, rtol=1e-6)
    np.testing.assert_allclose(x, x0 + 1.0, rtol=1e-6)
    assert "llvm.masked.store" in ck.llvm_ir_unoptimized


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_lazy_select_padding(kind):
    """Y[i] = X[i-2] inside the window, else 0: eager evaluation would read X[-2]. A second
    select reads an address ~4 TB away where its condition is false: eager code would fault."""
    n = 12
    X, Y, Z = Buffer("X", (n,), "float32"), Buffer("Y", (n + 4,), "float32"), Buffer("Z", (n + 4,), "float32")
    io, ii = Var("io"), Var("ii")
    i = io * 8 + ii
    pad = Store(Y, (i,), select((i >= 2) & (i < n + 2), Load(X, (i - 2,)), 0.0))
    wild = Store(Z, (i,), select(i < n, Load(X, (i + (i // n) * 10**12,)), -1.0))
    ck = run(
        Kernel("pad", [X, Y, Z], 1, For(io, 2, "serial", For(ii, 8, kind, seq(pad, wild)))),
        x := f32(n),
        y := np.zeros(n + 4, np.float32),
        z := np.zeros(n + 4, np.float32),
    )
    np.testing.assert_array_equal(y, np.pad(x, (2, 2)))
    np.testing.assert_array_equal(z, np.concatenate([x, -np.ones(4, np.float32)]))
    if kind == "vectorized":
        assert "llvm.masked.load" in ck.llvm_ir_unoptimized and "llvm.masked.gather" in ck.llvm_ir_unoptimized
    else:
        assert "phi float" in ck.llvm_ir_unoptimized


@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_floordiv_mod_python_semantics(kind):
    n = 64
    A, B = Buffer("A", (n,), "int64"), Buffer("B", (n,), "int64")
    Q, R, Q3, R3, QI = (Buffer(s, (n,), "int64") for s in ("Q", "R", "Q3", "R3", "QI"))
    io, ii = Var("io"), Var("ii")
    i = io * 8 + ii
    a, b = Load(A, (i,)), Load(B, (i,))
    body = seq(
        Store(Q, (i,), a // b),
        Store(R, (i,), a % b),
        Store(Q3, (i,), a // -3),
        Store(R3, (i,), a % 4),
        Store(QI, (i,), i // 3 + i % 5),  # provably non-negative: udiv/urem
    )
    k = Kernel("divmod", [A, B, Q, R, Q3, R3, QI], 2, For(io, n // 8, "serial", For(ii, 8, kind, body)))
    rng = np.random.default_rng(0)
    av = rng.integers(-50, 50, n).astype(np.int64)
    bv = rng.choice([-7, -3, -2, -1, 1, 2, 5, 9], n).astype(np.int64)
    bv[:3] = 0  # division by zero gives 0, as numpy does, instead of a trap
    outs = [np.zeros(n, np.int64) for _ in range(5)]
    ck = run(k, av, bv, *outs)
    nz = bv != 0
    expect_q = [int(x) // int(y) if y else 0 for x, y in zip(av, bv)]
    expect_r = [int(x) % int(y) if y else 0 for x, y in zip(av, bv)]
    assert outs[0].tolist() == expect_q and outs[1].tolist() == expect_r and nz.sum() == n - 3
    assert outs[2].tolist() == [int(x) // -3 for x in av]
    assert outs[3].tolist() == [int(x) % 4 for x in av]
    assert outs[4].tolist() == [x // 3 + x % 5 for x in range(n)]
    assert "udiv" in ck.llvm_ir_unoptimized and "urem" in ck.llvm_ir_unoptimized


INTRINSICS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": np.vectorize(math.erf),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["serial", "vectorized"])
def test_intrinsics_match_numpy(dtype, kind):
    n = 32
    X = Buffer("X", (n,), dtype)
    outs = {name: Buffer(f"Y_{name}", (n,), dtype) for name in INTRINSICS}
    io, ii = Var("io"), Var("ii")
    i = io * 8 + ii
    x = Load(X, (i,))
    stmts = []
    for name, buf in outs.items():
        arg = call("abs", x) + 0.1 if name in ("log", "sqrt") else x
        stmts.append(Store(buf, (i,), call(name, arg)))
    body = For(io, n // 8, "serial", For(ii, 8, kind, seq(*stmts)))
    k = Kernel(f"intrinsics_{dtype}", [X] + list(outs.values()), 1, body)
    xv = (np.random.default_rng(3).standard_normal(n) * 2).astype(dtype)
    ys = [np.zeros(n, dtype) for _ in outs]
    run(k, xv, *ys)
    tol = 2e-6 if dtype == "float32" else 1e-12
    for (name, ref), y in zip(INTRINSICS.items(), ys):
        arg = np.abs(xv) + np.asarray(0.1, dtype) if name in ("log", "sqrt") else xv
        np.testing.assert_allclose(y, ref(arg.astype(np.float64)).astype(dtype), rtol=tol, atol=tol, err_msg=name)


def test_int_and_float64_buffers_and_casts():
    n = 16
    types = ("int32", "int64", "float64", "float32")
    I32, I64, F64, F32 = (Buffer(f"in_{t}", (n,), t) for t in types)
    O_i32, O_i64, O_f64, O_f32 = (Buffer(f"out_{t}", (n,), t) for t in types)
    io, ii = Var("io"), Var("ii")
    i = io * 8 + ii
    a, b, c, d = (Load(B, (i,)) for B in (I32, I64, F64, F32))
    body = seq(
        Store(O_i64, (i,), cast(a, "int64") * b + cast(i < 5, "int64") - cast(d, "int64")),
        Store(O_i32, (i,), cast(b, "int32") + cast(c, "int32") + minimum(a, 3)),
        Store(O_f64, (i,), cast(d, "float64") * c + cast(a, "float64") + cast(i >= 8, "float64")),
        Store(O_f32, (i,), cast(c, "float32") + cast(call("abs", a), "float32") + maximum(d, -0.5)),
    )
    loops = For(io, 2, "serial", For(ii, 8, "vectorized", body))
    k = Kernel("casts", [I32, I64, F64, F32, O_i64, O_i32, O_f64, O_f32], 4, loops)
    rng = np.random.default_rng(5)
    av, bv = rng.integers(-9, 9, n).astype(np.int32), rng.integers(-9, 9, n).astype(np.int64)
    cv, dv = (rng.standard_normal(n) * 5).astype(np.float64), (rng.standard_normal(n) * 5).astype(np.float32)
    o = [np.zeros(n, t) for t in (np.int64, np.int32, np.float64, np.float32)]
    run(k, av, bv, cv, dv, *o)
    idx = np.arange(n)
    np.testing.assert_array_equal(o[0], av.astype(np.int64) * bv + (idx < 5) - np.trunc(dv).astype(np.int64))
    np.testing.assert_array_equal(o[1], bv.astype(np.int32) + np.trunc(cv).astype(np.int32) + np.minimum(av, 3))
    np.testing.assert_allclose(o[2], dv.astype(np.float64) * cv + av + (idx >= 8), rtol=1e-12)
    np.testing.assert_allclose(o[3], cv.astype(np.float32) + np.abs(av) + np.maximum(dv, -0.5), rtol=1e-6)


def test_max_reduction_with_neg_inf_init():
    rows, cols = 6, 40
    X, Y = Buffer("X", (rows, cols), "float32"), Buffer("Y", (rows,), "float32")
    i, k = Var("i"), Var("k")
    body = For(
        i,
        rows,
        "serial",
        seq(
            Store(Y, (i,), const(-math.inf, "float32")),
            For(k, cols, "serial", Store(Y, (i,), maximum(Load(Y, (i,)), Load(X, (i, k))))),
        ),
    )
    x = f32(rows, cols)
    x[2, :] = -np.inf  # an all -inf row stays -inf
    y = np.zeros(rows, np.float32)
    ck = run(Kernel("rowmax", [X, Y], 1, body), x, y)
    np.testing.assert_array_equal(y, x.max(axis=1))
    assert "0xFFF0000000000000" in ck.llvm_ir_unoptimized


def test_strided_gather_and_scatter_in_vectorized_loop():
    n = 16
    X, Y, Z = Buffer("X", (n, n), "float32"), Buffer("Y", (n, n), "float32"), Buffer("Z", (n, n), "float32")
    i, jo, ji = Var("i"), Var("jo"), Var("ji")
    j = jo * 8 + ji
    body = For(
        i,
        n,
        "serial",
        For(
            jo,
            2,
            "serial",
            For(
                ji,
                8,
                "vectorized",
                seq(
                    Store(Y, (i, j), Load(X, (j, i)) * 2.0),  # gather: stride n
                    Store(Z, (j, i), Load(X, (i, j)) + Load(X, (i, const(0)))),  # scatter + scalar broadcast load
                ),
            ),
        ),
    )
    x = f32(n, n)
    y, z = np.zeros((n, n), np.float32), np.zeros((n, n), np.float32)
    ck = run(Kernel("transpose", [X, Y, Z], 1, body), x, y, z)
    np.testing.assert_allclose(y, x.T * 2.0, rtol=1e-6)
    np.testing.assert_allclose(z, (x + x[:, :1]).T, rtol=1e-6)
    assert "extractelement <8 x ptr>" in ck.llvm_ir_unoptimized


def test_cross_lane_reduction_falls_back_to_scalar_lanes():
    X, S = Buffer("X", (16,), "float32"), Buffer("S", (1,), "float32")
    jo, ji = Var("jo"), Var("ji")
    zero = const(0)
    body = seq(
        Store(S, (zero,), const(0.0, "float32")),
        For(jo, 2, "serial", For(ji, 8, "vectorized", Store(S, (zero,), Load(S, (zero,)) + Load(X, (jo * 8 + ji,))))),
    )
    x, s = f32(16), np.zeros(1, np.float32)
    ck = run(Kernel("vsum", [X, S], 1, body), x, s)
    np.testing.assert_allclose(s[0], x.sum(), rtol=1e-5)
    assert "emitted as scalar lanes" in ck.llvm_ir_unoptimized


def test_heap_and_stack_allocations():
    n = 128 * 128  # 64 KiB of float32 in global scope: from the runtime's workspace cache
    X, Y = Buffer("X", (n,), "float32"), Buffer("Y", (n,), "float32")
    T = Buffer("T", (n,), "float32", scope="global")
    L = Buffer("L", (4,), "float32", scope="local")
    i, k = Var("i"), Var("k")
    body = Allocate(
        T,
        seq(
            For(i, n, "serial", Store(T, (i,), Load(X, (i,)) * 2.0)),
            For(
                i,
                n // 4,
                "serial",
                Allocate(
                    L,
                    seq(
                        For(k, 4, "unrolled", Store(L, (k,), Load(T, (i * 4 + k,)) + 1.0)),
                        For(k, 4, "serial", Store(Y, (i * 4 + k,), Load(L, (3 - k,)))),
                    ),
                ),
            ),
        ),
    )
    x, y = f32(n), np.zeros(n, np.float32)
    ck = run(Kernel("allocs", [X, Y], 1, body), x, y)
    np.testing.assert_allclose(y, (x * 2 + 1).reshape(-1, 4)[:, ::-1].ravel(), rtol=1e-6)
    ir = ck.llvm_ir_unoptimized
    assert "@minitc_workspace_alloc(i64 65536)" in ir and "@minitc_workspace_free" in ir
    assert "alloca [4 x float], align 64" in ck.llvm_ir_unoptimized


def test_parallel_loop_captures_outer_vars_and_buffers():
    X, Y = Buffer("X", (4, 6, 8), "float32"), Buffer("Y", (4, 6, 8), "float32")
    b, i, j = Var("b"), Var("i"), Var("j")
    body = For(
        b,
        4,
        "serial",
        For(
            i,
            6,
            "parallel",
            For(j, 8, "serial", Store(Y, (b, i, j), Load(X, (b, i, j)) + cast(b * 100 + i, "float32"))),
        ),
    )
    x, y = f32(4, 6, 8), np.zeros((4, 6, 8), np.float32)
    ck = run(Kernel("par_capture", [X, Y], 1, body), x, y)
    expect = x + (np.arange(4)[:, None, None] * 100 + np.arange(6)[None, :, None]).astype(np.float32)
    np.testing.assert_allclose(y, expect, rtol=1e-6)
    assert "alwaysinline" in ck.llvm_ir_unoptimized


def test_compile_cache_returns_same_object():
    first = compile_kernel(relu_kernel(rows=4))
    assert compile_kernel(relu_kernel(rows=4)) is first  # a new but identical kernel
    assert compile_kernel(relu_kernel(rows=5)) is not first
    assert first.name.startswith("relu_affine_") and first.address


def test_incompatible_target_is_refused():
    if "avx512f" in HOST_FEATURES:
        pytest.skip("host has AVX-512")
    with pytest.raises(BuildError, match="features this machine lacks"):
        compile_kernel(relu_kernel(rows=3), "llvm -mcpu=skylake-avx512")


@pytest.mark.parametrize("lanes", [3, 6, 16])
def test_odd_and_wide_vector_widths_with_else_branch(lanes):
    n = lanes * 3 - 1  # the last vector is partial: a lane-varying guard with an else branch
    X, Y = Buffer("X", (n,), "float64"), Buffer("Y", (n + lanes,), "float64")
    io, ii = Var("io"), Var("ii")
    i = io * lanes + ii
    then = Store(Y, (i,), Load(X, (i,)) * cast(i, "float64"))
    guard = IfThenElse(~(i >= n) | (i < 0), then, Store(Y, (i,), const(7.0, "float64")))
    body = For(io, 3, "serial", For(ii, lanes, "vectorized", guard))
    x, y = np.random.default_rng(1).standard_normal(n), np.zeros(n + lanes)
    ck = run(Kernel(f"odd{lanes}", [X, Y], 1, body), x, y)
    np.testing.assert_allclose(y[:n], x * np.arange(n), rtol=1e-12)
    np.testing.assert_array_equal(y[n : 3 * lanes], 7.0)
    assert f"<{lanes} x double>" in ck.llvm_ir_unoptimized


def test_long_unrolled_and_vectorized_loops_become_serial():
    n = 100  # above the explicit-unroll and vector-width limits (64)
    X, Y = Buffer("X", (n,), "int32"), Buffer("Y", (n,), "int32")
    i, j = Var("i"), Var("j")
    body = seq(
        For(i, n, "unrolled", Store(Y, (i,), Load(X, (i,)) * 2)),
        For(j, n, "vectorized", Store(Y, (j,), Load(Y, (j,)) + maximum(Load(X, (j,)), 0))),
    )
    x, y = np.arange(-50, 50, dtype=np.int32), np.zeros(n, np.int32)
    ck = run(Kernel("long_loops", [X, Y], 1, body), x, y)
    np.testing.assert_array_equal(y, x * 2 + np.maximum(x, 0))
    assert "llvm.loop.unroll.count" in ck.llvm_ir_unoptimized


def test_nested_parallel_runs_serially_inside_the_task():
    X = Buffer("X", (4, 8), "int64")
    i, j = Var("i"), Var("j")
    body = For(i, 4, "parallel", For(j, 8, "parallel", Store(X, (i, j), i * 10 + j)))
    x = np.zeros((4, 8), np.int64)
    ck = run(Kernel("nested_par", [X], 0, body), x)
    np.testing.assert_array_equal(x, np.arange(4)[:, None] * 10 + np.arange(8))
    assert ck.llvm_ir_unoptimized.count("call void @minitc_parallel_launch") == 1


@needs_avx2
def test_noalias_reaches_loops_inside_parallel_tasks():
    """C[i, :] += A[i, k] * B[k, :] with serial k and j inside a parallel i: the outlined body's
    noalias parameters let LLVM keep the C row in ymm registers across k, with no scalar
    fallback loop behind runtime alias checks."""
    n = 64
    A, B, C = (Buffer(s, (n, n), "float32") for s in "ABC")
    i, j, k, j0 = Var("i"), Var("j"), Var("k"), Var("j0")
    body = For(
        i,
        n,
        "parallel",
        seq(
            For(j0, n, "serial", Store(C, (i, j0), const(0.0, "float32"))),
            For(
                k,
                n,
                "serial",
                For(j, n, "serial", Store(C, (i, j), Load(C, (i, j)) + Load(A, (i, k)) * Load(B, (k, j)))),
            ),
        ),
    )
    a, b, c = f32(n, n), f32(n, n, seed=1), np.zeros((n, n), np.float32)
    ck = run(Kernel("mm_serial_inner", [A, B, C], 2, body), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    task_asm = ck.asm[ck.asm.index(f"{ck.name}_par0:") :]
    assert task_asm.count("vfmadd231ps") >= 8
    assert "vfmadd213ss" not in task_asm and "vfmadd231ss" not in task_asm


def test_concurrent_compiles_are_safe():
    kernels = [relu_kernel(rows=r) for r in (7, 8, 9, 7)]
    results = [None] * len(kernels)

    def work(n):
        results[n] = compile_kernel(kernels[n])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(kernels))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] is results[3] and len({id(r) for r in results}) == 3
    x, a, b = f32(9, 64), f32(64, seed=1), f32(64, seed=2)
    y = np.zeros((9, 64), np.float32)
    results[2].cfunc(x.ctypes.data, a.ctypes.data, b.ctypes.data, y.ctypes.data)
    np.testing.assert_allclose(y, np.maximum(x * a + b, 0), rtol=1e-6, atol=1e-6)


def test_llvm_errors_become_build_errors(monkeypatch):
    import minitc.backends.llvm.jit as jit

    monkeypatch.setattr(jit, "render", lambda kernel, target, name=None: f"define void @{name or 'x'}() {{ bogus }}")
    with pytest.raises(BuildError, match="LLVM rejected the IR"):
        jit.compile_kernel(relu_kernel(rows=2))
