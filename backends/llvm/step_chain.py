"""A model plan's run of bound kernel calls as one native function, so that a run costs one
ctypes call instead of one per kernel (each ~2-4 us from Python: a tenth of a small CNN's time).

    chain = StepChain([bound, ...], notes=[address, ...], note=ctypes_note)   # Function.bind's
    chain()   # each kernel in turn, the note set before each (what a fault's report names)

Every call's function and arguments are addresses known when the plan was bound (constants and
arena buffers that stay put), so the generated function is a list of `store note; call f(args)`
with the addresses as constants, JIT-compiled once per plan (~2 ms for 100 calls).
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

_i8p, _i64 = ir.IntType(8).as_pointer(), ir.IntType(64)


def _module(calls: list, notes: list, note_address: int) -> ir.Module:
    mod = ir.Module(name="minitc_step_chain")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), []), "chain")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    note = b.inttoptr(_i64(note_address), _i64.as_pointer()) if note_address else None
    for call, text in zip(calls, notes):
        if note is not None:
            b.store(_i64(text or 0), note)
        kind = ir.FunctionType(ir.VoidType(), [_i8p] * len(call.args))
        target = b.inttoptr(_i64(call.address), kind.as_pointer())
        b.call(target, [b.inttoptr(_i64(a), _i8p) for a in call.args])
    b.ret_void()
    return mod


class StepChain:
    """`calls` (backends/function.py's BoundCall) run in order by one native call; before each,
    the address in `notes` (a C string's, or 0) is stored into the runtime's note `note` (a
    ctypes c_void_p, or None). The caller keeps the kernels alive (a plan's steps hold them)."""

    def __init__(self, calls: list, notes: list, note=None):
        from minitc.backends.llvm.runtime import _jit, ensure_runtime

        ensure_runtime()  # initialises LLVM's native target
        note_address = ctypes.addressof(note) if isinstance(note, ctypes.c_void_p) else 0
        self._engine = _jit(_module(calls, notes, note_address))  # kept: it owns the code
        self._run = ctypes.CFUNCTYPE(None)(self._engine.get_function_address("chain"))
        self.size = len(calls)

    def __call__(self) -> None:
        self._run()
