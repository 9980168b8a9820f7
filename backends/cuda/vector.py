"""Vectorized loops as CUDA vector accesses: the `VectorWriter` mixin of codegen.py's
`_LaunchWriter` and `plan_vector`, the pure test of whether a loop qualifies.

A loop of kind `vectorized` (from `s.vectorize(loop)`) becomes one float2/float4/double2 store,
and a vector load per qualifying load, when all of this holds (`plan_vector`):

- its extent is 2 or 4 over float32 (float2, float4), or 2 over float64 (double2);
- its body is a single Store, with no guard, into a global or shared buffer, or into a local
  (register) array when some load qualifies below: the lanes then stay scalar stores (a vector
  access through a pointer would push the array out of registers) fed by vector loads, as in
  a GEMM's register tile reading a row of its shared-memory tile;
- the store is contiguous and provably aligned: its row-major offset, in the affine form of
  minitc.arith, has coefficient exactly 1 for the loop variable, no other term mentions it, and
  every other coefficient and the constant are multiples of the extent. CuPy and torch
  allocations are 256-byte aligned (a view at an odd offset is not: the runtime passes
  pointers as given) and shared arrays accessed this way are declared `__align__(16)`, so
  the address is a multiple of the vector size;
- no load sits where C evaluates it only conditionally (a select branch, the right side of
  && or ||): a vector load would read all lanes, maybe out of bounds (padding);
- the stored buffer is read only at the stored element (lane by lane the loop reads nothing
  another lane wrote).

Loads of the same dtype from global or shared buffers that are contiguous and aligned in the
same sense become `const float4 X_v = *reinterpret_cast<const float4*>(&X[base]);` whose
components (.x .y .z .w) the lanes use; every other load is evaluated per lane with the loop
variable replaced by the lane number (`X[i * 64 + 3]`; a broadcast when it does not depend on
the loop). Anything else is rendered as the plain loop, exactly as before.

    for (int j_i = 0; j_i < 4; ++j_i) {
        Y[j_o * 4 + j_i] = X[j_o * 4 + j_i] * B[0];
    }
becomes
    {
        const float4 X_v = *reinterpret_cast<const float4*>(&X[j_o * 4]);
        *reinterpret_cast<float4*>(&Y[j_o * 4]) = make_float4(X_v.x * B[0], X_v.y * B[0], X_v.z * B[0], X_v.w * B[0]);
    }
"""

from __future__ import annotations

from dataclasses import dataclass

from minitc import arith
from minitc.backends.cuda.exprs import C_TYPES
from minitc.expr import Binary, Const, Expr, Select, Var, const, transform, walk
from minitc.ir import For, Load, Store

VECTOR_TYPES = {("float32", 2): "float2", ("float32", 4): "float4", ("float64", 2): "double2"}
VECTOR_SCOPES = ("global", "shared")
COMPONENTS = "xyzw"


@dataclass
class VectorPlan:
    """How a vectorized loop is emitted: the vector type, the store's offset at lane 0 (None
    for a local array, stored lane by lane), and the loads read as vectors (`id(load)` ->
    (load, its offset at lane 0))."""

    vtype: str
    store_base: Expr | None
    loads: dict


def plan_vector(loop: For, flat_offset):
    """The `VectorPlan` of `loop`, or None when it must stay a plain loop (module docstring).
    `flat_offset(buffer, indices, what)` is the writer's row-major offset (exprs.py)."""
    body, lanes = loop.body, loop.extent
    if loop.kind != "vectorized" or not isinstance(body, Store):
        return None
    vtype = VECTOR_TYPES.get((body.buffer.dtype, lanes))
    local = body.buffer.scope == "local"
    if vtype is None or not (local or body.buffer.scope in VECTOR_SCOPES) or _conditional_loads(body.value):
        return None
    if any(isinstance(n, Load) and n.buffer is body.buffer for i in body.indices for n in walk(i)):
        return None  # the address itself reads the stored buffer
    store_flat = flat_offset(body.buffer, body.indices, "store to")
    store_base = None  # a local array keeps one scalar store per lane
    if not local:
        store_base = contiguous_base(store_flat, loop.var, lanes)
        if store_base is None:
            return None
    loads = {}
    for n in walk(body.value):
        if not isinstance(n, Load):
            continue
        flat = flat_offset(n.buffer, n.indices, "load from")
        if n.buffer is body.buffer and not _same_offset(flat, store_flat):
            return None  # a lane would read what another lane writes
        if n.buffer.dtype == body.buffer.dtype and n.buffer.scope in VECTOR_SCOPES:
            base = contiguous_base(flat, loop.var, lanes)
            if base is not None:
                loads[id(n)] = (n, base)
    if local and not loads:
        return None  # nothing to gain: the lanes are scalar register updates either way
    return VectorPlan(vtype, store_base, loads)


