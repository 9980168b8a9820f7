"""Vectorized loops in the CUDA C renderer (backends/cuda/vector.py): a `vectorized` loop of 4 or
2 float32 lanes (2 float64) whose body is one contiguous, provably aligned store becomes
float4/float2/double2 accesses; everything else stays the plain loop, byte for byte.

- source: which accesses become vectors, per-lane loads, `__align__(16)` only on shared arrays
  accessed as vectors, and the cases that must stay loops (misaligned or strided store, guard,
  load under a select, other dtypes and extents, a lane reading another lane's element);
- nvcc compiles them, warnings as errors, for sm_75 (PTX) and sm_90 (cubin) (skipped without nvcc);
- the host build of test_cuda_runtime.py runs them on 256-byte aligned arrays (as CuPy's) with
  UBSan checking the alignment of every vector access, and the simulator (target cuda-sim) runs
  the same kernels; both match numpy;
- marked `cuda` (skipped without CuPy and a GPU): tc.build(target="cuda") matches numpy.
"""

import re
import subprocess

import numpy as np
import pytest
from cuda_tools import build_host_library, cupy_usable, find_nvcc, find_nvrtc, nvrtc_compile, run_on_host

import minitc as tc
from minitc import ir
from minitc.backends.cuda.codegen import render_program
from minitc.backends.cuda.sim import SimFunction
from minitc.driver import lower_gpu
from minitc.expr import Var, const
from minitc.ir import Allocate, Barrier, Buffer, For, Kernel, Load, Store, seq
from minitc.lowering.gpu import GpuProgram, plan_launches

RNG = np.random.default_rng(7)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


# -- schedules: (schedule or GpuProgram, numpy reference, inputs) ------------------------------------


def rows_by_vectors(Y, lanes: int) -> tc.Schedule:
    """A block per row, a thread per `lanes` columns, those lanes one vectorized loop."""
    s = tc.Schedule(Y)
    i, j = s.loops(Y)
    jo, ji = s.split(j, factor=lanes)
    s.bind(i, "blockIdx.x")
    s.bind(jo, "threadIdx.x")
    s.vectorize(ji)
    return s


def elementwise(lanes=4, dtype="float32", rows=16, cols=64):
    """Y = X*2 + B[j] + X[i, 0] + j/10: the last axis split by `lanes`, the outer part bound to
    threads, the inner vectorized. X and B are read as vectors, X[i, 0] is a broadcast."""
    X, B = tc.placeholder((rows, cols), dtype, name="X"), tc.placeholder((cols,), dtype, name="B")
    Y = tc.compute((rows, cols), lambda i, j: X[i, j] * 2.0 + B[j] + X[i, 0] + tc.cast(j, dtype) * 0.1, name="Y")
    s = rows_by_vectors(Y, lanes)
    ref = lambda x, b: (x * 2 + b + x[:, :1] + np.arange(cols).astype(dtype) * np.asarray(0.1, dtype)).astype(dtype)  # noqa: E731
    return s, ref, [rand(rows, cols, dtype=dtype), rand(cols, dtype=dtype)]


def shared_fill(M=64, N=48, K=32, tile=16):
    """A matmul whose A and B tiles are copied to shared memory by vectorized loops: rows to
    threadIdx.y, columns split by 4 with the outer part on threadIdx.x (a guarded 4 of 16)."""
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    C = tc.ops.matmul(A, B, name="C")
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    io, ii = s.split(i, factor=tile)
    jo, ji = s.split(j, factor=tile)
    ko, ki = s.split(k, factor=tile)
    s.reorder(io, jo, ii, ji, ko, ki)
    for loop, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        s.bind(loop, tag)
    for name in (A, B):
        cache = s.cache_read(name, "shared", [C])
        s.compute_at(cache, ko)
        rows, cols = s.loops(cache)
        co, ci = s.split(cols, factor=4)
        s.bind(rows, "threadIdx.y")
        s.bind(co, "threadIdx.x")
        s.vectorize(ci)
    return s, (lambda a, b: a @ b), [rand(M, K), rand(K, N)]


