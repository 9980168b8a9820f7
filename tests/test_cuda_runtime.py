"""Running the CUDA C that backends/cuda/codegen.py renders for every example of gpu_schedules.py
(the text itself and nvcc/NVRTC are test_cuda_codegen.py):

- the generated code runs on the host: g++ builds it with a few macros (GPU threads become
  std::threads, __syncthreads a std::barrier) and the results match numpy;
- the runtime (backends/cuda/runtime.py, device.py) end to end against a fake CuPy whose
  "kernels" are that host build: argument conventions, errors, temporaries, timing; without
  CuPy, tc.build(target="cuda") says how to install it;
- marked `cuda` (skipped without CuPy and a GPU): tc.build(target="cuda") matches numpy.
"""

import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from cuda_tools import build_host_library, cupy_usable, run_on_host
from gpu_schedules import EXAMPLES, example, lower_examples

import minitc as tc
from minitc import ir
from minitc.backends.cuda.codegen import render_program
from minitc.errors import BuildError, ShapeError


@pytest.fixture(scope="module")
def programs():
    """name -> (GpuProgram, reference, inputs), kernels named after the example."""
    return lower_examples()


# -- without CuPy --------------------------------------------------------------------------------


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


FAKE_CUBIN = b"\x7fELF fake cubin\n"


def make_fake_nvrtc(log: str = ""):
    """CuPy's NVRTC binding, faked: a "cubin" is FAKE_CUBIN and the source; with a `log`, every
    compile fails with it."""
    sources: dict = {}

    class NVRTCError(Exception):
        pass

    def compile_program(program, options):
        assert "-arch=sm_90" in options and "-ftz=true" in options  # as CuPy compiles
        if log:
            raise NVRTCError("NVRTC_ERROR_COMPILATION (6)")

    return types.SimpleNamespace(
        NVRTCError=NVRTCError,
        getVersion=lambda: (13, 0),
        getSupportedArchs=lambda: [80, 90],
        createProgram=lambda src, name, headers, names: sources.setdefault(len(sources) + 1, src) and len(sources),
        compileProgram=compile_program,
        getCUBIN=lambda program: FAKE_CUBIN + sources[program].encode(),
        getProgramLog=lambda program: log,
        destroyProgram=lambda program: None,
    )


def install_fake_nvrtc(monkeypatch, nvrtc) -> None:
    libs = types.SimpleNamespace(nvrtc=nvrtc)
    cuda = types.SimpleNamespace(libs=libs)
    for name, module in [("", types.SimpleNamespace(cuda=cuda)), (".cuda", cuda), (".cuda.libs", libs)]:
        monkeypatch.setitem(sys.modules, "cupy_backends" + name, module)
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", nvrtc)


def make_fake_cupy(directory):
    modules = []  # how each RawModule was made: "source" (compiled here) or "cubin" (loaded)

    class Event:
        def record(self, stream=None):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    class RawModule:
        def __init__(self, code=None, options=(), backend="nvrtc", path=None):
            if path is not None:  # a "cubin" of the fake NVRTC: the source behind a header
                data = Path(path).read_bytes()
                assert data.startswith(FAKE_CUBIN)
                code = data[len(FAKE_CUBIN) :].decode()
            modules.append("cubin" if path is not None else "source")
            self.code, self.options, self.library = code, options, None

        def get_function(self, name):
            if self.library is None:
                d = directory / f"m{len(list(directory.iterdir()))}"
                d.mkdir()
                self.library = build_host_library(self.code, d, "-O0")
            threads = "__syncthreads" in self.code
            return lambda grid, block, args: run_on_host(
                self.library, name, [a.data.ptr for a in args], grid, block, threads
            )

    attributes = {
        "MaxThreadsPerBlock": 1024,
        "MaxBlockDimX": 1024,
        "MaxBlockDimY": 1024,
        "MaxBlockDimZ": 64,
        "MaxGridDimX": 2**31 - 1,
        "MaxGridDimY": 65535,
        "MaxGridDimZ": 65535,
        "MaxSharedMemoryPerBlock": 49152,
        "MultiProcessorCount": 132,
    }
    cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"Fake H100"}),
        Device=lambda: types.SimpleNamespace(id=0, attributes=attributes, compute_capability="90"),
        get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None),
        Event=Event,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1000,
    )

    def empty(shape, dtype):
        return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else -999999, dtype).view(FakeArray)

    return types.SimpleNamespace(
        __name__="cupy",
        modules=modules,
        cuda=cuda,
        RawModule=RawModule,
        ndarray=FakeArray,
        empty=empty,
        asarray=lambda x: np.array(x).view(FakeArray),
        isclose=np.isclose,
        RawKernel=lambda code, name: types.SimpleNamespace(compile=lambda: None),
    )


@pytest.fixture
def fake_cupy(monkeypatch, tmp_path):
    import minitc.backends.cuda.device as device
    import minitc.backends.cuda.runtime as runtime

    fake = make_fake_cupy(tmp_path)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(device, "_CACHE", {})
    monkeypatch.setattr(runtime, "_MODULES", {})
    return fake


def test_fake_device_limits(fake_cupy):
    from minitc.backends.cuda.device import current_device

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
    from minitc.backends.cuda.runtime import GpuFunction

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