def contiguous_base(flat, var: Var, lanes: int):
    """The offset at `var` = 0 if `flat` is `base + var` with `base` a provable multiple of
    `lanes` (every coefficient but var's and the constant are), else None."""
    form = arith.affine(flat) if flat is not None else None
    if form is None or form.coef.get(var) != 1 or form.offset % lanes:
        return None
    for term, c in form.coef.items():
        if term is var:
            continue
        if c % lanes or (not isinstance(term, Var) and any(n is var for n in walk(term))):
            return None
    rest = arith.Affine({t: c for t, c in form.coef.items() if t is not var}, form.offset)
    return rest.to_expr([n for n in walk(flat) if isinstance(n, Var)])


def _conditional_loads(e) -> bool:
    """Whether a load in `e` runs only under a condition (select branches, right of && ||)."""
    for n in walk(e):
        if isinstance(n, Select):
            guarded = (n.t, n.f)
        elif isinstance(n, Binary) and n.op in ("and", "or"):
            guarded = (n.b,)
        else:
            continue
        if any(isinstance(m, Load) for g in guarded for m in walk(g)):
            return True
    return False


def _same_offset(a, b) -> bool:
    fa, fb = arith.affine(a), arith.affine(b)
    if fa is None or fb is None or fa.offset != fb.offset or len(fa.coef) != len(fb.coef):
        return False
    keyed = {_key(t): c for t, c in fb.coef.items()}
    return all(keyed.get(_key(t)) == c for t, c in fa.coef.items())


def _key(e):
    """A structural key: equal keys, the same value."""
    if isinstance(e, Var):
        return ("var", id(e))
    if isinstance(e, Const):
        return ("const", e.dtype, repr(e.value))
    own = id(e.buffer) if isinstance(e, Load) else getattr(e, "op", None) or getattr(e, "name", None)
    return (type(e).__name__, own, e.dtype, tuple(_key(c) for c in e.children()))


class VectorWriter:
    """Mixin of codegen.py's `_LaunchWriter` (with `ExprWriter`): needs its names, bind/unbind,
    line/open/close, flat_offset/offset_text, ev/convert, and `vector_shared`, the shared
    buffers that need `__align__(16)`."""

    def emit_vector(self, s: For) -> bool:
        """Emit `s` with vector accesses if it qualifies (see `plan_vector`); False if not."""
        plan = plan_vector(s, self.flat_offset)
        if plan is None:
            return False
        store, n = s.body, s.extent
        decls, temps, lanes = [], {}, {}  # lanes: id(load) -> a Var per lane naming `temp.x`...
        for key, (load, base) in plan.loads.items():
            text = self.offset_text(base)
            temp = temps.get((load.buffer, text))
            if temp is None:  # the same vector read twice is loaded once
                temp = temps[(load.buffer, text)] = self.name(Var(f"{load.buffer.name}_v"))
                address = f"&{self.name(load.buffer)}[{text}]"
                decls.append(f"const {plan.vtype} {temp} = *reinterpret_cast<const {plan.vtype}*>({address});")
            lanes[key] = [self._component(f"{temp}.{c}", store.buffer.dtype) for c in COMPONENTS[:n]]
        for b in [store.buffer] + [load.buffer for load, _ in plan.loads.values()]:
            if b.scope == "shared":
                self.vector_shared.add(b)
        values = [self._lane_value(s, lane, lanes) for lane in range(n)]
        if decls:
            self.open()
            for d in decls:
                self.line(d)
        if store.buffer.scope == "local":  # a register array: one scalar store per lane
            for lane, value in enumerate(values):
                number = const(lane, s.var.dtype)
                indices = [transform(i, lambda node: number if node is s.var else None) for i in store.indices]
                offset = self.offset_text(self.flat_offset(store.buffer, indices, "store to"))
                self.line(f"{self.name(store.buffer)}[{offset}] = {value};")
        else:
            target = (
                f"*reinterpret_cast<{plan.vtype}*>(&{self.name(store.buffer)}[{self.offset_text(plan.store_base)}])"
            )
            self.line(f"{target} = make_{plan.vtype}({', '.join(values)});")
        if decls:
            self.close()
        return True

    def _component(self, text: str, dtype: str) -> Var:
        """A variable of `dtype` that renders as `text` (a vector component, a lane number)."""
        v = Var(text, dtype)
        self.names[v], self.var_types[v] = text, "int" if dtype == "int64" else C_TYPES[dtype]
        return v

    def _lane_value(self, s: For, lane: int, lanes: dict) -> str:
        """The stored value of one lane: vector loads become components; the loop variable
        becomes the lane number, folded into load offsets and a literal elsewhere (so the
        arithmetic is C's, as in the loop)."""
        number, literal = const(lane, s.var.dtype), self._component(str(lane), s.var.dtype)

        def rewrite(index: bool):
            def fn(node):
                if id(node) in lanes:
                    return lanes[id(node)][lane]
                if isinstance(node, Load):
                    return Load(node.buffer, [transform(i, rewrite(True)) for i in node.indices])
                if node is s.var:
                    return number if index else literal
                return None

            return fn

        saved = self.bind(literal, (lane, lane), "int")
        try:
            value = transform(s.body.value, rewrite(False))
            return self.convert(self.ev(value), C_TYPES[s.body.buffer.dtype]).text
        finally:
            self.unbind(literal, saved)
