"""The GPU GEMM template (minitc/templates/gpu/gemm.py) and double buffering
(minitc/lowering/double_buffer.py): results in the simulator against numpy, the pipelined loop's
structure, float4 accesses in the CUDA C, nvcc/ptxas without spills, and design-space points."""

import re

import numpy as np
import pytest
from cuda_tools import find_nvcc, ptxas_log

import minitc as tc
from minitc import ir
from minitc.backends import lower_gpu
from minitc.backends.cuda.codegen import render_program
from minitc.schedule import Schedule
from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, gpu_template_schedule, load_gpu_templates

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def scheduled(out, **params):
    load_gpu_templates()
    s = Schedule(out)
    name = s.state.outputs[0]
    GPU_TEMPLATES[s.state.stage(name).tag](s, name, None, **params)
    bind_unbound(s)
    return s


SMALL = dict(bm=32, bn=32, tm=4, tn=4)


@pytest.mark.parametrize("K,bk", [(8, 8), (16, 8), (40, 8), (13, 8)])  # 1, 2, 5 k-steps; a partial one
@pytest.mark.parametrize("M,N", [(32, 64), (37, 29)])
def test_matmul_matches_numpy(M, N, K, bk):
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    f = tc.build(scheduled(tc.ops.matmul(A, B), bk=bk, **SMALL), target="cuda-sim")
    a, b = rand(M, K), rand(K, N)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_batch_matmul_dense_and_epilogue_match_numpy():
    A, B = tc.placeholder((2, 24, 16), name="A"), tc.placeholder((2, 16, 20), name="B")
    f = tc.build(scheduled(tc.ops.batch_matmul(A, B), bk=4, **SMALL), target="cuda-sim")
    a, b = rand(2, 24, 16), rand(2, 16, 20)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4)
    X, W, bias = tc.placeholder((33, 24), name="X"), tc.placeholder((40, 24), name="W"), tc.placeholder((40,), name="b")
    x, w, bb = rand(33, 24), rand(40, 24), rand(40)
    f = tc.build(scheduled(tc.ops.dense(X, W), bk=8, **SMALL), target="cuda-sim")
    np.testing.assert_allclose(f(x, w), x @ w.T, rtol=1e-4, atol=1e-4)
    f = tc.build(scheduled(tc.ops.dense(X, W, bias, activation="relu"), bk=8, **SMALL), target="cuda-sim")
    np.testing.assert_allclose(f(x, w, bb), np.maximum(x @ w.T + bb, 0), rtol=1e-4, atol=1e-4)


def test_default_templates_match_numpy():
    A, B = tc.placeholder((48, 40), name="A"), tc.placeholder((40, 56), name="B")
    a, b = rand(48, 40), rand(40, 56)
    np.testing.assert_allclose(tc.build(tc.ops.matmul(A, B), target="cuda-sim", db=False)(a, b), a @ b, atol=1e-4)


def pipelined_loop(kernel) -> ir.For:
    """The k loop: the serial loop that holds a barrier."""
    for s in ir.walk_stmts(kernel.body):
        if isinstance(s, ir.For) and s.kind == "serial" and any(isinstance(n, ir.Barrier) for n in ir.walk_stmts(s)):
            return s
    raise AssertionError("no serial loop with a barrier")


def test_double_buffered_loop_has_one_barrier_and_a_guarded_prefetch():
    A, B = tc.placeholder((64, 64), name="A"), tc.placeholder((64, 64), name="B")
    program = lower_gpu(scheduled(tc.ops.matmul(A, B), bk=16, **SMALL), "cuda-sim")
    loop = pipelined_loop(program.kernel)
    assert loop.extent == 4
    assert sum(isinstance(n, ir.Barrier) for n in ir.walk_stmts(loop)) == 1
    guards = [n for n in ir.walk_stmts(loop) if isinstance(n, ir.IfThenElse)]
    assert len(guards) == 2 and all(str(g.cond) == str(guards[0].cond) for g in guards)  # loads, then stores
    assert loop.var in {v for v in _vars(guards[0].cond)}
    shared = {s.buffer.name: s.buffer.shape for s in ir.walk_stmts(program.kernel.body) if isinstance(s, ir.Allocate)}
    assert shared["A_shared"] == (2, 16, 32) and shared["B_shared"] == (2, 16, 32)  # k-major, two of each


