"""The CUDA C renderer (backends/cuda/codegen.py) on every example of gpu_schedules.py and on a
trivially bound schedule of every tc.ops operator:

- structure: extern "C", __restrict__ and const, __launch_bounds__, one __shared__ declaration per
  shared buffer, one __syncthreads() per barrier, deterministic text, exact float literals;
- nvcc compiles all of it, warnings as errors, for sm_75 (PTX) and sm_90 (through ptxas), and so
  does NVRTC with CuPy's options where libnvrtc is found (each skipped when the tool is missing);
- the generated code runs on the host: g++ builds it with a few macros (GPU threads become
  std::threads, __syncthreads a std::barrier) and the results match numpy;
- the runtime (backends/cuda/runtime.py, device.py) end to end against a fake CuPy whose
  "kernels" are that host build: argument conventions, errors, temporaries, timing;
- marked `cuda` (skipped without CuPy and a GPU): tc.build(target="cuda") matches numpy.
"""
import contextlib
import math
import re
import subprocess
import sys
import time
import types

import numpy as np
import pytest

import gpu_schedules
import minitc as tc
from backends.cuda.codegen import C_TYPES, float_literal, render_launch, render_program, sanitize
from minitc import ir
from minitc.driver import lower_gpu
from minitc.errors import BuildError, ShapeError
from minitc.expr import Var, const
from minitc.lower.gpu import Launch
from minitc.schedules import default_schedule

from cuda_tools import build_host_library, cupy_usable, find_nvcc, find_nvrtc, nvrtc_compile, run_on_host


def trivial_binding(outputs) -> tc.Schedule:
    """Every stage: spatial loops fused, split by 64, bound to blockIdx.x / threadIdx.x."""
    s = tc.Schedule(outputs)
    for st in s.state.stages:
        if st.is_placeholder:
            continue
        loops = s.loops(st.name)
        spatial = [lp for lp, info in zip(loops, st.loops) if not info.reduce]
        fused = s.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        bo, ti = s.split(fused, factor=64)
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
        lambda i: tc.cast(A[i], "int64") // B[i] + B[i] % tc.cast(A[i], "int64") + B[i] * 3_000_000_000
        + tc.maximum(B[i], 7) - tc.minimum(tc.cast(A[i], "int64"), -2)
        + tc.select(~(A[i] > 3) & (B[i] != 0), tc.cast(tc.cast(B[i], "bool"), "int64"), tc.cast(tc.cast(A[i], "float32") * 0.5, "int64")),
        name="Y",
    )  # fmt: skip

    def reference(a, b):
        a64 = a.astype("int64")
        with np.errstate(all="ignore"):
            pick = np.where(~(a > 3) & (b != 0), b.astype(bool).astype("int64"), (a.astype("float32") * 0.5).astype("int64"))
            return a64 // b + b % a64 + b * 3_000_000_000 + np.maximum(b, 7) - np.minimum(a64, -2) + pick

    rng = np.random.default_rng(1)
    a = rng.integers(-9, 10, n).astype("int32")
    a[a == 0] = 5
    b = rng.integers(-2**40, 2**40, n).astype("int64")
    b[:9] = [1, -1, 5, -5, 7, -7, 2**40, -(2**40), 3]
    return trivial_binding(Y), reference, [a, b]


def intrinsics(dtype):
    """Every intrinsic, min/max with nan, division and inf/nan constants in `dtype`."""
    X = tc.placeholder((70,), dtype, name="X")
    fns = (tc.exp, tc.log, tc.sqrt, tc.tanh, tc.erf, tc.abs, tc.floor, tc.ceil, tc.sigmoid)
    one = lambda f, i: tc.select(X[i] > 0, f(X[i]), f(tc.abs(X[i]) + 0.25)) if f in (tc.log, tc.sqrt) else f(X[i])  # noqa: E731
    Y = tc.compute((70,), lambda i: sum((one(f, i) for f in fns), const(0.0, dtype)) / 3.0 + tc.maximum(X[i], -float("inf")), name="Y")
    Z = tc.compute((70,), lambda i: tc.minimum(tc.select(X[i] > 1.5, const(float("nan"), dtype), X[i]), 0.1), name="Z")

    def reference(x):
        safe = lambda v: np.where(x > 0, v(np.where(x > 0, x, 1)), v(np.abs(x) + 0.25))  # noqa: E731
        e = np.array([math.erf(v) for v in x], dtype)
        total = np.exp(x) + safe(np.log) + safe(np.sqrt) + np.tanh(x) + e + np.abs(x) + np.floor(x) + np.ceil(x) + 1 / (1 + np.exp(-x))
        return (total / 3 + x).astype(dtype), np.minimum(np.where(x > 1.5, np.nan, x), 0.1).astype(dtype)

    x = np.random.default_rng(2).standard_normal(70).astype(dtype)
    return trivial_binding([Y, Z]), reference, [x]


