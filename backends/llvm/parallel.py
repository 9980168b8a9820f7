"""Parallel loops: outlining into task functions run by the runtime's thread pool.

`for v in parallel(E): body` becomes, in the enclosing function,

    closure = [captured pointers and variables]          ; i64-sized slots on the stack
    n = min(E, minitc_num_threads())
    minitc_parallel_launch(@K_par0, closure, n)         ; returns when every task is done

and two new functions:

    internal void @K_par0(ptr closure, i64 t, i64 n)     ; unpacks the closure, takes the chunk
        call @K_par0_body(ptrs..., vars..., t*E/n, (t+1)*E/n)
    internal alwaysinline void @K_par0_body(ptr noalias %b0, ..., i64 %v0, ..., i64 %start, i64 %end)
        for v in [start, end): body

The pointers loaded from the closure carry no aliasing facts of their own; passing them to a body
function whose pointer parameters are `noalias` restores them: when LLVM inlines the body (it is
`alwaysinline`) it turns those attributes into scoped alias metadata, so loops inside a parallel
loop vectorize and keep loads in registers as they would in the entry function.

A parallel loop inside another parallel loop (or of extent 1) runs serially in its task.
"""

from __future__ import annotations

from dataclasses import replace

from minitc.backends.llvm.builder import Function, Value
from minitc.backends.llvm.vector import nodes
from minitc.expr import Var
from minitc.ir import Allocate, For, Load, Store, stmt_exprs, walk_stmts

RUNTIME_DECLS = {
    "minitc_parallel_launch": "declare void @minitc_parallel_launch(ptr, ptr, i64)",
    "minitc_num_threads": "declare i64 @minitc_num_threads()",
}


class ParallelEmitter:
    """Mixin of `Codegen`."""

    def captures(self, s: For):
        """(vars, buffers) the body of parallel loop `s` needs from outside, in first-use order.
        Variables bound to constants (unrolled loops) are not captured: they stay constants."""
        bound_inside, allocated_inside = {s.var}, set()
        for st in walk_stmts(s.body):
            if isinstance(st, For):
                bound_inside.add(st.var)
            elif isinstance(st, Allocate):
                allocated_inside.add(st.buffer)
        variables, buffers = {}, {}
        for st in walk_stmts(s.body):
            if isinstance(st, Store) and st.buffer not in allocated_inside:
                buffers.setdefault(st.buffer, None)
            for e in stmt_exprs(st):
                for n in nodes(e):
                    if isinstance(n, Load) and n.buffer not in allocated_inside:
                        buffers.setdefault(n.buffer, None)
                    elif isinstance(n, Var) and n not in bound_inside:
                        value = self.emit_var(n)  # raises if unbound
                        if not value.is_const:
                            variables.setdefault(n, value)
        for buf in buffers:
            self.pointer(buf)  # raises if not a parameter or outer allocation
        return list(variables.items()), list(buffers)

    def emit_parallel(self, s: For):
        if s.extent <= 1 or self.in_parallel or self.lanes:
            if s.extent > 1:
                self.notes.append(f"nested parallel loop {s.var.name!r} runs serially inside its task")
            return self.emit_serial(s)
        trip, body = self.runtime_trip(s)  # the threads share min(extent, X) iterations, not extent
        if trip is not None:
            s = replace(s, body=body)
        variables, buffers = self.captures(s)
        task_name = f"{self.func_name}_par{self.module.par_count}"
        body_name = f"{task_name}_body"
        self.module.par_count += 1
        for name, decl in RUNTIME_DECLS.items():
            self.module.declare(name, decl)
        slots = [("ptr", self.ptrs[b]) for b in buffers] + [(v.ty, v.ref) for _, v in variables]
        total = str(s.extent)
        if trip is not None:
            slots.append(("i64", trip.ref))

        # caller: pack the closure, pick the task count, launch
        fn = self.fn
        closure = "null"
        if slots:
            closure = fn.alloca(f"[{len(slots)} x i64]", 8, "closure")
            for k, (ty, ref) in enumerate(slots):
                slot = fn.assign(f"getelementptr inbounds [{len(slots)} x i64], ptr {closure}, i64 0, i64 {k}", "slot")
                fn.emit(f"store {ty} {ref}, ptr {slot}, align 8")
        nt = fn.assign("call i64 @minitc_num_threads()", "nthreads")
        few = fn.assign(f"icmp slt i64 {nt}, {trip.ref if trip else total}", "few")
        n = fn.assign(f"select i1 {few}, i64 {nt}, i64 {trip.ref if trip else total}", "ntasks")
        none = fn.assign(f"icmp slt i64 {n}, 1", "none")
        n = fn.assign(f"select i1 {none}, i64 1, i64 {n}", "ntasks")
        fn.emit(f"call void @minitc_parallel_launch(ptr @{task_name}, ptr {closure}, i64 {n})")

        # task: unpack the closure, compute the chunk, call the body
        task = Function(f"define internal void @{task_name}(ptr %closure, i64 %task, i64 %ntasks) #0")
        args = []
        for k, (ty, _) in enumerate(slots):
            slot = task.assign(f"getelementptr inbounds [{len(slots)} x i64], ptr %closure, i64 0, i64 {k}", "slot")
            args.append(f"{ty} " + task.assign(f"load {ty}, ptr {slot}, align 8", "cap"))
        if trip is not None:  # the trip count's slot is the last: not an argument of the body
            total = args.pop().split()[-1]
        lo = task.assign(f"mul nuw nsw i64 %task, {total}", "lo")
        start = task.assign(f"udiv i64 {lo}, %ntasks", "start")
        t1 = task.assign("add nuw nsw i64 %task, 1", "t1")
        hi = task.assign(f"mul nuw nsw i64 {t1}, {total}", "hi")
        end = task.assign(f"udiv i64 {hi}, %ntasks", "end")
        args += [f"i64 {start}", f"i64 {end}"]
        task.emit(f"call void @{body_name}({', '.join(args)})")

        # body: a fresh function context whose parameters stand for the captured values
        params = [f"ptr noalias nocapture %b{k}" for k in range(len(buffers))]
        params += [f"{v.ty} %v{k}" for k, (_, v) in enumerate(variables)]
        params += ["i64 %start", "i64 %end"]
        body = Function(f"define internal void @{body_name}({', '.join(params)}) #1")
        saved = (self.fn, self.env, self.ptrs, self.in_parallel)
        self.fn = body
        self.env = {var: v for var, v in self.env.items() if v.is_const}
        self.env.update({var: Value(f"%v{k}", v.dtype, v.lanes) for k, (var, v) in enumerate(variables)})
        self.ptrs = {b: f"%b{k}" for k, b in enumerate(buffers)}
        self.in_parallel = True
        try:
            self.counted_loop(s.var, Value("%start", "int64"), Value("%end", "int64"), (0, s.extent - 1), s.body)
            self.module.functions += [task.text(), body.text()]
        finally:
            self.fn, self.env, self.ptrs, self.in_parallel = saved
