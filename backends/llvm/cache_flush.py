"""Evicting arrays from the CPU caches (`clflush` of each cache line, then a fence), so that a
kernel can be timed as it runs in a model whose weights do not stay in cache between calls:
TVM's runners do the same (`enable_cpu_cache_flush`).

    flush_from_caches([weights])   # every line of each array leaves every cache level
"""

from __future__ import annotations

import ctypes
import threading

from llvmlite import ir

LINE_BYTES = 64  # the cache line of every x86-64 core; a flush per line evicts each once
_lock = threading.Lock()
_flush = None  # (engine, function) once JIT-compiled


def _module() -> ir.Module:
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    mod = ir.Module(name="minitc_cache_flush")
    clflush = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p]), "llvm.x86.sse2.clflush")
    mfence = ir.Function(mod, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.mfence")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p, i64]), "flush")
    start, nbytes = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned(">", nbytes, i64(0)), loop, done)
    b.position_at_end(loop)
    offset = b.phi(i64)
    offset.add_incoming(i64(0), entry)
    b.call(clflush, [b.gep(start, [offset])])
    following = b.add(offset, i64(LINE_BYTES))
    offset.add_incoming(following, loop)
    b.cbranch(b.icmp_unsigned("<", following, nbytes), loop, done)
    b.position_at_end(done)
    b.call(mfence, [])
    b.ret_void()
    return mod


def _function():
    global _flush
    with _lock:
        if _flush is None:
            from minitc.backends.llvm.runtime import _jit, ensure_runtime

            ensure_runtime()  # initialises LLVM's native target
            engine = _jit(_module())
            signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
            _flush = (engine, signature(engine.get_function_address("flush")))
    return _flush[1]


def flush_from_caches(arrays) -> None:
    """Evict every cache line of each numpy array from all cache levels."""
    flush = _function()
    for a in arrays:
        start = a.ctypes.data - a.ctypes.data % LINE_BYTES  # the line the first element is in
        flush(start, a.ctypes.data + a.nbytes - start)
