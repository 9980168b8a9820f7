"""Ahead-of-time compilation to object code, so that building (render + O3 + codegen) can run
in one process and measuring in another: the tuner builds candidates in a pool of workers and
loads each object file into an isolated runner process."""

from __future__ import annotations

import threading

import llvmlite.binding as llvm

from minitc.backends.llvm import jit
from minitc.backends.llvm.codegen import render, sanitize
from minitc.errors import BuildError
from minitc.target import parse_target

_LOCK = threading.Lock()
_LOADED: dict = {}  # symbol name -> address, in this process


def compile_object(kernel, target="llvm", name: str | None = None) -> tuple[str, bytes]:
    """Compile a kernel to a relocatable object; returns (entry symbol name, object bytes)."""
    target = parse_target(target)
    name = sanitize(name or kernel.name)
    ir = render(kernel, target, name=name)
    with jit._LOCK:
        mod, tm = jit.optimized_module(ir, name, target)
        return name, tm.emit_object(mod)


def load_object(name: str, data: bytes) -> int:
    """Load an object produced by compile_object into this process; returns the entry address.
    Loading the same symbol twice returns the first address."""
    with _LOCK, jit._LOCK:
        if name in _LOADED:
            return _LOADED[name]
        engine = jit._engine()
        jit._ensure_runtime()
        engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        engine.finalize_object()
        address = engine.get_function_address(name)
        if not address:
            raise BuildError(f"object file has no function {name}")
        _LOADED[name] = address
        return address
