"""Double buffering of shared-memory tiles (software pipelining), and register staging of
their fills. A GPU lowering pass (`lower_state` runs it after `sink_guards`).

A shared tile computed at a serial loop lowers to

    for ko in range(n):
        barrier(); S[...] = G[..ko..]; barrier()     # the fill: every thread copies a few
        compute(S)

With two buffers per tile the next step's fill overlaps this step's compute, and one barrier
per step suffices (the fill writes the buffer the previous step read, which everyone finished
before the last barrier):

    barrier(); R = G[..0..]; S[0] = R; barrier()     # prologue
    for ko in range(n):
        if ko + 1 < n: R = G[..ko + 1..]            # global loads in flight during the compute
        compute(S[ko % 2])
        if ko + 1 < n: S[(ko + 1) % 2] = R
        barrier()

`R` is per-thread registers (`stage_fill`): each store of the fill becomes a load into a
register array and a store from it, with the fill's per-thread loops unrolled so that the
array stays in registers. A `vectorized` loop of the fill loads float4 into the registers even
where its shared stores are not contiguous (a transposing fill), so fills are staged this way
also when they are not double-buffered. Double buffering applies when n >= 2, the launch's
shared memory with the tiles doubled fits in `max_shared_bytes`, and every fill copies vectors
(a vectorized loop) through at most MAX_STAGED_WORDS registers: the GEMM template's fills, not
the conv template's scalar ones, which ran slower doubled. Setting MINITC_GPU_DOUBLE_BUFFER=0
turns double buffering off (for probing what it is worth; experiments/gpu_gemm_probe.py).
"""

from __future__ import annotations

from dataclasses import replace

from minitc import arith, ir
from minitc.expr import Var, binary, compare, const, transform, walk
from minitc.lowering.gpu import GpuLimits, map_launches
from minitc.lowering.probes import switch_on

MAX_STAGED_WORDS = 64  # registers per thread a staged fill may take


def enabled() -> bool:
    return switch_on("MINITC_GPU_DOUBLE_BUFFER")


def double_buffer(body: ir.Stmt, max_shared_bytes: int = GpuLimits().max_shared_bytes) -> ir.Stmt:
    """Pipeline every `for ko: barrier; fills; barrier; compute` loop of a GPU-lowered body
    where legal (module docstring); each root part (one launch) has its own shared budget."""
    return map_launches(body, lambda part: _launch(part, max_shared_bytes))


def _launch(part: ir.Stmt, limit: int) -> ir.Stmt:
    used = [sum(b.nbytes for b in _shared_buffers(part))]

    def fn(node):
        if not isinstance(node, ir.For):
            return None
        match = _match(node)
        if match is None:
            return None
        shared, fills, compute = match
        extra = sum(b.nbytes for b in shared)
        # a fill with a vectorized loop, staged through registers (None: not staged)
        staged = [stage_fill(f) if _copies_vectors(f) else None for f in fills]
        if node.extent >= 2 and enabled() and used[0] + extra <= limit and None not in staged:
            used[0] += extra
            return _pipeline(node, shared, staged, compute)
        if all(st is None for st in staged):
            return None
        in_place = [f if st is None else _wrap(st[2], ir.seq(st[0], _fresh(st[1]))) for f, st in zip(fills, staged)]
        inner = ir.seq(ir.Barrier(), *in_place, ir.Barrier(), *compute)
        for buf in reversed(shared):
            inner = ir.Allocate(buf, inner)
        return replace(node, body=inner)

    return ir.map_stmt(part, fn)


def _shared_buffers(s: ir.Stmt) -> list:
    found = []
    for node in ir.walk_stmts(s):
        if isinstance(node, ir.Allocate) and node.buffer.scope == "shared" and node.buffer not in found:
            found.append(node.buffer)
    return found


