"""The CUDA C renderer (backends/cuda/codegen.py) on every example of gpu_schedules.py (its
hand-written schedules, a few custom kernels and a trivially bound schedule of every tc.ops
operator): the generated text and whether CUDA's compilers accept it, no GPU needed.

- structure: extern "C", __restrict__ and const, __launch_bounds__, one __shared__ declaration per
  shared buffer, one __syncthreads() per barrier, deterministic text, exact float literals,
  sanitized names, guards, loop kinds, constructs the renderer refuses;
- nvcc compiles all of it, warnings as errors, for sm_75 (PTX) and sm_90 (through ptxas), and so
  does NVRTC with CuPy's options where libnvrtc is found (each skipped when the tool is missing).

Running the generated code (on the host, through the runtime with a fake CuPy, on a GPU) is
test_cuda_runtime.py.
"""

import re
import subprocess

import numpy as np
import pytest
from cuda_tools import find_nvcc, find_nvrtc, nvrtc_compile
from gpu_schedules import EXAMPLES, example, lower_examples, trivial_binding

import minitc as tc
from minitc import ir
from minitc.backends.cuda.codegen import C_TYPES, float_literal, render_launch, render_program, sanitize
from minitc.driver import lower_gpu
from minitc.errors import BuildError
from minitc.expr import Var, const
from minitc.lowering.gpu import Launch


@pytest.fixture(scope="module")
def programs():
    """name -> (GpuProgram, reference, inputs), kernels named after the example."""
    return lower_examples()


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
        shared = {
            st.buffer
            for st in ir.walk_stmts(launch.body)
            if isinstance(st, ir.Allocate) and st.buffer.scope == "shared"
        }
        assert text.count("__shared__") == len(shared)
        for b in shared:  # declared once, before any loop
            decl = re.search(rf"__shared__ (__align__\(16\) )?float {b.name}\[{b.size}\];", text)
            assert decl and (decl.start() < text.find("for (") or "for (" not in text)
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
    body = ir.seq(
        ir.For(t1, 32, "threadIdx.x", ir.Store(a, (t1,), const(1.0))),
        ir.For(t2, 48, "threadIdx.x", ir.Store(a, (t2,), const(2.0))),
    )
    text = render_launch(Launch("k", [a], body, (1, 1, 1), (48, 1, 1)))
    assert "if ((int)threadIdx.x < 32) {" in text and "< 48" not in text


def test_loop_kinds():
    a = ir.Buffer("A", (4, 100), "float32")
    t, v, u, w, one = Var("t"), Var("v"), Var("u"), Var("w"), Var("one")
    store = ir.Store(a, (v, u + w + one), const(1.0))
    body = ir.For(
        t,
        4,
        "threadIdx.x",
        ir.For(v, 4, "vthread", ir.For(u, 90, "unrolled", ir.For(w, 8, "vectorized", ir.For(one, 1, "serial", store)))),
    )
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
        "sm_75": subprocess.Popen(
            [nvcc, "-ptx", "-arch=sm_75", "-o", "all.ptx", *common],
            cwd=d,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "sm_90": subprocess.Popen(
            [nvcc, "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", "all.cubin", *common],
            cwd=d,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
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
    from minitc.backends.cuda.runtime import OPTIONS

    source = "\n".join(render_program(p) for p, _, _ in programs.values())
    status, log = nvrtc_compile(lib, source, [*OPTIONS, f"-arch={arch}", "-ftz=true"])
    assert status == 0 and "warning" not in log, log[-4000:]
    status, log = nvrtc_compile(lib, 'extern "C" __global__ void k(float* x) { x[0] = y; }', list(OPTIONS))
    assert status != 0 and re.search(r"\((\d+)\): error", log)  # the format runtime.compile_error parses


def test_builders_compile_every_program_to_a_cubin(programs):
    """What the tuner's builder processes do where CuPy's NVRTC is installed (no GPU needed)."""
    from minitc.backends.cuda.nvrtc import _nvrtc, compile_cubin

    if _nvrtc() is None:
        pytest.skip("CuPy's NVRTC binding is not installed (pip install 'minitc[cuda]')")
    for program, _, _ in programs.values():
        assert compile_cubin(render_program(program), "sm_90")[:4] == b"\x7fELF"
    with pytest.raises(BuildError, match=r"NVRTC failed to compile the CUDA C(.|\n)*at:\n  line 1:"):
        compile_cubin('extern "C" __global__ void k(float* x) { x[0] = y; }', "sm_90")
    assert compile_cubin('extern "C" __global__ void k() {}', "sm_20") is None  # an architecture it lacks