def _vars(e):
    from minitc.expr import Var, walk

    return [n for n in walk(e) if isinstance(n, Var)]


def test_one_k_step_and_disabled_double_buffering_keep_one_buffer(monkeypatch):
    A, B = tc.placeholder((32, 8), name="A"), tc.placeholder((8, 32), name="B")
    program = lower_gpu(scheduled(tc.ops.matmul(A, B), bk=8, **SMALL), "cuda-sim")
    shapes = [s.buffer.shape for s in ir.walk_stmts(program.kernel.body) if isinstance(s, ir.Allocate)]
    assert (8, 32) in shapes and not any(len(sh) == 3 for sh in shapes)
    monkeypatch.setenv("MINITC_GPU_DOUBLE_BUFFER", "0")
    A, B = tc.placeholder((32, 64), name="A"), tc.placeholder((64, 32), name="B")
    s = scheduled(tc.ops.matmul(A, B), bk=8, **SMALL)
    loop = pipelined_loop(lower_gpu(s, "cuda-sim").kernel)
    assert sum(isinstance(n, ir.Barrier) for n in ir.walk_stmts(loop)) == 2
    a, b = rand(32, 64), rand(64, 32)
    np.testing.assert_allclose(tc.build(s, target="cuda-sim")(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_shared_memory_over_the_limit_is_not_doubled():
    A, B = tc.placeholder((128, 256), name="A"), tc.placeholder((256, 128), name="B")
    s = scheduled(tc.ops.matmul(A, B), bm=128, bn=128, tm=8, tn=8, bk=32)  # 32 KiB, 64 doubled
    program = lower_gpu(s, "cuda")
    assert program.launches[0].shared_bytes == 32 * 1024


def default_source(M=4096, N=4096, K=4096):
    A, B = tc.placeholder((M, K), name="A"), tc.placeholder((K, N), name="B")
    return render_program(lower_gpu(gpu_template_schedule([tc.ops.matmul(A, B)], "cuda"), "cuda"))


def test_cuda_c_has_float4_global_and_shared_loads():
    src = default_source()
    assert "__launch_bounds__(128)" in src  # 128x128 blocks of 16x8 tiles
    assert re.search(r"const float4 A_v\w* = \*reinterpret_cast<const float4\*>\(&A\[", src)  # global
    assert re.search(r"const float4 B_v\w* = \*reinterpret_cast<const float4\*>\(&B\[", src)
    assert re.search(r"const float4 A_shared_v\w* = \*reinterpret_cast<const float4\*>\(&A_shared\[", src)
    assert re.search(r"const float4 B_shared_v\w* = \*reinterpret_cast<const float4\*>\(&B_shared\[", src)
    assert src.count("__syncthreads();") == 3  # prologue 2, loop 1
    assert re.search(r"#pragma unroll\s+for \(int k_i\b", src)  # next k's shared loads overlap this k's FMAs


def test_k_step_stays_a_loop_when_asked(monkeypatch):
    monkeypatch.setenv("MINITC_GPU_UNROLL_K", "0")
    src = default_source()
    assert re.search(r"for \(int k_i\b", src) and not re.search(r"#pragma unroll\s+for \(int k_i\b", src)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
def test_default_kernel_compiles_without_spills(tmp_path):
    X, W, b = tc.placeholder((4096, 768), name="X"), tc.placeholder((3072, 768), name="W"), tc.placeholder((3072,))
    dense = tc.codegen(tc.ops.dense(X, W, b, activation="gelu"), "cuda", db=False)
    log = ptxas_log(default_source() + dense.split("#endif", 1)[1], tmp_path)
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == 2, log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log  # register tiles stay in registers


def test_design_space_points_are_legal_programs():
    A, B = tc.placeholder((40, 24), name="A"), tc.placeholder((24, 36), name="B")
    C = tc.ops.matmul(A, B)
    a, b = rand(40, 24), rand(24, 36)
    for params in [
        dict(bm=16, bn=16, tm=1, tn=1, bk=1),
        dict(bm=64, bn=8, tm=2, tn=8, bk=4),
        dict(bm=8, bn=128, tm=8, tn=16, bk=32),
        dict(bm=32, bn=32, tm=3, tn=5, bk=7),
        dict(bm=32, bn=32, tm=4, tn=4, bk=16, shared=False),
    ]:
        f = tc.build(scheduled(C, **params), target="cuda-sim")
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-4, err_msg=str(params))