def _match(loop: ir.For):
    """(shared buffers, fills, compute) of a serial loop whose body allocates shared tiles,
    fills them from memory the compute does not write, then computes from them; else None."""
    if loop.kind != "serial":
        return None
    shared, body = [], loop.body
    while isinstance(body, ir.Allocate) and body.buffer.scope == "shared":
        shared.append(body.buffer)
        body = body.body
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    barriers = [n for n, s in enumerate(stmts) if isinstance(s, ir.Barrier)]
    if not shared or not barriers:
        return None
    fills = [s for s in stmts[: barriers[-1]] if not isinstance(s, ir.Barrier)]
    compute = list(stmts[barriers[-1] + 1 :])
    fill_stores = {b for f in fills for b in _stored(f)}
    compute_stores = {b for c in compute for b in _stored(c)}
    if not fills or fill_stores != set(shared) or compute_stores & set(shared):
        return None
    if any(_has_barrier(c) for c in compute) or any(_has_barrier(f) for f in fills):
        return None
    for f in fills:
        for node in ir.walk_stmts(f):
            if isinstance(node, ir.Allocate):
                return None
            for e in ir.stmt_exprs(node):
                for n in walk(e):
                    if isinstance(n, ir.Load) and (n.buffer.scope != "global" or n.buffer in compute_stores):
                        return None
    return shared, fills, compute


def _pipeline(loop: ir.For, shared: list, staged: list, compute: list) -> ir.Stmt:
    """The loop double-buffered (module docstring); `staged`: each fill's stage_fill parts."""
    ko, n = loop.var, loop.extent
    doubled = {b: ir.Buffer(b.name, (2,) + b.shape, b.dtype, "shared") for b in shared}
    nxt = binary("add", ko, const(1, ko.dtype))
    last = compare("lt", nxt, const(n, ko.dtype))
    this_slot, next_slot = binary("mod", ko, const(2, ko.dtype)), binary("mod", nxt, const(2, ko.dtype))
    prologue, loads, stores, regs = [], [], [], []
    for load, store, bufs in staged:
        prologue.append(
            _wrap(bufs, ir.seq(_subst(load, {ko: const(0, ko.dtype)}), _fresh(_first_store(store, doubled, ko))))
        )
        loads.append(_fresh(_subst(load, {ko: nxt})))
        stores.append(_fresh(_into(_subst(store, {ko: nxt}), doubled, next_slot)))
        regs.extend(bufs)
    reads = [_read_from(c, doubled, this_slot) for c in compute]
    step = ir.seq(ir.IfThenElse(last, ir.seq(*loads)), *reads, ir.IfThenElse(last, ir.seq(*stores)), ir.Barrier())
    body = ir.seq(
        ir.Barrier(),
        *(_fresh(p) for p in prologue),
        ir.Barrier(),
        ir.For(ko, n, loop.kind, _wrap(regs, step), loop.prefetch),
    )
    return _wrap([doubled[b] for b in shared], body)


def _first_store(store: ir.Stmt, doubled: dict, ko: Var) -> ir.Stmt:
    return _into(_subst(store, {ko: const(0, ko.dtype)}), doubled, const(0, ko.dtype))


def _copies_vectors(fill: ir.Stmt) -> bool:
    """Whether a fill has a vectorized loop: only such fills are staged through registers (float4
    global loads even where the shared stores are scalar) and double-buffered (on an H100 the
    conv template's scalar fills, doubled, ran 0.56 ms instead of 0.50)."""
    return any(isinstance(s, ir.For) and s.kind == "vectorized" for s in ir.walk_stmts(fill))


def stage_fill(fill: ir.Stmt):
    """(load part, store part, register buffers) of a fill: each store `S[idx] = v` under
    per-thread loops becomes `R[r] = v` in the load part and `S[idx] = R[r]` in the store part,
    `r` the flat index of those loops (unrolled, so R stays in registers). None when it would
    take more than MAX_STAGED_WORDS registers or the fill has conditions that read memory."""
    bufs = []

    def split(s, loops):
        if isinstance(s, ir.For):
            inner = loops if s.kind in ir.GPU_TAGS else loops + [s]
            parts = split(s.body, inner)
            if parts is None:
                return None
            if s.kind in ir.GPU_TAGS:
                return tuple(replace(s, body=p) for p in parts)
            load_kind = "vectorized" if s.kind == "vectorized" and isinstance(s.body, ir.Store) else "unrolled"
            store_kind = "vectorized" if load_kind == "vectorized" and _contiguous(s.body, s.var) else "unrolled"
            return ir.For(s.var, s.extent, load_kind, parts[0]), ir.For(s.var, s.extent, store_kind, parts[1])
        if isinstance(s, ir.Seq):
            parts = [split(c, loops) for c in s.stmts]
            if any(p is None for p in parts):
                return None
            return ir.seq(*(p[0] for p in parts)), ir.seq(*(p[1] for p in parts))
        if isinstance(s, ir.IfThenElse) and s.orelse is None:
            if any(isinstance(n, ir.Load) for n in walk(s.cond)):
                return None
            parts = split(s.then, loops)
            return None if parts is None else (ir.IfThenElse(s.cond, parts[0]), ir.IfThenElse(s.cond, parts[1]))
        if isinstance(s, ir.Store):
            size, flat = 1, const(0, "int64")
            for lp in reversed(loops):
                flat = binary("add", flat, binary("mul", lp.var, const(size, lp.var.dtype)))
                size *= lp.extent
            reg = ir.Buffer(f"{s.buffer.name}_reg", (size,), s.buffer.dtype, "local")
            bufs.append(reg)
            return ir.Store(reg, (flat,), s.value), ir.Store(s.buffer, s.indices, ir.Load(reg, (flat,)))
        return None

    parts = split(fill, [])
    if parts is None or sum(b.size for b in bufs) > MAX_STAGED_WORDS:
        return None
    return parts[0], parts[1], bufs