CUSTOM = {"negative_mod": negative_mod, "integers": integers, "intrinsics_f32": lambda: intrinsics("float32"), "intrinsics_f64": lambda: intrinsics("float64")}


TEMPLATES = ("batch_matmul", "conv2d", "dense", "depthwise_conv2d", "matmul")  # shared-memory tiles


def example(name: str):
    """(schedule, reference(*arrays), input arrays) for an example name: `op_<op>` is the op with
    a trivial binding, `tpl_<op>` the op with its default GPU schedule (minitc/schedules/gpu)."""
    if name.startswith(("op_", "tpl_")):
        kind, op = name.split("_", 1)
        inst = tc.ops.OPS[op].instantiate("small", np.random.default_rng(0))
        s = trivial_binding(inst.output) if kind == "op" else default_schedule(inst.output, "cuda")
        return s, lambda *a: inst.expected(), list(inst.arrays)
    if name in CUSTOM:
        return CUSTOM[name]()
    s, reference, shapes = gpu_schedules.ALL[name]()
    rng = np.random.default_rng(0)
    return s, reference, [rng.standard_normal(shape).astype("float32") for shape in shapes]


EXAMPLES = sorted(gpu_schedules.ALL) + sorted(CUSTOM) + [f"op_{n}" for n in sorted(tc.ops.OPS)] + [f"tpl_{n}" for n in TEMPLATES]


@pytest.fixture(scope="module")
def programs():
    """name -> (GpuProgram, reference, inputs), kernels named after the example."""
    out = {}
    for name in EXAMPLES:
        s, reference, inputs = example(name)
        out[name] = (lower_gpu(s, "cuda", name=name), reference, inputs)
    return out


# -- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_structure(programs, name):
    program = programs[name][0]
    src = render_program(program)
    assert src.count('extern "C" __global__') == len(program.launches)
    for launch in program.launches:
        text = render_launch(launch)
        assert f"__launch_bounds__({launch.threads_per_block}) {launch.name}(" in text
        head = text.split("{", 1)[0]
        written = {st.buffer for st in ir.walk_stmts(launch.body) if isinstance(st, ir.Store)}
        for b in launch.params:
            ctype = C_TYPES[b.dtype]
            name = sanitize(b.name)
            expected = f"{ctype}* __restrict__ {name}" if b in written else f"const {ctype}* __restrict__ {name}"
            assert re.search(rf"(?<!const ){re.escape(expected)}\b", head), (expected, head)
        shared = {st.buffer for st in ir.walk_stmts(launch.body) if isinstance(st, ir.Allocate) and st.buffer.scope == "shared"}
        assert text.count("__shared__") == len(shared)
        for b in shared:  # declared once, before any loop
            assert text.index(f"__shared__ float {b.name}[{b.size}];") < text.find("for (") or "for (" not in text
        barriers = sum(isinstance(st, ir.Barrier) for st in ir.walk_stmts(launch.body))
        assert text.count("__syncthreads();") == barriers
        assert f"grid {tuple(launch.grid)} x block {tuple(launch.block)}" in text


def test_matmul_source_details(programs):
    src = render_program(programs["matmul_shared"][0])
    assert "const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C)" in src
    assert "float C_local[16];" in src and "#pragma unroll" in src
    assert src.count("__syncthreads();") == 3  # the lowering's barrier pairs, merged where adjacent
    assert "long long" not in src.split("#endif", 1)[1]  # every index provably fits 32 bits


