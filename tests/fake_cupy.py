"""A fake CuPy whose "kernels" are the generated CUDA C built for the host (cuda_tools.py), and a
fake of CuPy's NVRTC binding, for the runtime and GPU-measuring tests without a GPU. The
`fake_cupy` fixture (conftest.py) puts the fake in sys.modules."""

import sys
import time
import types
from pathlib import Path

import numpy as np
from cuda_tools import build_host_library, run_on_host


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


def install_fake_cupy(monkeypatch, directory):
    import minitc.backends.cuda.device as device
    import minitc.backends.cuda.runtime as runtime

    fake = make_fake_cupy(directory)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(device, "_CACHE", {})
    monkeypatch.setattr(runtime, "_MODULES", {})
    return fake
