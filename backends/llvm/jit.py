"""Compile rendered kernels with LLVM and load them into the process (MCJIT).

    ck = compile_kernel(kernel, "llvm")
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(kernel.params))(ck.address)

Pipeline: render -> parse + verify -> O3 (new pass manager, loop and SLP vectorizers on) for the
target's TargetMachine -> add to the one process-wide MCJIT engine -> finalize -> address.
Compiled kernels are cached in-process by sha256(unoptimised IR + target string); the entry
function is named `<kernel>_<hash12>` so modules never clash inside the shared engine. All LLVM
work happens under one lock (LLVM's global context is not thread-safe).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import time

import llvmlite.binding as llvm

from minitc.backends.llvm import softfloat
from minitc.backends.llvm.codegen import render, sanitize
from minitc.errors import BuildError
from minitc.target import parse_target
from minitc.target.cpu import LLVMTarget
from minitc.target.llvm_state import LLVM_LOCK, ensure_llvm_initialized

_LOCK = LLVM_LOCK
_CACHE: dict = {}
_ENGINE = None
_MACHINES: dict = {}
RUNTIME_SYMBOLS = ("minitc_parallel_launch", "minitc_num_threads", "minitc_workspace_alloc", "minitc_workspace_free")
_NAME_MARK = "MINITC_ENTRY_NAME"  # stands for the hash-derived entry name while rendering


class CompiledKernel:
    """A kernel loaded into this process. `address` is the entry function pointer, taking one
    data pointer per kernel parameter. `asm` is produced on first access (it costs a second
    code generation, which tuning loops rarely need)."""

    def __init__(self, name, address, llvm_ir, llvm_ir_unoptimized, target, key, num_params, seconds):
        self.name, self.address = name, address
        self.llvm_ir, self.llvm_ir_unoptimized = llvm_ir, llvm_ir_unoptimized
        self.target, self.key, self.num_params = target, key, num_params
        self.compile_seconds = seconds
        self._asm = None
        self._cfunc = None

    @property
    def asm(self) -> str:
        if self._asm is None:
            with _LOCK:
                mod = llvm.parse_assembly(self.llvm_ir)
                self._asm = _target_machine(self.target).emit_assembly(mod)
        return self._asm

    @property
    def cfunc(self):
        """The entry point as a ctypes function of `num_params` void pointers."""
        if self._cfunc is None:
            self._cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * self.num_params)(self.address)
        return self._cfunc

    def __repr__(self):
        return f"CompiledKernel({self.name}, {self.target.string!r})"


def compile_kernel(kernel, target="llvm") -> CompiledKernel:
    """Render, optimise and load `kernel`; a kernel seen before (same IR, same target) returns
    the cached CompiledKernel. Raises BuildError if LLVM rejects the module or the target's code
    cannot run on this machine."""
    target = parse_target(target)
    start = time.perf_counter()
    placeholder = f"{sanitize(kernel.name)}_{_NAME_MARK}"
    ir_plain = render(kernel, target, name=placeholder)  # rendered once: the name is patched in
    key = hashlib.sha256((ir_plain + "\n" + target.string).encode()).hexdigest()
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        if not target.is_host_compatible:
            raise BuildError(
                f"target {target.string!r} needs CPU features this machine lacks "
                f"(host: {parse_target('llvm').string!r}); use codegen.render() to inspect its IR instead"
            )
        name = f"{sanitize(kernel.name)}_{key[:12]}"
        ir = ir_plain.replace(f"@{placeholder}", f"@{name}")  # the entry and its task functions
        compiled = _compile(ir, name, target, key, len(kernel.params), start)
        _CACHE[key] = compiled
        return compiled


def _target_machine(target: LLVMTarget):
    tm = _MACHINES.get(target.string)
    if tm is None:
        ensure_llvm_initialized()
        try:
            tgt = llvm.Target.from_triple(target.triple)
        except RuntimeError as e:
            raise BuildError(f"LLVM has no backend for triple {target.triple!r}: {e}") from None
        tm = tgt.create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, codemodel="jitdefault", jit=True
        )
        _MACHINES[target.string] = tm
    return tm


def _engine():
    global _ENGINE
    if _ENGINE is None:
        host = _target_machine(parse_target("llvm"))
        _ENGINE = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host)
        _add_softfloat(_ENGINE)
    return _ENGINE


def _add_softfloat(engine) -> None:
    """The bfloat16 conversions LLVM may call where the target lacks AVX-512 BF16
    (softfloat.py), unless the process has them already."""
    for name in softfloat.LIBRARIES:  # float16 conversions on targets without F16C (libgcc has them)
        try:
            llvm.load_library_permanently(name)
        except RuntimeError:
            pass
    if all(llvm.address_of_symbol(s) for s in softfloat.SYMBOLS):
        return
    mod = llvm.parse_assembly(softfloat.IR)
    mod.verify()
    engine.add_module(mod)
    engine.finalize_object()
    for name in softfloat.SYMBOLS:
        llvm.add_symbol(name, engine.get_function_address(name))


def _optimize(mod, tm):
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pto.loop_interleaving = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def optimized_module(ir: str, name: str, target: LLVMTarget):
    """Parse, verify and O3-optimise rendered IR for `target`; returns (module, target machine).
    Call with _LOCK held (LLVM's global context is not thread-safe)."""
    tm = _target_machine(target)
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise BuildError(f"LLVM rejected the IR of kernel {name}: {e}") from None
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    _optimize(mod, tm)
    return mod, tm


def _compile(ir, name, target, key, num_params, start) -> CompiledKernel:
    mod, _ = optimized_module(ir, name, target)
    optimized = str(mod)
    engine = _engine()  # creating it makes the process's own symbols (libm, libc) visible
    if any(s in ir for s in RUNTIME_SYMBOLS):
        _ensure_runtime()
    missing = [
        f.name
        for f in mod.functions
        if f.is_declaration and not f.name.startswith("llvm.") and not llvm.address_of_symbol(f.name)
    ]
    if missing:
        raise BuildError(f"kernel {name} calls functions that are not loaded in this process: {', '.join(missing)}")
    engine.add_module(mod)
    try:
        engine.finalize_object()
    except RuntimeError as e:
        engine.remove_module(mod)
        raise BuildError(f"LLVM failed to generate code for kernel {name}: {e}") from None
    address = engine.get_function_address(name)
    if not address:
        raise BuildError(f"LLVM produced no function {name}")
    return CompiledKernel(name, address, optimized, ir, target, key, num_params, time.perf_counter() - start)


def _ensure_runtime():
    """Register the parallel runtime's symbols (backends/llvm/runtime.py) with LLVM."""
    if importlib.util.find_spec(f"{__package__}.runtime") is not None:
        from minitc.backends.llvm import runtime

        runtime.ensure_runtime()
    if not all(llvm.address_of_symbol(s) for s in RUNTIME_SYMBOLS):
        raise BuildError(
            "this kernel has a parallel loop or a heap buffer but the minitc runtime is not available "
            f"(backends/llvm/runtime.py must register {' and '.join(RUNTIME_SYMBOLS)})"
        )