def test_padding_uses_select_and_floor_semantics(programs):
    conv = render_program(programs["op_conv2d"][0])
    assert " ? " in conv  # the padding stage: only the chosen branch reads X
    neg = render_program(programs["negative_mod"][0])
    assert "mtc_mod(" in neg and "mtc_floordiv(" in neg
    assert "mtc_mod(" not in render_program(programs["softmax_rows"][0]).split("#endif")[1]  # indices >= 0: C's %


def test_deterministic():
    for name in ("matmul_shared", "softmax_rows", "op_layer_norm"):
        a = render_program(lower_gpu(example(name)[0], "cuda"))
        b = render_program(lower_gpu(example(name)[0], "cuda"))
        assert a == b


def test_codegen_entry_point_needs_no_gpu():
    s = example("elementwise")[0]
    src = tc.codegen(s, "cuda")
    assert src == render_program(lower_gpu(s, "cuda")) and 'extern "C"' in src
    assert tc.codegen(s, "cuda -arch=sm_80") == src


def test_int64_offsets_when_32_bits_do_not_fit():
    X = tc.placeholder((65536, 65536), name="X")  # 2**32 elements: never allocated here
    Y = tc.compute((65536, 65536), lambda i, j: X[i, j] * 2.0, name="Y")
    src = render_program(lower_gpu(trivial_binding(Y), "cuda"))
    body = src.split("#endif", 1)[1]
    assert "long long" in body and "(long long)" in body


def test_float_literals_round_trip():
    for v in (0.1, 1.0, -2.5, 1e-45, 3.4028234663852886e38, 1.17549435e-38, 123456789.0, 0.0, -0.0):
        text = float_literal(v, "float32").text
        assert text.endswith("f") and np.float32(text[:-1]) == np.float32(v), text
        text64 = float_literal(v, "float64").text
        assert float(text64) == v
    assert float_literal(float("inf"), "float32").text == "__int_as_float(0x7f800000)"
    assert float_literal(float("-inf"), "float32").text == "-__int_as_float(0x7f800000)"
    assert "0x7fc00000" in float_literal(float("nan"), "float32").text
    assert "0x7ff8" in float_literal(float("nan"), "float64").text


def test_names_are_sanitized_and_unique():
    a, b = ir.Buffer("in.put", (4,), "float32"), ir.Buffer("in.put", (4,), "float32")
    v, w = Var("for"), Var("for")
    body = ir.seq(
        ir.For(v, 4, "threadIdx.x", ir.Store(b, (v,), ir.Load(a, (v,)))),
        ir.For(w, 4, "threadIdx.x", ir.Store(b, (w,), ir.Load(b, (w,)) + 1.0)),
    )
    text = render_launch(Launch("my-kernel", [a, b], body, (1, 1, 1), (4, 1, 1)))
    assert "my_kernel(const float* __restrict__ in_put, float* __restrict__ in_put_1)" in text
    assert "const int for_ = (int)threadIdx.x;" in text and "const int for__1 = (int)threadIdx.x;" in text


def test_guard_only_when_loop_is_shorter_than_the_block():
    a = ir.Buffer("A", (48,), "float32")
    t1, t2 = Var("t1"), Var("t2")
    body = ir.seq(ir.For(t1, 32, "threadIdx.x", ir.Store(a, (t1,), const(1.0))), ir.For(t2, 48, "threadIdx.x", ir.Store(a, (t2,), const(2.0))))
    text = render_launch(Launch("k", [a], body, (1, 1, 1), (48, 1, 1)))
    assert "if ((int)threadIdx.x < 32) {" in text and "< 48" not in text


def test_loop_kinds():
    a = ir.Buffer("A", (4, 100), "float32")
    t, v, u, w, one = Var("t"), Var("v"), Var("u"), Var("w"), Var("one")
    store = ir.Store(a, (v, u + w + one), const(1.0))
    body = ir.For(t, 4, "threadIdx.x", ir.For(v, 4, "vthread", ir.For(u, 90, "unrolled", ir.For(w, 8, "vectorized", ir.For(one, 1, "serial", store)))))
    text = render_launch(Launch("k", [a], ir.For(t, 4, "threadIdx.x", ir.seq()), (1, 1, 1), (4, 1, 1)))
    assert "threadIdx" not in text  # an unused index is not declared
    text = render_launch(Launch("k", [a], body, (1, 1, 1), (4, 1, 1)))
    assert "#pragma unroll\n    for (int v = 0; v < 4; ++v) {" in text  # vthread
    assert "#pragma unroll 8\n        for (int u = 0; u < 90; ++u) {" in text  # too long to unroll fully
    assert "for (int w = 0; w < 8; ++w) {" in text and "const int one = 0;" in text


