"""Render a `GpuProgram` as CUDA C. Pure: nothing is compiled here, no GPU or CuPy is needed.

    render_program(program) -> str   one translation unit: helpers, then one kernel per launch
    render_launch(launch) -> str     one `extern "C" __global__` kernel (needs HELPERS before it)

Each launch becomes `extern "C" __global__ void __launch_bounds__(threads) <launch.name>(...)`
with one pointer per `launch.params`, in order: `const T* __restrict__` for buffers the launch
only reads, `T* __restrict__` for those it writes. Buffers are flat (row-major offsets).

This file holds the kernel and its statements, C names (`sanitize`) and scopes. Expressions,
literals, C types and the `HELPERS` prelude are in exprs.py (the `ExprWriter` mixin that
`_LaunchWriter` inherits); `C_TYPES`, `HELPERS` and `float_literal` are importable from here too.

Statements (one method each, `STMT_EMITTERS`):
  bound loop   not a loop: `const int v = threadIdx.x;`, plus `if (v < extent)` only when the
               loop is shorter than the launch dimension
  serial       `for (int v = 0; v < n; ++v)`; unrolled and vthread loops get `#pragma unroll`
  vectorized   one float2/float4/double2 store (and vector loads) where the loop is a single
               contiguous, aligned store (vector.py); otherwise an unrolled scalar loop (nvcc
               vectorizes nothing itself; unrolled, a register array it indexes stays in registers)
  Allocate     shared: one `__shared__` array at the top of the kernel, however often the
               Allocate runs (`__align__(16)` if accessed as vectors); local: a per-thread
               array declared where it is allocated
  Barrier      `__syncthreads();`
  ShuffleXor   `acc[0] = combine(acc[0], __shfl_xor_sync(mask, acc[0], offset, width));` with the
               mask of every thread of the warp (the last warp of a block may be partial)
"""

from __future__ import annotations

import re

import numpy as np

from minitc import dtypes
from minitc.backends.cuda.exprs import (
    C_TYPES,
    HALF_FLOATS,
    HALF_INCLUDES,
    HELPERS,
    INT32,
    ExprWriter,
    float_literal,  # noqa: F401  (re-exported: tests import it from here)
    int_literal,
)
from minitc.backends.cuda.vector import VectorWriter
from minitc.errors import BuildError
from minitc.expr import Const, Var, walk
from minitc.ir import (
    BLOCK_TAGS,
    THREAD_TAGS,
    Allocate,
    Barrier,
    For,
    IfThenElse,
    Prefetch,
    Seq,
    ShuffleXor,
    Store,
    stmt_exprs,
    walk_stmts,
)
from minitc.lowering.gpu import GpuProgram, Launch

MAX_UNROLL = 64  # beyond this, `#pragma unroll 8` (as the LLVM backend does)
INDENT = "    "
RESERVED = set(
    "auto bool break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "class delete new namespace operator private protected public template this throw try catch true false typename "
    "using virtual asm friend mutable explicit export nullptr constexpr decltype noexcept alignas alignof "
    "threadIdx blockIdx blockDim gridDim warpSize min max abs llabs fabs fabsf exp expf log logf sqrt sqrtf tanh "
    "tanhf erf erff floor floorf ceil ceilf".split()
)
STMT_EMITTERS = {
    For: "emit_for",
    Store: "emit_store",
    Seq: "emit_seq",
    IfThenElse: "emit_if",
    Allocate: "emit_allocate",
    Barrier: "emit_barrier",
    ShuffleXor: "emit_shuffle",
    Prefetch: "emit_prefetch",
}


