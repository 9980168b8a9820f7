"""Does this host run 512-bit FMAs at full rate? Measured, not looked up.

One LLVM name covers cores that differ here: Zen 5 has a full 512-bit datapath on desktop and
server parts and splits 512-bit ops in halves on mobile ones; some Skylake-SP Xeons have one
512-bit FMA unit, others two. So for the host's own cpu the target description asks the
hardware: the same loop of independent FMA chains at 256 and at 512 bits, one thread, and
compares floating-point operations per second.

    wide_over_narrow_rate()   # about 2.0 with two 512-bit FMA pipes, about 1.0 when split
    host_full_rate_512()      # the ratio above FULL_RATE_RATIO

The loop is written directly in LLVM IR (the target layer sits below minitc's code generator):
CHAINS accumulators, each updated `acc = fma(acc, x, y)` per iteration, enough independent
chains to cover the FMA latency on two pipes. Samples of both widths are interleaved and the
fastest of each kept, so a load on the machine slows both alike.
"""

from __future__ import annotations

import ctypes
import functools
import time

import llvmlite.binding as llvm

CHAINS = 12  # independent accumulators: 4-cycle latency x 2 pipes, with room to spare
ITERS = 200_000
SAMPLES = 5
FULL_RATE_RATIO = 1.5  # halfway between split (1.0) and full rate (2.0)


def _ir(lanes: int) -> str:
    vec = f"<{lanes} x float>"
    lines = [
        f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})",
        f"define void @fma_chains_{lanes}(i64 %iters, float %xs, float %ys, ptr %out) {{",
        "entry:",
        f"  %x0 = insertelement {vec} poison, float %xs, i64 0",
        f"  %x = shufflevector {vec} %x0, {vec} poison, <{lanes} x i32> zeroinitializer",
        f"  %y0 = insertelement {vec} poison, float %ys, i64 0",
        f"  %y = shufflevector {vec} %y0, {vec} poison, <{lanes} x i32> zeroinitializer",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]",
    ]
    for c in range(CHAINS):
        lines.append(f"  %a{c} = phi {vec} [ %y, %entry ], [ %b{c}, %loop ]")
    for c in range(CHAINS):
        lines.append(f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} %x, {vec} %y)")
    lines += [
        "  %next = add i64 %i, 1",
        "  %more = icmp ult i64 %next, %iters",
        "  br i1 %more, label %loop, label %done",
        "done:",
    ]
    total = "%b0"
    for c in range(1, CHAINS):
        lines.append(f"  %s{c} = fadd {vec} {total}, %b{c}")
        total = f"%s{c}"
    lines += [f"  store {vec} {total}, ptr %out, align 4", "  ret void", "}"]
    return "\n".join(lines)


def _timed(fn, lanes: int) -> float:
    """Seconds for ITERS iterations of the `lanes`-wide loop."""
    out = (ctypes.c_float * lanes)()
    t0 = time.perf_counter()
    fn(ITERS, 0.999999, 1e-6, out)  # acc stays near 1: no denormals, no overflow
    return time.perf_counter() - t0


def wide_over_narrow_rate(cpu: str, features: str) -> float:
    """FLOP/s of 512-bit FMAs over those of 256-bit ones on this host (whose cpu and feature
    string are given, as the host's LLVMTarget has them)."""
    from minitc.target.cpu import LLVM_LOCK, ensure_llvm_initialized

    ensure_llvm_initialized()
    with LLVM_LOCK:
        tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=2, jit=True)
        mod = llvm.parse_assembly(_ir(8) + "\n" + _ir(16))
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
    proto = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_float, ctypes.c_float, ctypes.c_void_p)
    narrow = proto(engine.get_function_address("fma_chains_8"))
    wide = proto(engine.get_function_address("fma_chains_16"))
    best = {8: float("inf"), 16: float("inf")}
    for _ in range(SAMPLES):
        best[8] = min(best[8], _timed(narrow, 8))
        best[16] = min(best[16], _timed(wide, 16))
    del engine  # frees the code (the functions are not called again)
    return (16 / best[16]) / (8 / best[8])


@functools.lru_cache(maxsize=None)
def host_full_rate_512(cpu: str, features: str) -> bool:
    """True if the host runs 512-bit FMAs at about twice the FLOP/s of 256-bit ones."""
    return wide_over_narrow_rate(cpu, features) > FULL_RATE_RATIO