def test_unsupported_constructs_raise_build_error():
    a = ir.Buffer("A", (8,), "float32")
    i = Var("i")
    with pytest.raises(BuildError, match="parallel"):
        render_launch(Launch("k", [a], ir.For(i, 8, "parallel", ir.Store(a, (i,), const(0.0))), (1, 1, 1), (1, 1, 1)))
    g = ir.Buffer("G", (8,), "float32")
    body = ir.For(i, 8, "threadIdx.x", ir.Allocate(g, ir.Store(a, (i,), const(0.0))))
    with pytest.raises(BuildError, match="global"):
        render_launch(Launch("k", [a], body, (1, 1, 1), (8, 1, 1)))
    with pytest.raises(BuildError, match="neither a parameter"):
        render_launch(Launch("k", [], ir.For(i, 8, "threadIdx.x", ir.Store(a, (i,), const(0.0))), (1, 1, 1), (8, 1, 1)))


def _cupy_importable() -> bool:
    try:
        import cupy  # noqa: F401

        return True
    except ImportError:
        return False


@pytest.mark.skipif(_cupy_importable(), reason="CuPy is installed: the missing-CuPy message cannot be seen")
def test_build_without_cupy_names_it():
    with pytest.raises(BuildError, match="CuPy.*cupy-cuda13x"):
        tc.build(example("elementwise")[0], target="cuda")


