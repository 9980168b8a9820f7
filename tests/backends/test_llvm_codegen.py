"""Tests of the LLVM backend that need no JIT: target parsing and rendering.

- targets (minitc/target/cpu.py): the host target and named ones, their normalised strings,
  SIMD widths, malformed and unknown options;
- rendering (backends/llvm/codegen.py, pure): kernels built by hand from the IR classes become
  LLVM IR text: signature, noalias, vector loads and stores, contract flags, exact float
  constants, and the constructs it refuses with a BuildError.

Compiling and running kernels is test_llvm_jit.py.
"""

import math

import llvmlite.binding as llvm
import pytest
from helpers import relu_kernel

from minitc.backends.llvm.codegen import render
from minitc.errors import BuildError
from minitc.expr import Var, const, select
from minitc.ir import Buffer, For, Kernel, Load, Store, seq
from minitc.target import host_cpu_name, parse_cpu_target, parse_target
from minitc.target.cpu import simd_width
from minitc.target.host import core_class, read_host_facts

# -- targets ---------------------------------------------------------------------------------------


def test_parse_host_target():
    t = parse_target("llvm")
    # LLVM's name, or the core class the flags imply where a hypervisor's model number misled LLVM
    assert t.cpu == host_cpu_name() in (llvm.get_host_cpu_name(), core_class(read_host_facts()))
    assert t.triple == llvm.get_process_triple()
    assert t.string.startswith(f"llvm -mcpu={t.cpu}")
    assert parse_target(t.string) == t  # the normalised string parses back to the same target
    assert parse_target("llvm -num-cores=2").num_cores == 2


def test_parse_named_targets():
    t = parse_target("llvm -mcpu=skylake -mattr=+avx2,+fma")
    assert (t.cpu, t.features) == ("skylake", "+avx2,+fma")
    assert t.string.endswith("-mcpu=skylake -mattr=+avx2,+fma -num-cores=%d" % t.num_cores)
    assert simd_width(t, "float32") == 8
    assert simd_width("llvm -mcpu=znver1", "float64") == 4
    assert simd_width("llvm -mcpu=skylake-avx512", "float32") == 16
    assert simd_width("llvm -mcpu=nehalem", "float32") == 4
    assert simd_width("llvm -mcpu=skylake -mattr=-avx2,-avx", "float32") == 4


@pytest.mark.parametrize(
    "bad, words",
    [
        ("cuda -arch=sm_80", "not an LLVM CPU target"),
        ("", "not an LLVM CPU target"),
        ("llvm -mcpu", "malformed"),
        ("llvm -opt=3", "unknown or malformed option"),
        ("llvm -mcpu=pentium9000", "unknown cpu"),
        ("llvm -mattr=avx2", "must look like \\+avx2"),
        ("llvm -num-cores=zero", "positive integer"),
        ("llvm -num-cores=0", "positive integer"),
        ("llvm -mcpu=znver2 -mcpu=znver1", "given twice"),
    ],
)
def test_parse_target_errors(bad, words):
    with pytest.raises(BuildError, match=words):
        parse_cpu_target(bad)


def test_parse_target_dispatches_on_the_kind():
    assert parse_target("cuda -arch=sm_80").arch == "sm_80"
    assert parse_target("llvm -mcpu=znver4 -num-cores=3").num_cores == 3
    with pytest.raises(BuildError, match="unknown target ''"):
        parse_target("")


# -- rendering (pure) -------------------------------------------------------------------------------


def test_render_signature_and_flags():
    text = render(relu_kernel(), "llvm -mcpu=znver1")
    assert "define void @relu_affine(ptr noalias nocapture %arg0, ptr noalias nocapture %arg1" in text
    assert "load <8 x float>" in text and "store <8 x float>" in text
    assert "fmul contract <8 x float>" in text and "fadd contract" in text
    assert '"target-cpu"="znver1"' in text
    assert "add nuw nsw i64" in text and "icmp ult i64" in text
    assert render(relu_kernel(), "llvm -mcpu=znver1", name="other").count("@other(") == 1


def test_render_exact_float_constants():
    X, Y = Buffer("X", (4,), "float32"), Buffer("Y", (4,), "float64")
    i = Var("i")
    body = For(
        i,
        4,
        "serial",
        seq(
            Store(X, (i,), const(-math.inf, "float32")),
            Store(Y, (i,), select(i < 2, const(math.nan, "float64"), const(0.1, "float64"))),
        ),
    )
    text = render(Kernel("consts", [X, Y], 0, body))
    assert "0xFFF0000000000000" in text and "0x7FF8000000000000" in text
    assert "0x3FB999999999999A" in text  # 0.1 as a double, exactly


def test_unsupported_constructs_raise_build_error():
    X = Buffer("X", (4,), "float32")
    i, k = Var("i"), Var("k")
    with pytest.raises(BuildError, match="unknown kind 'tiled'"):
        render(Kernel("bad", [X], 0, For(i, 4, "tiled", Store(X, (i,), const(0.0, "float32")))))
    with pytest.raises(BuildError, match="'k' is used but not bound"):
        render(Kernel("bad", [X], 0, For(i, 4, "serial", Store(X, (k,), const(0.0, "float32")))))
    T = Buffer("T", (4,), "float32")
    with pytest.raises(BuildError, match="neither a parameter"):
        render(Kernel("bad", [X], 0, For(i, 4, "serial", Store(X, (i,), Load(T, (i,))))))
    with pytest.raises(BuildError, match="2 dimensions but is indexed with 1"):
        M = Buffer("M", (2, 2), "float32")
        render(Kernel("bad", [M], 0, For(i, 2, "serial", Store(M, (i,), const(0.0)))))
    with pytest.raises(BuildError, match="store of a int64 value into float32"):
        render(Kernel("bad", [X], 0, For(i, 4, "serial", Store(X, (i,), i))))
    with pytest.raises(BuildError, match="not an expression"):
        render(Kernel("bad", [X], 0, Store(X, (0,), const(0.0))))
    with pytest.raises(BuildError, match="dtype bool"):
        render(Kernel("bad", [Buffer("Bo", (4,), "bool")], 0, For(i, 4, "serial", Store(X, (i,), const(0.0)))))
