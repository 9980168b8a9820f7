"""Low-precision dtypes in the CUDA C renderer, by the generated text (no GPU here):
`__nv_bfloat16`, `__half`, `signed char`, `unsigned char`; their headers included only where
used; 16-bit float math through float; 8-bit arithmetic in int, converted back (wrapping).
nvcc compiles the text for sm_90 where it is installed."""

import subprocess

import pytest
from cuda_tools import find_nvcc
from gpu_schedules import trivial_binding

import minitc as tc
from minitc import dtypes

CTYPE = {"bfloat16": "__nv_bfloat16", "float16": "__half", "int8": "signed char", "uint8": "unsigned char"}


def source(dtype: str) -> str:
    A = tc.placeholder((100,), dtype, name="A")
    B = tc.placeholder((100,), dtype, name="B")
    if dtypes.is_int(dtype):
        C = tc.compute((100,), lambda i: A[i] * B[i] + A[i] // B[i] - tc.max(A[i], B[i]) + 3, name="C")
    else:
        C = tc.compute((100,), lambda i: A[i] * B[i] + tc.exp(A[i]) - tc.max(A[i], B[i]) + 1.5, name="C")
    D = tc.compute((100,), lambda i: tc.cast(C[i], "float32"), name="D")
    return tc.codegen(trivial_binding([D]), "cuda", name=f"k_{dtype}")


@pytest.mark.parametrize("dtype", list(CTYPE))
def test_low_precision_cuda_text(dtype):
    src = source(dtype)
    ctype = CTYPE[dtype]
    assert f"const {ctype}* __restrict__ A" in src and f"{ctype}* __restrict__ C" in src
    assert ("#include <cuda_bf16.h>" in src) == dtypes.is_float(dtype)
    if dtype == "bfloat16":
        assert "(__nv_bfloat16)expf((float)A[" in src  # exp in float, rounded once
        assert "__nv_bfloat16(1.5f)" in src
    if dtype == "int8":
        assert "(signed char)(A[" in src  # the int product converted back: it wraps as numpy's


def test_float32_programs_include_no_half_headers():
    X = tc.placeholder((64,), name="X")
    Y = tc.compute((64,), lambda i: X[i] * 2.0, name="Y")
    assert "#include" not in tc.codegen(trivial_binding([Y]), "cuda")


@pytest.mark.parametrize("dtype", list(CTYPE))
def test_nvcc_compiles_low_precision(dtype, tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin")
    (tmp_path / "k.cu").write_text(source(dtype))
    cmd = [nvcc, "-arch=sm_90", "--ptx", "-std=c++17", "-Werror", "all-warnings", "k.cu", "-o", "k.ptx"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