def _contiguous(store: ir.Store, var: Var) -> bool:
    """Whether `var` steps the store along the last dimension only, by one element."""
    *rest, last = store.indices
    form = arith.affine(last)
    uses = any(n is var for i in rest for n in walk(i))
    return form is not None and form.coef.get(var) == 1 and not uses


def _wrap(bufs: list, body: ir.Stmt) -> ir.Stmt:
    for b in reversed(bufs):
        body = ir.Allocate(b, body)
    return body


def _stored(s: ir.Stmt) -> set:
    return {n.buffer for n in ir.walk_stmts(s) if isinstance(n, ir.Store)}


def _has_barrier(s: ir.Stmt) -> bool:
    return any(isinstance(n, ir.Barrier) for n in ir.walk_stmts(s))


def _map_exprs(s: ir.Stmt, expr_fn, store_fn=None) -> ir.Stmt:
    """`s` with `expr_fn` applied to every expression node (a replacement or None, as in
    `transform`; a Load after its indices) and `store_fn(store, indices, value)` rebuilding
    stores (default: the same buffer)."""

    def ex(e):
        def fn(node):
            if isinstance(node, ir.Load):
                load = ir.Load(node.buffer, tuple(ex(i) for i in node.indices))
                new = expr_fn(load)
                return load if new is None else new
            return expr_fn(node)

        return transform(e, fn)

    def fn(node):
        if isinstance(node, ir.Store):
            indices, value = tuple(ex(i) for i in node.indices), ex(node.value)
            return store_fn(node, indices, value) if store_fn else ir.Store(node.buffer, indices, value)
        if isinstance(node, ir.IfThenElse):
            return ir.IfThenElse(ex(node.cond), node.then, node.orelse)
        return None

    return ir.map_stmt(s, fn)


def _subst(s: ir.Stmt, mapping: dict) -> ir.Stmt:
    return _map_exprs(s, lambda node: mapping.get(node) if isinstance(node, Var) else None)


def _into(s: ir.Stmt, doubled: dict, slot) -> ir.Stmt:
    """Stores to a doubled tile go to its buffer `slot`."""

    def store_fn(node, indices, value):
        if node.buffer in doubled:
            return ir.Store(doubled[node.buffer], (slot,) + indices, value)
        return ir.Store(node.buffer, indices, value)

    return _map_exprs(s, lambda node: None, store_fn)


def _read_from(s: ir.Stmt, doubled: dict, slot) -> ir.Stmt:
    """Loads of a doubled tile read its buffer `slot`."""

    def fn(node):
        if isinstance(node, ir.Load) and node.buffer in doubled:
            return ir.Load(doubled[node.buffer], (slot,) + tuple(node.indices))
        return None

    return _map_exprs(s, fn)


def _fresh(s: ir.Stmt) -> ir.Stmt:
    """`s` with new variables for the loops it defines (a copy of a nest next to the original)."""
    mapping = {n.var: Var(n.var.name, n.var.dtype) for n in ir.walk_stmts(s) if isinstance(n, ir.For)}

    def fn(node):
        if isinstance(node, ir.For) and node.var in mapping:
            return replace(node, var=mapping[node.var])
        return None

    return ir.map_stmt(_subst(s, mapping), fn)