def test_the_gpu_runner_checks_candidates_where_they_ran(fake_cupy):
    """The measuring process compares a candidate's outputs with the expected ones on the GPU
    (cupy.isclose: no copy back), then times it; a wrong program is an error, not a timing."""
    from minitc.autotune import gpu_runner

    task, trace = _matmul_candidate()
    target = task.target
    compared = []
    fake_cupy.isclose = lambda *a, **k: compared.append(type(a[0])) or np.isclose(*a, **k)
    assert gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, target)
    status, (latencies, kernel_s) = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0)
    assert status == "ok" and len(latencies) == 3 and all(ms > 0 for ms in latencies) and kernel_s > 0
    assert compared == [FakeArray]  # device arrays, compared by the device's module
    off = [e.copy() for e in task.expected]
    off[0][3, 5] += 1.0
    gpu_runner.gpu_runner_setup(task.inputs, off, task.rtol, target)
    assert gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0) == (
        "error",
        "wrong: 1 of 128 elements differ from the numpy reference",
    )


def _matmul_candidate():
    from minitc.autotune.runner import Task
    from minitc.autotune.space import Space
    from minitc.backends.cuda.device import device_target

    out = tc.ops.matmul(tc.placeholder((16, 24), name="A"), tc.placeholder((24, 8), name="B"))
    target = device_target("cuda").string
    space = Space(out, target)
    return Task.from_outputs(out, target), space.replay(space.default_values()).trace


def test_builders_compile_cubins_the_runner_only_loads(fake_cupy, monkeypatch):
    """With NVRTC installed, a builder process compiles the candidate (in parallel with the
    others, while the GPU measures); the measuring process loads the cubin and never compiles."""
    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate

    install_fake_nvrtc(monkeypatch, make_fake_nvrtc())
    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.error is None and built.object_code.startswith(FAKE_CUBIN)
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    status, _ = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code)
    assert status == "ok" and fake_cupy.modules == ["cubin"]
    rejected = make_fake_nvrtc(log='minitc.cu(3): error: expected a ";"')
    install_fake_nvrtc(monkeypatch, rejected)  # a program NVRTC rejects: the candidate's build error
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.object_code is None and built.error.startswith("build: BuildError: NVRTC failed to compile")
    assert 'error: expected a ";"' in built.error and "at:\n  line 3:" in built.error


def test_a_builders_processes_share_their_cubins(monkeypatch, tmp_path):
    """The final re-measurement builds the best programs again, maybe on other processes of the
    builder: they read what one of them compiled from the builder's folder (removed on close)."""
    from minitc.autotune.runner import LocalBuilder
    from minitc.backends.cuda.nvrtc import CACHE_ENV, compile_cubin

    nvrtc, compiled = make_fake_nvrtc(), []
    compile_program = nvrtc.compileProgram
    nvrtc.compileProgram = lambda program, options: compiled.append(program) or compile_program(program, options)
    install_fake_nvrtc(monkeypatch, nvrtc)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cubins"))
    first, again, other = (compile_cubin(src, "sm_90") for src in ("void a() {}", "void a() {}", "void b() {}"))
    assert first == again != other and len(compiled) == 2 and len(list(tmp_path.glob("cubins/*.cubin"))) == 2
    builder = LocalBuilder(workers=2)
    folder = Path(builder._cache)
    assert all(w.env == {CACHE_ENV: str(folder)} for w in builder._workers)
    assert not folder.exists()  # made by the first cubin: a CPU builder leaves nothing behind
    folder.mkdir()
    builder.close()
    assert not folder.exists()


RENDER_KEYS = """
import numpy as np
import minitc as tc
from minitc.autotune.space import Space
from minitc.backends.cuda.codegen import render_program
from minitc.backends.cuda.runtime import module_key
from minitc.driver import lower_gpu
X, W, G = tc.placeholder((24, 40), name="X"), tc.placeholder((32, 40), name="W"), tc.placeholder((40,), name="G")
for out in (tc.ops.dense(X, W, activation="gelu"), tc.ops.softmax(X), tc.ops.layer_norm(X, G, G)):
    space = Space(out, "cuda -arch=sm_90")
    rng = np.random.default_rng(0)
    for c in [space.replay(space.default_values())] + [space.sample(rng) for _ in range(2)]:
        print(module_key(render_program(lower_gpu(c.schedule, "cuda -arch=sm_90"))))
"""


def test_the_runner_renders_the_source_the_builder_compiled():
    """The runner finds a builder's cubin by the hash of the CUDA C both render in their own
    processes: the rendering must not depend on a process's string hashing (set order)."""
    import os
    import subprocess

    runs = [
        subprocess.run(
            [sys.executable, "-c", RENDER_KEYS],
            env=dict(os.environ, PYTHONHASHSEED=str(seed)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2)
    ]
    assert runs[0] == runs[1] and len(runs[0].split()) == 9


def test_without_nvrtc_the_runner_compiles_the_source(fake_cupy, monkeypatch):
    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate

    monkeypatch.setitem(sys.modules, "cupy_backends", None)  # import fails
    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.error is None and built.object_code is None and built.symbol == "gpu"
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    status, _ = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code)
    assert status == "ok" and fake_cupy.modules == ["source"]


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


def testcompile_errors_quote_the_failing_line():
    from minitc.backends.cuda.runtime import compile_error

    source = "line one\nline two\n    y[i] = x[j];\n"
    err = compile_error(Exception('kern.cu(3): error: identifier "j" is undefined'), source, None)
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


@pytest.mark.cuda
@needs_gpu
def test_a_builders_cubin_runs_on_the_gpu():
    """On a real GPU: the cubin a builder compiled is what the measuring process loads and
    times, checked against numpy on the device."""
    import json

    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate
    from minitc.backends.cuda import runtime

    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    if built.object_code is None:
        pytest.skip("CuPy's NVRTC binding is not importable here")
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    before = set(runtime._MODULES)
    status, (latencies, _) = gpu_runner.gpu_runner_run(
        task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code
    )
    assert status == "ok" and all(ms > 0 for ms in latencies)
    key = json.loads(built.symbol)[0]
    assert set(runtime._MODULES) - before == {key} and runtime._MODULES[key].file_path  # loaded, not compiled