def render_program(program: GpuProgram) -> str:
    """The CUDA C translation unit for every launch of `program`, in launch order."""
    if not isinstance(program, GpuProgram):
        raise BuildError(f"render_program expects a minitc.lowering.gpu.GpuProgram, got {type(program).__name__}")
    k = program.kernel
    head = [f"// minitc CUDA C for kernel {k.name!r}: {len(program.launches)} launch(es)"]
    if program.temporaries:
        temps = ", ".join(f"{b.name} {b.dtype}[{', '.join(map(str, b.shape))}]" for b in program.temporaries)
        head.append(f"// temporaries (global buffers allocated by the runtime): {temps}")
    names = set()
    kernels = []
    for launch in program.launches:
        name = sanitize(launch.name)
        if name in names:
            raise BuildError(f"two launches of {k.name!r} are both named {name!r} in CUDA C")
        names.add(name)
        kernels.append(render_launch(launch))
    halves = any(C_TYPES[d] in text for d in HALF_FLOATS for text in kernels)
    includes = HALF_INCLUDES if halves else ""  # only where used: NVRTC finds them in CUDA's include path
    return "\n".join(head) + "\n\n" + includes + HELPERS + "\n" + "\n".join(kernels)


def render_launch(launch: Launch) -> str:
    """One kernel function (it calls the helpers of `HELPERS`, which render_program puts first)."""
    return _LaunchWriter(launch).run()