# -- nvcc ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvcc_results(programs, tmp_path_factory):
    """One translation unit with every example, compiled for sm_75 (PTX) and sm_90 (cubin, so
    ptxas checks the PTX too) by two concurrent nvcc runs."""
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin")
    d = tmp_path_factory.mktemp("nvcc")
    (d / "all.cu").write_text("\n".join(render_program(p) for p, _, _ in programs.values()))
    common = ["-std=c++17", "-Werror", "all-warnings", "all.cu"]
    runs = {
        "sm_75": subprocess.Popen([nvcc, "-ptx", "-arch=sm_75", "-o", "all.ptx", *common], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
        "sm_90": subprocess.Popen([nvcc, "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", "all.cubin", *common], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
    }  # fmt: skip
    results = {arch: (p.wait(timeout=300), p.stdout.read()) for arch, p in runs.items()}
    results["ptx"] = (d / "all.ptx").read_text() if (d / "all.ptx").exists() else ""
    return results


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_nvcc_compiles_everything_without_warnings(nvcc_results, arch):
    rc, log = nvcc_results[arch]
    assert rc == 0, log[-4000:]
    assert "warning" not in log.lower()


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_launch_is_an_entry(nvcc_results, programs, name):
    for launch in programs[name][0].launches:
        assert f".entry {launch.name}(" in nvcc_results["ptx"]
        assert f"Compiling entry function '{launch.name}' for 'sm_90'" in nvcc_results["sm_90"][1]


def test_matmul_registers_do_not_spill(nvcc_results):
    log = nvcc_results["sm_90"][1]
    part = log[log.index("Compiling entry function 'matmul_shared'") :]
    assert "0 bytes spill stores" in part.split("Compiling entry function")[1]
    regs = int(re.search(r"Used (\d+) registers", part).group(1))
    assert regs <= 128


@pytest.mark.parametrize("arch", ["compute_75", "compute_90"])
def test_nvrtc_compiles_everything_without_warnings(programs, arch):
    """The runtime compiles with NVRTC, not nvcc: no headers, CuPy's options (-ftz=true, -arch)."""
    lib = find_nvrtc()
    if lib is None:
        pytest.skip("libnvrtc not found (CUDA toolkit lib64 or the nvidia-cuda-nvrtc wheel)")
    from backends.cuda.runtime import OPTIONS

    source = "\n".join(render_program(p) for p, _, _ in programs.values())
    status, log = nvrtc_compile(lib, source, [*OPTIONS, f"-arch={arch}", "-ftz=true"])
    assert status == 0 and "warning" not in log, log[-4000:]
    status, log = nvrtc_compile(lib, 'extern "C" __global__ void k(float* x) { x[0] = y; }', list(OPTIONS))
    assert status != 0 and re.search(r"\((\d+)\): error", log)  # the format runtime._compile_error parses


# -- the generated C++ on the host -------------------------------------------------------------

@pytest.fixture(scope="module")
def host_library(programs, tmp_path_factory):
    source = "\n".join(render_program(p) for p, _, _ in programs.values())
    return build_host_library(source, tmp_path_factory.mktemp("host"))


def check_outputs(outputs, expected):
    for got, want in zip(outputs, expected if isinstance(expected, tuple) else (expected,)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", EXAMPLES)
def test_generated_code_runs_on_the_host(host_library, programs, name):
    program, reference, inputs = programs[name]
    k = program.kernel
    outputs = [np.zeros(b.shape, b.dtype) for b in k.outputs]
    temps = [np.full(b.shape, np.nan, b.dtype) for b in program.temporaries]
    arrays = dict(zip(map(id, program.buffers), inputs + outputs + temps))
    for launch in program.launches:
        barrier = any(isinstance(st, ir.Barrier) for st in ir.walk_stmts(launch.body))
        pointers = [arrays[id(b)].ctypes.data for b in launch.params]
        run_on_host(host_library, launch.name, pointers, launch.grid, launch.block, barrier)
    check_outputs(outputs, reference(*inputs))


# -- the runtime, with a fake CuPy that runs kernels on the host ---------------------------------


class FakeArray(np.ndarray):
    """A "CuPy array": host memory, with the few attributes the runtime reads."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    def get(self, out=None):
        if out is None:
            return np.array(self)
        out[...] = self
        return out


FakeArray.__module__ = "cupy"


def make_fake_cupy(directory):
    class Event:
        def record(self, stream=None):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    class RawModule:
        def __init__(self, code, options=(), backend="nvrtc"):
            self.code, self.options, self.library = code, options, None

        def get_function(self, name):
            if self.library is None:
                d = directory / f"m{len(list(directory.iterdir()))}"
                d.mkdir()
                self.library = build_host_library(self.code, d, "-O0")
            threads = "__syncthreads" in self.code
            return lambda grid, block, args: run_on_host(self.library, name, [a.data.ptr for a in args], grid, block, threads)

    attributes = {"MaxThreadsPerBlock": 1024, "MaxBlockDimX": 1024, "MaxBlockDimY": 1024, "MaxBlockDimZ": 64,
                  "MaxGridDimX": 2**31 - 1, "MaxGridDimY": 65535, "MaxGridDimZ": 65535,
                  "MaxSharedMemoryPerBlock": 49152, "MultiProcessorCount": 132}  # fmt: skip
    cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"Fake H100"}),
        Device=lambda: types.SimpleNamespace(id=0, attributes=attributes, compute_capability="90"),
        get_current_stream=contextlib.nullcontext,
        Event=Event,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1000,
    )

    def empty(shape, dtype):
        return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -999999, dtype).view(FakeArray)

    return types.SimpleNamespace(
        __name__="cupy", cuda=cuda, RawModule=RawModule, ndarray=FakeArray, empty=empty,
        asarray=lambda x: np.array(x).view(FakeArray),
    )  # fmt: skip


@pytest.fixture
def fake_cupy(monkeypatch, tmp_path):
    import backends.cuda.device as device
    import backends.cuda.runtime as runtime

    fake = make_fake_cupy(tmp_path)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(device, "_CACHE", {})
    monkeypatch.setattr(runtime, "_MODULES", {})
    return fake


def test_fake_device_limits(fake_cupy):
    from backends.cuda.device import current_device

    dev = current_device()
    assert (dev.name, dev.arch, dev.sm_count) == ("Fake H100", "sm_90", 132)
    assert dev.limits.max_block == (1024, 1024, 64) and dev.limits.max_shared_bytes == 49152
    assert current_device() is dev  # cached


def test_no_gpu_is_a_build_error(fake_cupy, monkeypatch):
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceCount", no_device)
    with pytest.raises(BuildError, match="no CUDA GPU is visible.*cudaErrorNoDevice.*cuda-sim"):
        tc.build(example("elementwise")[0], target="cuda")


@pytest.mark.parametrize("name", ["softmax_rows", "matmul_shared"])
def test_runtime_end_to_end_on_fake_cupy(fake_cupy, name):
    from backends.cuda.runtime import GpuFunction

    s, reference, inputs = example(name)
    expected = reference(*inputs)
    f = tc.build(s, target="cuda")
    assert isinstance(f, GpuFunction) and f.source == tc.codegen(s, "cuda") and f.name == f.kernel.name
    y = f(*inputs)  # numpy in, numpy out
    assert type(y) is np.ndarray
    check_outputs([y], expected)
    dev = [fake_cupy.asarray(x) for x in inputs]
    y = f(*dev)  # "cupy" in, "cupy" out
    assert isinstance(y, FakeArray)
    check_outputs([y], expected)
    out = fake_cupy.empty(y.shape, y.dtype)
    assert f(*dev, out=out) is out and f(*dev, out) is out
    check_outputs([out], expected)
    host = np.empty(y.shape, y.dtype)
    assert f(*inputs, out=host) is host
    check_outputs([host], expected)
    times = f.time_ms(*dev, number=2, repeat=3)
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert tc.build(s, target="cuda").source == f.source  # the module cache is hit


def test_runtime_argument_errors(fake_cupy):
    from minitc.errors import DTypeError, LayoutError

    s, _, inputs = example("softmax_rows")
    f = tc.build(s, target="cuda")
    x = fake_cupy.asarray(inputs[0])
    with pytest.raises(ShapeError, match="takes 1 input"):
        f()
    with pytest.raises(ShapeError, match="shape"):
        f(fake_cupy.asarray(inputs[0][:4]))
    with pytest.raises(DTypeError, match="float64"):
        f(inputs[0].astype("float64"))
    with pytest.raises(LayoutError, match="C-contiguous"):
        f(np.asfortranarray(inputs[0]))
    with pytest.raises(LayoutError, match="overlaps"):
        f(x, out=x)
    with pytest.raises(LayoutError, match="must be a CuPy array"):
        f([[0.0]])
    with pytest.raises(ShapeError, match="output"):
        f(x, out=[x, x])


def test_compile_errors_quote_the_failing_line():
    from backends.cuda.runtime import _compile_error

    source = "line one\nline two\n    y[i] = x[j];\n"
    err = _compile_error(Exception('kern.cu(3): error: identifier "j" is undefined'), source, None)
    assert isinstance(err, BuildError)
    assert 'identifier "j" is undefined' in str(err) and "line 3: y[i] = x[j];" in str(err)


# -- on a GPU --------------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_runs_on_the_gpu(name):
    import cupy

    s, reference, inputs = example(name)
    f = tc.build(s, target="cuda")
    expected = reference(*inputs)
    check_outputs(as_list(f(*inputs)), expected)  # numpy in, numpy out
    dev = [cupy.asarray(x) for x in inputs]
    ys = as_list(f(*dev))
    assert all(isinstance(y, cupy.ndarray) for y in ys)
    check_outputs([y.get() for y in ys], expected)
    outs = [cupy.zeros_like(y) for y in ys]
    assert all(a is b for a, b in zip(as_list(f(*dev, out=outs)), outs))
    check_outputs([o.get() for o in outs], expected)
    times = f.time_ms(*dev, number=2, repeat=2)
    assert len(times) == 2 and all(t > 0 for t in times)


def as_list(result) -> list:
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.cuda
@needs_gpu
def test_gpu_function_checks_arguments_and_takes_torch():
    import cupy

    s, reference, inputs = example("softmax_rows")
    f = tc.build(s, target="cuda")
    assert 'extern "C"' in f.source and f.name == f.kernel.name and len(f.program.launches) == 4
    with pytest.raises(ShapeError):
        f(cupy.zeros((3, 3), "float32"))
    with pytest.raises(ShapeError, match="input"):
        f()
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    x = torch.from_numpy(inputs[0]).cuda()
    y = f(x)
    assert isinstance(y, torch.Tensor) and y.is_cuda
    np.testing.assert_allclose(y.cpu().numpy(), reference(*inputs), rtol=2e-5, atol=2e-5)