def misaligned_loads(rows=16, cols=64):
    """Y[i, j] = X[i, j + 1] - X[i, j] with X rows of 65: the store is aligned, no load is
    (the row stride is odd), so the loads run per lane."""
    X = tc.placeholder((rows, cols + 1), name="X")
    Y = tc.compute((rows, cols), lambda i, j: X[i, j + 1] - X[i, j], name="Y")
    s = rows_by_vectors(Y, 4)
    return s, (lambda x: x[:, 1:] - x[:, :-1]), [rand(rows, cols + 1)]


def program(name, body, inputs, outputs):
    return plan_launches(Kernel(name, inputs + outputs, len(inputs), body))


def shared_reverse(n=64):
    """Hand-written IR: a shared copy of X, then Y's 4-element groups in reverse order read from
    it (offset 60 - 4t + v: a float4 load from shared with a negative coefficient)."""
    X, Y, S = Buffer("X", (n,), "float32"), Buffer("Y", (n,), "float32"), Buffer("S", (n,), "float32", "shared")
    b, t, v, u, w = Var("b"), Var("t"), Var("v"), Var("u"), Var("w")
    fill = For(t, n // 4, "threadIdx.x", For(v, 4, "vectorized", Store(S, (t * 4 + v,), Load(X, (t * 4 + v,)))))
    use = For(
        u,
        n // 4,
        "threadIdx.x",
        For(w, 4, "vectorized", Store(Y, (u * 4 + w,), Load(S, ((n // 4 - 1 - u) * 4 + w,)) + 1.0)),
    )
    body = For(b, 1, "blockIdx.x", Allocate(S, seq(fill, Barrier(), use)))
    return program("shared_reverse", body, [X], [Y]), (lambda x: x.reshape(-1, 4)[::-1].reshape(-1) + 1), [rand(n)]


def accumulate(n=64):
    """Hand-written IR: Y[i] = Y[i] * 0.5 + X[i] with Y read and written at the same element,
    which vectorizes (Y is read as a float4 before the float4 store)."""
    X, Y = Buffer("X", (n,), "float32"), Buffer("Y", (n,), "float32")
    t, v = Var("t"), Var("v")
    init = For(t, n, "threadIdx.x", Store(Y, (t,), Load(X, (t,))))
    step = For(
        t,
        n // 4,
        "threadIdx.x",
        For(v, 4, "vectorized", Store(Y, (t * 4 + v,), Load(Y, (t * 4 + v,)) * 0.5 + Load(X, (t * 4 + v,)))),
    )
    kernel = Kernel("accumulate", [X, Y], 1, seq(init, step))
    return plan_launches(kernel), (lambda x: x * 0.5 + x), [rand(n)]


def register_tile(M=64, N=48, K=32):
    """The GPU GEMM template with 8x4 register tiles: each thread's tile (a local array) reads
    rows of B_shared as float4 and stores the lanes as scalars."""
    from minitc.templates.gpu import GPU_TEMPLATES

    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    s = tc.Schedule(tc.ops.matmul(A, B, name="C"))
    GPU_TEMPLATES["matmul"](s, "C", None, bm=32, bn=16, tm=8, tn=4, bk=8)
    return s, (lambda a, b: a @ b), [rand(M, K), rand(K, N)]


VECTOR = {
    "elementwise_f4": lambda: elementwise(4),
    "elementwise_f2": lambda: elementwise(2),
    "elementwise_d2": lambda: elementwise(2, "float64"),
    "shared_fill": shared_fill,
    "misaligned_loads": misaligned_loads,
    "shared_reverse": shared_reverse,
    "accumulate": accumulate,
    "register_tile": register_tile,
}


# -- cases that must stay plain loops ----------------------------------------------------------------


def misaligned_store(n=64):
    """Hand-written IR: Y[4t + v + 1] = X[4t + v] * 2, the loop variable plus an odd constant."""
    X, Y = Buffer("X", (n,), "float32"), Buffer("Y", (n + 4,), "float32")
    t, v = Var("t"), Var("v")
    body = For(
        t, n // 4, "threadIdx.x", For(v, 4, "vectorized", Store(Y, (t * 4 + v + 1,), Load(X, (t * 4 + v,)) * 2.0))
    )

    def ref(x):
        y = np.zeros(n + 4, "float32")
        y[1 : n + 1] = x * 2
        return y

    return program("misaligned_store", body, [X], [Y]), ref, [rand(n)]


def neighbour(n=64):
    """Hand-written IR: Y[4t + v] = Y[4t + v - 1 (clamped)] + X: lane v reads what lane v - 1
    wrote (a recurrence inside each group of 4), so the lanes may not run at once."""
    X, Y = Buffer("X", (n,), "float32"), Buffer("Y", (n,), "float32")
    t, v = Var("t"), Var("v")
    prev = tc.maximum(t * 4 + v - 1, t * 4)
    init = For(t, n, "threadIdx.x", Store(Y, (t,), const(0.0)))
    body = For(
        t,
        n // 4,
        "threadIdx.x",
        For(v, 4, "vectorized", Store(Y, (t * 4 + v,), Load(Y, (prev,)) + Load(X, (t * 4 + v,)))),
    )
    ref = lambda x: np.cumsum(x.reshape(-1, 4), axis=1, dtype="float32").reshape(-1)  # noqa: E731
    return plan_launches(Kernel("neighbour", [X, Y], 1, seq(init, body))), ref, [rand(n)]


def guarded(rows=16, cols=62):
    """The last axis (62) split by 4: a guard inside the vectorized loop."""
    X = tc.placeholder((rows, cols), name="X")
    Y = tc.compute((rows, cols), lambda i, j: X[i, j] + 1.0, name="Y")
    s = rows_by_vectors(Y, 4)
    return s, (lambda x: x + 1), [rand(rows, cols)]


def strided(rows=16, cols=64):
    """Rows vectorized: the store's stride is 64, not 1."""
    X = tc.placeholder((rows, cols), name="X")
    Y = tc.compute((rows, cols), lambda i, j: X[i, j] * 3.0, name="Y")
    s = tc.Schedule(Y)
    i, j = s.loops(Y)
    io, ii = s.split(i, factor=4)
    s.reorder(io, j, ii)
    s.bind(io, "blockIdx.x")
    s.bind(j, "threadIdx.x")
    s.vectorize(ii)
    return s, (lambda x: x * 3), [rand(rows, cols)]


def padded(rows=16, cols=64):
    """Y[i, j] = X[i, j + 1] where j + 1 < cols, else 0: the load sits in a select branch."""
    X = tc.placeholder((rows, cols), name="X")
    Y = tc.compute((rows, cols), lambda i, j: tc.select(j + 1 < cols, X[i, tc.minimum(j + 1, cols - 1)], 0.0), name="Y")
    s = rows_by_vectors(Y, 4)
    return s, (lambda x: np.concatenate([x[:, 1:], np.zeros((rows, 1), "float32")], axis=1)), [rand(rows, cols)]


def other_types(lanes, dtype, rows=8, cols=64):
    """float64 x 4 (no double4) and int32 x 4: not vectorized."""
    X = tc.placeholder((rows, cols), dtype, name="X")
    Y = tc.compute((rows, cols), lambda i, j: X[i, j] + X[i, j], name="Y")
    s = rows_by_vectors(Y, lanes)
    x = RNG.integers(-100, 100, (rows, cols)).astype(dtype)
    return s, (lambda x: x + x), [x]


def extent_8(rows=8, cols=64):
    return other_types(8, "float32", rows, cols)


PLAIN = {
    "misaligned_store": misaligned_store,
    "neighbour": neighbour,
    "guarded": guarded,
    "strided": strided,
    "padded": padded,
    "float64_x4": lambda: other_types(4, "float64"),
    "int32_x4": lambda: other_types(4, "int32"),
    "float32_x8": extent_8,
}
ALL = VECTOR | PLAIN


def lowered(name: str):
    """(GpuProgram, reference, inputs) of a case, kernels named after it."""
    made, reference, inputs = ALL[name]()
    prog = made if isinstance(made, GpuProgram) else lower_gpu(made, "cuda", name=name)
    return prog, reference, inputs


@pytest.fixture(scope="module")
def cases():
    return {name: lowered(name) for name in ALL}


def serial(prog, kind="serial"):
    """The program with every vectorized loop made a loop of `kind` ("serial": what the renderer
    used to emit; "unrolled": what it emits for a vectorized loop that is no vector store)."""
    launches = []
    for launch in prog.launches:
        body = ir.map_stmt(
            launch.body,
            lambda s: ir.For(s.var, s.extent, kind, s.body) if isinstance(s, For) and s.kind == "vectorized" else None,
        )
        launches.append(type(launch)(launch.name, launch.params, body, launch.grid, launch.block, launch.shared_bytes))
    return type(prog)(prog.kernel, launches, prog.temporaries)


# -- source ------------------------------------------------------------------------------------------


def body_of(src: str) -> str:
    return src.split("#endif", 1)[1]


def test_elementwise_float4(cases):
    src = body_of(render_program(cases["elementwise_f4"][0]))
    assert "const float4 X_v = *reinterpret_cast<const float4*>(&X[i * 64 + j_o * 4]);" in src
    assert "const float4 B_v = *reinterpret_cast<const float4*>(&B[j_o * 4]);" in src
    assert "*reinterpret_cast<float4*>(&Y[i * 64 + j_o * 4]) = make_float4(X_v.x * 2.0f + B_v.x + X[i * 64] + " in src
    assert src.count("X_v") == 5 and "X_v.w" in src and "for (" not in src  # one load of X, no loop left
    assert "(float)(j_o * 4 + 3) * 0.1f" in src  # the loop variable is the lane number


def test_float2_and_double2(cases):
    f2 = body_of(render_program(cases["elementwise_f2"][0]))
    assert "const float2 X_v = *reinterpret_cast<const float2*>(&X[i * 64 + j_o * 2]);" in f2
    assert "*reinterpret_cast<float2*>(&Y[i * 64 + j_o * 2]) = make_float2(" in f2 and "X_v.z" not in f2
    d2 = body_of(render_program(cases["elementwise_d2"][0]))
    assert "const double2 X_v = *reinterpret_cast<const double2*>(&X[" in d2 and "= make_double2(" in d2


def test_shared_fill_is_float4_and_aligned(cases):
    src = body_of(render_program(cases["shared_fill"][0]))
    # double-buffered (minitc/lowering/double_buffer.py): two tiles each, and each fill twice
    # (prologue and loop), staged through registers: float4 loads into them, float4 stores out
    assert (
        "__shared__ __align__(16) float A_shared[512];" in src
        and "__shared__ __align__(16) float B_shared[512];" in src
    )
    assert src.count("*reinterpret_cast<float4*>(&") == 4 and src.count("*reinterpret_cast<const float4*>(&") == 4
    assert "const float4 A_v = *reinterpret_cast<const float4*>(&A[" in src and "A_shared_reg[3] = A_v.w;" in src
    assert (
        "*reinterpret_cast<float4*>(&A_shared[ax0_1 * 16 + ax1_o_1 * 4]) = make_float4(A_shared_reg[0], "
        "A_shared_reg[1], A_shared_reg[2], A_shared_reg[3]);" in src
    )
    assert "if ((int)threadIdx.x < 4) {" in src  # the bound loop's guard is outside the vector loop


def test_loads_that_do_not_qualify_run_per_lane(cases):
    src = body_of(render_program(cases["misaligned_loads"][0]))
    assert "*reinterpret_cast<float4*>(&Y[i * 64 + j_o * 4]) = make_float4(" in src
    assert "const float4" not in src  # rows of 65: no load is aligned
    assert "make_float4(X[i * 65 + j_o * 4 + 1] - X[i * 65 + j_o * 4], " in src
    assert "X[i * 65 + j_o * 4 + 4] - X[i * 65 + j_o * 4 + 3]" in src


def test_shared_load_and_same_element_read(cases):
    src = body_of(render_program(cases["shared_reverse"][0]))
    assert "__shared__ __align__(16) float S[64];" in src
    assert "const float4 S_v = *reinterpret_cast<const float4*>(&S[u * -4 + 60]);" in src
    src = body_of(render_program(cases["accumulate"][0]))
    assert "const float4 Y_v = *reinterpret_cast<const float4*>(&Y[t * 4]);" in src
    assert "make_float4(Y_v.x * 0.5f + X_v.x, " in src


def test_a_register_tile_reads_shared_rows_as_float4(cases):
    src = body_of(render_program(cases["register_tile"][0]))
    assert "__shared__ __align__(16) float B_shared[" in src and "__shared__ __align__(16) float A_shared[" in src
    for name in ("A_shared", "B_shared"):  # both tiles are laid out [k][m or n]: rows of registers
        load = f"const float4 {name}_v = *reinterpret_cast<const float4*>(&{name}["
        assert src.count(load) == 1  # in the k loop
        for lane, c in enumerate("xyzw"):  # the register array keeps scalar stores
            assert re.search(rf"{name}_local\[[^\]]*\] = {name}_v\.{c};", src)
    assert re.search(r"C_local\[[^\]]*\] = C_local\[[^\]]*\] \+ A_shared_local\[i_1\] \* B_shared_local\[j_1\];", src)
    assert "reinterpret_cast<float4*>(&C_local" not in src


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_what_does_not_qualify_renders_the_plain_loop(cases, name):
    prog = cases[name][0]
    src = render_program(prog)
    assert src == render_program(serial(prog, "unrolled"))  # byte for byte what an unrolled loop gives
    assert "reinterpret_cast" not in src and "__align__" not in src and "for (" in src


def test_shared_arrays_are_aligned_only_when_accessed_as_vectors(cases):
    assert "__shared__ float A_shared[512];" in render_program(serial(cases["shared_fill"][0]))


# -- nvcc --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvcc_logs(cases, tmp_path_factory):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin")
    d = tmp_path_factory.mktemp("nvcc_vector")
    (d / "vector.cu").write_text("\n".join(render_program(p) for p, _, _ in cases.values()))
    common = ["-std=c++17", "-Werror", "all-warnings", "vector.cu"]
    runs = {
        "sm_75": subprocess.Popen(
            [nvcc, "-ptx", "-arch=sm_75", "-o", "vector.ptx", *common],
            cwd=d,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "sm_90": subprocess.Popen(
            [nvcc, "-cubin", "-arch=sm_90", "-o", "vector.cubin", *common],
            cwd=d,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
    logs = {arch: (p.wait(timeout=300), p.stdout.read()) for arch, p in runs.items()}
    logs["ptx"] = (d / "vector.ptx").read_text() if (d / "vector.ptx").exists() else ""
    return logs


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_nvcc_compiles_without_warnings(nvcc_logs, arch):
    rc, log = nvcc_logs[arch]
    assert rc == 0, log[-4000:]
    assert "warning" not in log.lower()


def test_ptx_has_vector_instructions(nvcc_logs, cases):
    ptx = nvcc_logs["ptx"]
    entries = {
        name: ptx.split(f".entry {name}(", 1)[1].split(".entry", 1)[0]
        for name in ("elementwise_f4", "shared_fill", "elementwise_d2")
    }
    assert "ld.global.nc.v4.f32" in entries["elementwise_f4"] and "st.global.v4.f32" in entries["elementwise_f4"]
    assert "st.shared.v4.f32" in entries["shared_fill"]
    assert "st.global.v2.f64" in entries["elementwise_d2"]


def test_nvrtc_compiles_without_warnings(cases):
    """The runtime compiles with NVRTC, where float4 and make_float4 are built in (no headers)."""
    lib = find_nvrtc()
    if lib is None:
        pytest.skip("libnvrtc not found (CUDA toolkit lib64 or the nvidia-cuda-nvrtc wheel)")
    from minitc.backends.cuda.runtime import OPTIONS

    source = "\n".join(render_program(p) for p, _, _ in cases.values())
    status, log = nvrtc_compile(lib, source, [*OPTIONS, "-arch=compute_75", "-ftz=true"])
    assert status == 0 and "warning" not in log, log[-4000:]


# -- running: host build (UBSan checks alignment) and simulator ---------------------------------------


def aligned_copy(a: np.ndarray, align: int = 256) -> np.ndarray:
    """`a` in memory aligned like a CuPy allocation."""
    raw = np.empty(a.nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.fixture(scope="module")
def host_library(cases, tmp_path_factory):
    return build_host_library(
        "\n".join(render_program(p) for p, _, _ in cases.values()),
        tmp_path_factory.mktemp("host_vector"),
        flags=("-fsanitize=alignment",),
    )


@pytest.mark.parametrize("name", sorted(ALL))
def test_host_run_matches_numpy(host_library, cases, capfd, name):
    prog, reference, inputs = cases[name]
    k = prog.kernel
    outputs = [aligned_copy(np.zeros(b.shape, b.dtype)) for b in k.outputs]
    arrays = dict(zip(map(id, prog.buffers), [aligned_copy(x) for x in inputs] + outputs))
    for launch in prog.launches:
        barrier = any(isinstance(st, ir.Barrier) for st in ir.walk_stmts(launch.body))
        run_on_host(
            host_library,
            launch.name,
            [arrays[id(b)].ctypes.data for b in launch.params],
            launch.grid,
            launch.block,
            barrier,
        )
    np.testing.assert_allclose(outputs[0], reference(*inputs), rtol=2e-5, atol=2e-5)
    err = capfd.readouterr().err
    assert "misaligned" not in err and "runtime error" not in err, err[-2000:]


@pytest.mark.parametrize("name", sorted(ALL))
def test_simulator_matches_numpy(name):
    made, reference, inputs = ALL[name]()
    f = tc.build(made, target="cuda-sim") if isinstance(made, tc.Schedule) else SimFunction(made)
    out = [np.zeros(b.shape, b.dtype) for b in f.kernel.outputs]
    f(*inputs, out=out)
    np.testing.assert_allclose(out[0], reference(*inputs), rtol=2e-5, atol=2e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("name", sorted(ALL))
def test_runs_on_the_gpu(cases, name):
    import cupy

    from minitc.backends.cuda.runtime import build_program

    prog, reference, inputs = cases[name]
    f = build_program(prog)
    out = [cupy.zeros(b.shape, b.dtype) for b in prog.kernel.outputs]
    f(*[cupy.asarray(aligned_copy(x)) for x in inputs], out=out)
    np.testing.assert_allclose(out[0].get(), reference(*inputs), rtol=2e-5, atol=2e-5)


def test_the_alignment_check_sees_a_misaligned_buffer(host_library, cases, capfd):
    """The negative control of the UBSan check: X one float past a 256-byte boundary."""
    prog, _, (x, b) = cases["elementwise_f4"]
    raw = aligned_copy(np.zeros(x.size + 1, "float32"))
    shifted, y = raw[1:].reshape(x.shape), aligned_copy(np.zeros(x.shape, "float32"))
    launch = prog.launches[0]
    pointers = {"X": shifted.ctypes.data, "B": aligned_copy(b).ctypes.data, "Y": y.ctypes.data}
    run_on_host(host_library, launch.name, [pointers[p.name] for p in launch.params], launch.grid, launch.block, False)
    assert "misaligned address" in capfd.readouterr().err
