"""Tools the CUDA tests share: finding nvcc and libnvrtc, compiling with NVRTC as CuPy does, and
the host harness that builds generated CUDA C with g++ and runs it on the CPU (GPU threads become
std::threads, __syncthreads a std::barrier)."""

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest


def cupy_usable() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def find_nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))
    return candidates[-1] if candidates else None


def ptxas_log(source: str, tmp_path) -> str:
    """ptxas -v's report for CUDA C `source` on sm_90 (nvcc --ptx, then ptxas): registers,
    spills and stack frames per kernel. Skips the test where ptxas is not next to nvcc."""
    nvcc = find_nvcc()
    cu, ptx = tmp_path / "k.cu", tmp_path / "k.ptx"
    cu.write_text(source)
    subprocess.run([nvcc, "-arch=sm_90", "--ptx", str(cu), "-o", str(ptx)], check=True, capture_output=True)
    ptxas = os.path.join(os.path.dirname(nvcc), "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("ptxas not next to nvcc")
    log = subprocess.run([ptxas, "-arch=sm_90", "-v", str(ptx), "-o", os.devnull], capture_output=True, text=True)
    assert log.returncode == 0, log.stderr
    return log.stderr


def find_nvrtc():
    """libnvrtc from a CUDA toolkit or from the nvidia-cuda-nvrtc wheel, if there is one."""
    patterns = [os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*") for p in sys.path if p]
    patterns += ["/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/local/cuda*/targets/*/lib/libnvrtc.so*"]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern), reverse=True):
            if "builtins" not in path and "alt" not in os.path.basename(path):
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    continue
    return None


def nvrtc_compile(lib, source: str, options: list) -> tuple:
    """(status, log) of compiling `source` with NVRTC, as CuPy's RawModule does."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kern.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    status = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return status, log.value.decode(errors="replace")


HOST_PRELUDE = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <barrier>
#include <thread>
#include <utility>
#include <vector>
struct mtc_dim3 { unsigned x, y, z; };
static thread_local mtc_dim3 threadIdx, blockIdx;
static std::barrier<>* mtc_bar;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __syncthreads() mtc_bar->arrive_and_wait()
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
// CUDA's vector types (backends/cuda/vector.py), with their alignment; may_alias as in CUDA
#define __align__(n) __attribute__((aligned(n)))
struct __attribute__((may_alias, aligned(8))) float2 { float x, y; };
struct __attribute__((may_alias, aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((may_alias, aligned(16))) double2 { double x, y; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return {x, y}; }
// every block in turn; its threads one after another, or as std::threads when there are barriers
template <class F> static void mtc_run(const unsigned* g, const unsigned* b, int threads, F kernel) {
    unsigned n = b[0] * b[1] * b[2];
    for (unsigned bz = 0; bz < g[2]; ++bz) for (unsigned by = 0; by < g[1]; ++by) for (unsigned bx = 0; bx < g[0]; ++bx) {
        std::barrier<> bar(n);
        mtc_bar = &bar;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < n; ++t) {
            auto body = [&, t] {
                blockIdx = {bx, by, bz};
                threadIdx = {t % b[0], t / b[0] % b[1], t / (b[0] * b[1])};
                kernel();
            };
            if (threads) pool.emplace_back(body); else body();
        }
        for (auto& th : pool) th.join();
    }
}
template <class... P, size_t... I> static void mtc_call(void (*k)(P...), void** a, std::index_sequence<I...>) { k(((P)a[I])...); }
"""


def host_source(cuda_source: str) -> str:
    """The CUDA C plus, per kernel, `run_<name>(void** args, grid, block, threads)`."""
    wrappers = [
        f'extern "C" void run_{k}(void** a, const unsigned* g, const unsigned* b, int threads) '
        f"{{ mtc_run(g, b, threads, [&] {{ mtc_call({k}, a, std::make_index_sequence<{n}>{{}}); }}); }}"
        for k, params in re.findall(r"__launch_bounds__\(\d+\) (\w+)\(([^)]*)\)", cuda_source)
        for n in [len(params.split(","))]
    ]
    return HOST_PRELUDE + cuda_source + "\n" + "\n".join(wrappers) + "\n"


def build_host_library(cuda_source: str, directory, opt: str = "-O1", flags: tuple = ()):
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to run the generated code on the host")
    (directory / "all.cpp").write_text(host_source(cuda_source))
    cmd = [cxx, "-std=c++20", opt, *flags, "-shared", "-fPIC", "-pthread", "-w", "-o", "all.so", "all.cpp"]
    done = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "barrier" in done.stderr and "No such file" in done.stderr:
        pytest.skip("the host C++ library has no <barrier> (C++20)")
    assert done.returncode == 0, done.stderr[-4000:]
    return ctypes.CDLL(str(directory / "all.so"))


def run_on_host(library, name: str, pointers: list, grid, block, threads: bool) -> None:
    ptrs = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
    g, b = (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block)
    getattr(library, f"run_{name}")(ptrs, g, b, int(threads))