def sanitize(name: str) -> str:
    """A valid C identifier, readable, that no keyword, builtin or helper takes."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(name)) or "v"
    if s[0].isdigit() or s.startswith("_"):
        s = "v" + s
    if s in RESERVED or s.startswith("mtc_"):
        s += "_"
    return s


class _LaunchWriter(ExprWriter, VectorWriter):
    """Emission state for one launch: C names, loop-variable ranges and types, output lines;
    statements here, expressions from `ExprWriter` (exprs.py), vector accesses from
    `VectorWriter` (vector.py)."""

    def __init__(self, launch: Launch):
        self.launch = launch
        self.dims = {t: n for t, n in zip(BLOCK_TAGS, launch.grid)} | {t: n for t, n in zip(THREAD_TAGS, launch.block)}
        self.names, self.taken = {}, set()  # Var/Buffer -> C name; C names in use
        self.ranges, self.var_types = {}, {}  # Var -> (lo, hi); Var -> C type of its declaration
        self.buffers = set()  # buffers in scope
        self.scopes = [set()]  # C names declared in each open block
        self.lines, self.depth = [], 1
        self.index_ctx = False  # emitting an address: overflow would be out of bounds anyway
        self._narrow_memo = {}
        self.vector_shared = set()  # shared buffers read or written as float2/float4/double2

    # -- names and scopes ------------------------------------------------------------------------

    def name(self, obj) -> str:
        """The C name of a variable or buffer, fixed at its first appearance; a different object
        with the same (sanitized) name gets a suffix, as in the printer."""
        if obj not in self.names:
            base = sanitize(obj.name)
            text, n = base, 0
            while text in self.taken:
                n += 1
                text = f"{base}_{n}"
            self.taken.add(text)
            self.names[obj] = text
        return self.names[obj]

    def line(self, text: str):
        self.lines.append(INDENT * self.depth + text)

    def open(self, head: str = ""):
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        self.scopes.append(set())

    def close(self, tail: str = "}"):
        self.depth -= 1
        self.scopes.pop()
        self.line(tail)

    def bind(self, var: Var, rng: tuple, ctype: str):
        saved = (self.ranges.get(var), self.var_types.get(var))
        self.ranges[var], self.var_types[var] = rng, ctype
        self._narrow_memo.clear()
        return saved

    def unbind(self, var: Var, saved: tuple):
        for table, old in zip((self.ranges, self.var_types), saved):
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old
        self._narrow_memo.clear()

    # -- the kernel ------------------------------------------------------------------------------

    def run(self) -> str:
        launch, body = self.launch, self.launch.body
        if len(set(map(id, launch.params))) != len(launch.params):
            raise BuildError(f"launch {launch.name!r} lists the same buffer twice in its parameters")
        for b in launch.params:
            self._check_buffer(b)
        fname = sanitize(launch.name)
        self.taken.add(fname)
        written = {s.buffer for s in walk_stmts(body) if isinstance(s, Store)}
        params = []
        for b in launch.params:
            const_ = "" if b in written else "const "
            params.append(f"{const_}{C_TYPES[b.dtype]}* __restrict__ {self.name(b)}")
            self.buffers.add(b)
        shared = []
        for s in walk_stmts(body):
            if isinstance(s, Allocate):
                self._check_buffer(s.buffer)
                if s.buffer.scope == "global":
                    raise BuildError(
                        f"launch {launch.name!r} allocates the global buffer {s.buffer.name!r} inside a kernel; "
                        "global temporaries must be allocated at the root (the runtime passes them in)"
                    )
                if s.buffer.scope == "shared" and s.buffer not in shared:
                    shared.append(s.buffer)
        for b in shared:
            self.name(b)  # named before the body, in this order
            self.buffers.add(b)
        self.emit_stmt(body)
        decls = []  # one declaration, however often (and wherever) the Allocate runs
        for b in shared:
            align = "__align__(16) " if b in self.vector_shared else ""
            decls.append(f"{INDENT}__shared__ {align}{C_TYPES[b.dtype]} {self.name(b)}[{max(1, b.size)}];")
        threads = launch.threads_per_block
        if threads % 32 and any(isinstance(s, ShuffleXor) for s in walk_stmts(body)):
            # the threads of the last warp, which is partial: a shuffle's mask names exactly those
            bx, by, _ = launch.block
            tid = f"(threadIdx.x + {bx} * (threadIdx.y + {by} * threadIdx.z))"
            last = f"{(1 << threads % 32) - 1:#x}u"
            full = f"{tid} / 32 < {threads // 32} ? 0xffffffffu : " if threads > 32 else ""
            decls.append(f"{INDENT}const unsigned mtc_mask = {full}{last};")
        head = [
            f"// {fname}: grid {tuple(launch.grid)} x block {tuple(launch.block)} ({threads} threads), "
            f"{launch.shared_bytes} bytes of shared memory",
            f'extern "C" __global__ void __launch_bounds__({threads}) {fname}({", ".join(params)}) {{',
        ]
        return "\n".join(head + decls + self.lines + ["}"]) + "\n"

    def _check_buffer(self, b):
        if b.dtype not in C_TYPES:
            raise BuildError(f"buffer {b.name!r} has dtype {b.dtype!r}, which the CUDA backend does not support")

    # -- statements ------------------------------------------------------------------------------

    def emit_stmt(self, s):
        method = STMT_EMITTERS.get(type(s))
        if method is None:
            raise BuildError(f"the CUDA backend cannot generate code for statement {type(s).__name__}: {s!r}")
        getattr(self, method)(s)

    def emit_seq(self, s: Seq):
        for c in s.stmts:
            self.emit_stmt(c)

    def emit_barrier(self, s: Barrier):
        self.line("__syncthreads();")

    def emit_prefetch(self, s: Prefetch):
        pass  # a CPU cache hint: GPU kernels stage their tiles in shared memory instead

    def emit_for(self, s: For):
        if not isinstance(s.extent, (int, np.integer)) or isinstance(s.extent, bool) or s.extent < 0:
            raise BuildError(f"loop {s.var.name!r} has extent {s.extent!r}; the CUDA backend needs a constant >= 0")
        if s.kind == "parallel":
            raise BuildError(
                f"loop {s.var.name!r} is parallel, which means nothing inside a GPU kernel; "
                "bind it to blockIdx/threadIdx instead"
            )
        if s.kind not in self.dims and s.kind not in ("serial", "unrolled", "vectorized", "vthread"):
            raise BuildError(f"loop {s.var.name!r} has unknown kind {s.kind!r}")
        if s.extent == 0:
            return
        if s.kind in self.dims:
            return self.emit_bound(s)
        if s.kind == "vectorized" and self.emit_vector(s):
            return
        self.emit_loop(s)

    def emit_bound(self, s: For):
        """Not a loop: the variable is this thread's index, guarded if the loop is shorter. A
        loop of one is the constant 0, so that register arrays it indexes stay in registers."""
        index = f"(int){s.kind}"
        value = "0" if s.extent == 1 else index
        saved = self.bind(s.var, (0, s.extent - 1), "int")
        if s.extent < self.dims[s.kind]:
            self.open(f"if ({index} < {s.extent})")
            self._declare(s.var, value, s.body)
            self.emit_stmt(s.body)
            self.close()
        else:
            block = self.name(s.var) in self.scopes[-1]  # the same variable bound twice here
            if block:
                self.open()
            self._declare(s.var, value, s.body)
            self.emit_stmt(s.body)
            if block:
                self.close()
        self.unbind(s.var, saved)

    def _declare(self, var: Var, init: str, body):
        if _uses(body, var):
            name = self.name(var)
            self.line(f"const {self.var_types[var]} {name} = {init};")
            self.scopes[-1].add(name)

    def emit_shuffle(self, s: ShuffleXor):
        acc = f"{self.name(s.buffer)}[0]"
        mask = "mtc_mask" if self.launch.threads_per_block % 32 else "0xffffffffu"
        other = f"__shfl_xor_sync({mask}, {acc}, {s.offset}, {s.width})"
        if s.combiner == "sum":
            value = f"{acc} + {other}" if dtypes.is_float(s.buffer.dtype) else f"mtc_add({acc}, {other})"
        else:
            value = f"mtc_{s.combiner}({acc}, {other})"
        self.line(f"{acc} = {value};")

    def emit_loop(self, s: For):
        ctype = "int" if s.extent - 1 <= INT32[1] else "long long"
        saved = self.bind(s.var, (0, s.extent - 1), ctype)
        if s.extent == 1:
            used = _uses(s.body, s.var)
            if used:
                self.open()
                self._declare(s.var, "0", s.body)
            self.emit_stmt(s.body)
            if used:
                self.close()
        else:
            if s.kind in ("unrolled", "vthread", "vectorized"):
                self.line("#pragma unroll" if s.extent <= MAX_UNROLL else "#pragma unroll 8")
            v = self.name(s.var)
            n = int_literal(s.extent, ctype).text
            self.open(f"for ({ctype} {v} = 0; {v} < {n}; ++{v})")
            self.emit_stmt(s.body)
            self.close()
        self.unbind(s.var, saved)

    def emit_store(self, s: Store):
        ref = self.element(s.buffer, s.indices, "store to")
        value = self.convert(self.ev(s.value), C_TYPES[s.buffer.dtype])
        self.line(f"{ref} = {value.text};")

    def emit_if(self, s: IfThenElse):
        if isinstance(s.cond, Const):
            branch = s.then if s.cond.value else s.orelse
            if branch is not None:
                self.emit_stmt(branch)
            return
        if s.cond.dtype != dtypes.BOOL:
            raise BuildError(f"an if condition has dtype {s.cond.dtype}, expected bool")
        self.open(f"if ({self.ev(s.cond).text})")
        self.emit_stmt(s.then)
        if s.orelse is not None:
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
            self.scopes[-1] = set()
            self.emit_stmt(s.orelse)
        self.close()

    def emit_allocate(self, s: Allocate):
        b = s.buffer
        if b.scope == "shared":  # declared once at the top of the kernel
            return self.emit_stmt(s.body)
        self.open()
        self.line(f"{C_TYPES[b.dtype]} {self.name(b)}[{max(1, b.size)}];  // local {b.dtype}{list(b.shape)}")
        self.buffers.add(b)
        self.emit_stmt(s.body)
        self.buffers.discard(b)
        self.close()


def _uses(stmt, var: Var) -> bool:
    """Whether `var` occurs anywhere in `stmt`."""
    return any(n is var for st in walk_stmts(stmt) for e in stmt_exprs(st) for n in walk(e))
