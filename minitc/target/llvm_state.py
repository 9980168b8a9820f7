"""LLVM's process-wide state, shared by the code generator (backends/llvm) and the host's
calibration (calibrate.py): the lock around its global context and its one-time set-up."""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm

LLVM_LOCK = threading.RLock()  # LLVM's global context is not thread-safe: hold it to parse or compile


@functools.lru_cache(maxsize=None)
def ensure_llvm_initialized() -> bool:
    """Initialise LLVM's native target, asm printer and parser once (llvmlite 0.50 no longer has
    `llvm.initialize()`)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    return True
