"""LLVM's process-wide state, shared by the code generator (backends/llvm) and the host's
calibration (calibrate.py): the lock around its global context and its one-time set-up."""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm

# LICM keeps an accumulator that lives in memory (a GEMM accumulating into its output over k
# blocks, a convolution's split reduction) in a register only while the loop has at most this
# many memory accesses; LLVM's default (250) is below an unrolled 14 x 2-vector micro-kernel's,
# which then loads and stores every accumulator at every FMA (4.4x slower, docs/hardware.md).
MAX_PROMOTED_ACCESSES = 4096

LLVM_LOCK = threading.RLock()  # LLVM's global context is not thread-safe: hold it to parse or compile


@functools.lru_cache(maxsize=None)
def ensure_llvm_initialized() -> bool:
    """Initialise LLVM's native target, asm printer and parser once (llvmlite 0.50 no longer has
    `llvm.initialize()`), and the optimiser's options."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    llvm.set_option("minitc", f"-licm-mssa-max-acc-promotion={MAX_PROMOTED_ACCESSES}")
    return True
