"""Templates and code for several x86 CPUs, whatever the host: LLVM renders and compiles for any
`-mcpu`, so every target's loop nest and assembly are checked here; kernels run only on the
targets this host can execute (an AVX-512 host runs AVX2 code too)."""

import re

import numpy as np
import pytest

import minitc as tc
from minitc.backends.llvm import jit
from minitc.backends.llvm.codegen import render
from minitc.target import parse_target, simd_width
from minitc.templates import template_schedule

CPUS = ["haswell", "znver2", "znver3", "skylake-avx512", "znver4", "sapphirerapids"]


def _workloads():
    """name -> (output tensor, numpy reference of the inputs)."""
    ref = tc.ops.reference
    A, B = tc.placeholder((96, 80), name="A"), tc.placeholder((80, 112), name="B")
    W = tc.placeholder((112, 80), name="W")
    X, K = tc.placeholder((1, 16, 14, 14), name="X"), tc.placeholder((32, 16, 3, 3), name="K")
    S = tc.placeholder((48, 128), name="S")
    return {
        "matmul": (tc.ops.matmul(A, B), ref.matmul),
        "dense": (tc.ops.dense(A, W, activation="relu"), lambda a, w: ref.dense(a, w, activation="relu")),
        "conv2d": (tc.ops.conv2d(X, K, padding=1), lambda x, k: ref.conv2d(x, k, padding=1)),
        "softmax": (tc.ops.softmax(S), ref.softmax),
        "relu": (tc.ops.relu(S), ref.relu),
        "sum": (tc.ops.sum(S, axis=-1), lambda s: ref.sum(s, axis=-1)),
    }


def _assembly(kernel, target):
    name = "k"
    module, machine = jit.optimized_module(render(kernel, target, name=name), name, target)
    return machine.emit_assembly(module)


@pytest.mark.parametrize("cpu", CPUS)
def test_templates_follow_the_target(cpu):
    """Vector loops are whole vectors of the target (conv2d: at most one), and the assembly uses
    the target's registers: zmm for AVX-512, ymm and never zmm for AVX2."""
    target = parse_target(f"llvm -mcpu={cpu} -num-cores=2")
    lanes = simd_width(target, "float32")
    assert lanes == (16 if cpu in ("skylake-avx512", "znver4", "sapphirerapids") else 8)
    for name, (out, _) in _workloads().items():
        kernel = tc.lower(template_schedule(out, target))
        widths = [int(w) for w in re.findall(r"vectorized\((\d+)\)", str(kernel))]
        if name == "conv2d":
            assert widths and all(w <= lanes for w in widths), (name, cpu, widths)
        elif name != "sum":
            assert widths and all(w % lanes == 0 for w in widths), (name, cpu, widths)
        asm = _assembly(kernel, target)
        if lanes == 16 and name != "sum":
            assert "%zmm" in asm, (name, cpu)
        if lanes == 8:
            assert "%zmm" not in asm and "%ymm" in asm, (name, cpu)


@pytest.mark.parametrize("cpu", CPUS)
def test_kernels_run_where_the_host_can(cpu):
    target = parse_target(f"llvm -mcpu={cpu} -num-cores=2")
    if not target.is_host_compatible:
        pytest.skip(f"this host cannot run {cpu} code")
    rng = np.random.default_rng(0)
    for name, (out, reference) in _workloads().items():
        f = tc.build(template_schedule(out, target), target=target.string)
        inputs = [rng.standard_normal(b.shape).astype("float32") for b in f.kernel.inputs]
        np.testing.assert_allclose(f(*inputs), reference(*inputs), rtol=2e-4, atol=2e-4, err_msg=name)
