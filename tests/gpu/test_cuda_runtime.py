"""Running the CUDA C that backends/cuda/codegen.py renders for every example of gpu_schedules.py
(the text itself and nvcc/NVRTC are test_cuda_codegen.py; the tuner's GPU measuring,
test_gpu_runner.py):

- the generated code runs on the host: g++ builds it with a few macros (GPU threads become
  std::threads, __syncthreads a std::barrier) and the results match numpy;
- the runtime (backends/cuda/runtime.py, device.py) end to end against a fake CuPy whose
  "kernels" are that host build (fake_cupy.py): argument conventions, errors, temporaries,
  timing; without CuPy, tc.build(target="cuda") says how to install it;
- marked `cuda` (skipped without CuPy and a GPU): tc.build(target="cuda") matches numpy.
"""

import numpy as np
import pytest
from cuda_tools import build_host_library, cupy_usable, run_on_host
from fake_cupy import FakeArray
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


# -- the runtime, with a fake CuPy that runs kernels on the host (fake_cupy.py) ------------------


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
