"""The crash report of the runtime: what was running when a fault killed the process (issue 55).

A fault in generated code (a stray pointer, a bad instruction) kills the process; on a pool
worker thread Python's faulthandler shows no Python frame for it. So the runtime module gets

    @minitc_rt_note = global ptr null        ; a C string: the kernel and model running now
    define void @minitc_rt_on_fault(i32 %sig, ptr %info, ptr %context)

and `runtime.py` installs the handler for FAULT_SIGNALS with `sigaction`, keeping the actions
they replace (faulthandler's, when it is enabled) in `@minitc_rt_old_actions`. The handler
writes `minitc: fatal signal N ...; running: <note>` to stderr with write(2) (async-signal-safe),
puts the old action back and returns: the faulting instruction runs again and faults into the
old action, which (faulthandler's) dumps the Python threads' tracebacks and ends the process.
The plan sets the note before each kernel step (minitc/frontend/runtime.py).
"""

import llvmlite.ir as ir

FAULT_SIGNALS = (11, 7, 8, 4)  # SIGSEGV, SIGBUS, SIGFPE, SIGILL on x86_64 and aarch64 Linux
ACTION_BYTES = 256  # room for a struct sigaction (152 bytes in glibc)
NOTE, OLD_ACTIONS, HANDLER = "minitc_rt_note", "minitc_rt_old_actions", "minitc_rt_on_fault"

_i8, _i32, _i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_ptr = _i8.as_pointer()


def _c(ty, value):
    return ir.Constant(ty, value)


def _text(mod, name: str, text: str):
    data = bytearray(text.encode())
    gv = ir.GlobalVariable(mod, ir.ArrayType(_i8, len(data)), name=name)
    gv.initializer, gv.global_constant, gv.linkage = ir.Constant(ir.ArrayType(_i8, len(data)), data), True, "internal"
    return gv, len(data)


def add_fault_report(mod: ir.Module) -> None:
    """Add the note, the saved actions and the handler (module docstring) to `mod`."""
    note = ir.GlobalVariable(mod, _ptr, name=NOTE)
    note.initializer, note.align = _c(_ptr, None), 8
    actions_ty = ir.ArrayType(ir.ArrayType(_i8, ACTION_BYTES), len(FAULT_SIGNALS))
    old = ir.GlobalVariable(mod, actions_ty, name=OLD_ACTIONS)
    old.initializer, old.align = _c(actions_ty, None), 16
    write = ir.Function(mod, ir.FunctionType(_i64, [_i32, _ptr, _i64]), "write")
    strlen = ir.Function(mod, ir.FunctionType(_i64, [_ptr]), "strlen")
    sigaction = ir.Function(mod, ir.FunctionType(_i32, [_i32, _ptr, _ptr]), "sigaction")
    head, head_len = _text(mod, "minitc_rt_fault_head", "\nminitc: fatal signal ")
    middle, middle_len = _text(mod, "minitc_rt_fault_middle", " in this process; running: ")
    idle, _ = _text(mod, "minitc_rt_fault_idle", "no minitc kernel (none was being called)\0")
    newline, _ = _text(mod, "minitc_rt_fault_newline", "\n")

    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [_i32, _ptr, _ptr]), HANDLER)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sig = fn.args[0]

    def put(text, length):
        b.call(write, [_c(_i32, 2), b.bitcast(text, _ptr), length])

    put(head, _c(_i64, head_len))
    digits = ir.ArrayType(_i8, 2)  # the signal number, two digits (all of FAULT_SIGNALS are < 100)
    number = b.alloca(digits)
    tens, ones = b.udiv(sig, _c(_i32, 10)), b.urem(sig, _c(_i32, 10))
    for k, digit in enumerate((tens, ones)):
        b.store(b.trunc(b.add(digit, _c(_i32, ord("0"))), _i8), b.gep(number, [_c(_i32, 0), _c(_i32, k)]))
    put(number, _c(_i64, 2))
    put(middle, _c(_i64, middle_len))
    current = b.load_atomic(note, "monotonic", 8)
    text = b.select(b.icmp_unsigned("==", current, _c(_ptr, None)), b.bitcast(idle, _ptr), current)
    put(text, b.call(strlen, [text]))
    put(newline, _c(_i64, 1))
    slot = _c(_i32, 0)  # the index of `sig` in FAULT_SIGNALS
    for k, signal in enumerate(FAULT_SIGNALS):
        slot = b.select(b.icmp_unsigned("==", sig, _c(_i32, signal)), _c(_i32, k), slot)
    action = b.gep(old, [_c(_i32, 0), slot, _c(_i32, 0)])
    b.call(sigaction, [sig, action, _c(_ptr, None)])  # the old action takes the fault when it recurs
    b.ret_void()
