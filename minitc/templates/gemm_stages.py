"""What the GEMM templates (gemm.py) read off the kernel before scheduling it: the product
stage's operands (which read is A, broadcast per row, and which is B, loaded as vectors along
j), its shape, a B stored in blocks of columns, whether a hand-written `tc.compute` is such a
product; the tile sizes those and the target call for (the templates' @defaults, and the
tuner's @choices); and the elementwise stages around the product (inlined operands, the
epilogue found, inlined, or cached under).

gemm.py holds the schedule these feed. The conv, winograd, gemv and GPU templates use the
epilogue helpers too, through gemm.py, which re-exports them.
"""

from __future__ import annotations

import minitc.templates.gemm_blocking as blocking
import minitc.templates.gemm_prefetch as prefetch
from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.expr import Binary, Const
from minitc.templates.contraction import reductions_under

# -- the product's operands --------------------------------------------------------------------


def gemm_operands(s, acc: str) -> tuple:
    """(A-role read, B-role read) of the product stage `acc`: the B operand is the one indexed
    by the last output axis (it is loaded as vectors along j), A the one indexed by the row
    axis (broadcast per row). Each is (stage name, dim of k, dim of the i or j axis)."""
    st = s.state.stage(acc)
    i_axis, j_axis = st.axes[-2], st.axes[-1]
    (k_axis,) = st.reduce_axes
    roles = {}
    for r in st.reads():
        dims = {}
        for d, index in enumerate(r.indices):
            for ax in (i_axis, j_axis, k_axis):
                if index is ax:
                    dims[ax] = d
            if _block_of(index, j_axis, "mod"):  # W[j // B, k, j % B]: j's lanes are the last dim
                dims[j_axis] = d
        if k_axis not in dims:
            continue
        if j_axis in dims:
            roles["b"] = (r.stage, dims[k_axis], dims[j_axis])
        elif i_axis in dims:
            roles["a"] = (r.stage, dims[k_axis], dims[i_axis])
    if "a" not in roles or "b" not in roles:
        raise ScheduleError(f"gemm template: stage {acc} is not a product of an [.., M, K] and a [.., K, N] operand")
    return roles["a"], roles["b"]


def is_contraction(s, stage: str) -> bool:
    """Whether `stage` is a matrix product written by hand: a sum over one reduction axis of the
    product of two reads, indexed like a GEMM's A ([.., M, K] or [.., K, M]) and B ([.., K, N]
    or [.., N, K]) with at least two output axes. Such a `tc.compute` gets the matmul template
    (`template_tag`): its steps only reorganise the loops, so they are correct on any stage
    that gemm_operands can read."""
    from minitc.te import Reduce

    st = s.state.stage(stage)
    body = st.body
    if not isinstance(body, Reduce) or body.combiner != "sum" or len(body.axes) != 1 or len(st.axes) < 2:
        return False
    if not (isinstance(body.source, Binary) and body.source.op == "mul") or len(st.reads()) != 2:
        return False
    try:
        gemm_operands(s, stage)
    except ScheduleError:
        return False
    return True


def contraction_under(s, out: str) -> str | None:
    """The matrix product written by hand (is_contraction) under the elementwise epilogue `out`
    (bias, activation, a residual add: elementwise stages only), or None."""
    return next((name for name in reductions_under(s, out) if is_contraction(s, name)), None)


def _block_of(index, axis, op: str) -> int:
    """B when `index` is `axis // B` or `axis % B` (as `op` says), else 0."""
    if isinstance(index, Binary) and index.op == op and index.a is axis and isinstance(index.b, Const):
        return int(index.b.value)
    return 0


def gemm_shape(s, acc: str) -> tuple:
    """(batch, M, N, K) of the product stage `acc`, the batch dims multiplied together."""
    st = s.state.stage(acc)
    M, N = st.shape[-2:]
    (k,) = st.reduce_axes
    batch = 1
    for n in st.shape[:-2]:
        batch *= n
    return batch, M, N, k.extent


def weight_block(s, acc: str) -> int:
    """The block of a B operand stored in blocks of output columns ([N/B, K, B], read as
    B[j // B, k, j % B]: dense's weight_block), else 0."""
    st = s.state.stage(acc)
    for r in st.reads():
        blocks = [_block_of(index, st.axes[-1], "floordiv") for index in r.indices]
        if any(blocks):
            return max(blocks)
    return 0


# -- tile sizes (gemm_blocking.pick_tiles; the prefetch slot: gemm_prefetch.py) -----------------


def gemm_defaults(s, acc: str, target) -> dict:
    """The template parameters for the product stage `acc` on `target` (the @defaults)."""
    batch, M, N, K = gemm_shape(s, acc)
    p = blocking.pick_tiles(M, N, K, target, s.state.stage(acc).dtype, batch)
    (_, a_k, a_i), (_, b_k, b_j) = gemm_operands(s, acc)
    # a panel read by one row tile is not worth copying, unless B must be transposed
    p["pack_b"] = (M > p["mr"] or b_k > b_j) and not weight_block(s, acc)
    p["pack_a"] = a_k < a_i and N > p["nc"] and _a_sliver_in_one_set(s, acc, target)
    p["mc"] = 0  # rows of A not blocked (the space offers blocks from the L2: gemm_choices)
    p["parallel"] = "auto"
    if prefetch.offered(target.hardware):
        p["l2"] = 0  # off unless measured better (docs/hardware.md)
    return p


def _a_sliver_in_one_set(s, acc: str, target) -> bool:
    """For an A stored [.., K, M]: whether its k steps (a row apart) all map to one L1 set. Read
    in place, A is k-major already, the mr elements of a k step side by side, as BLIS packs
    it; only when its rows are a multiple of the L1's way apart (M = 1024 fp32: 4 KiB) does
    the sliver evict itself, and a transposed copy pays (Intel Xeon, 2 threads: Aᵀ·B in place
    1.30x, 1.14x and 1.06x the copy at 384, 512 and 768; 0.73x at 1024)."""
    (a_name, a_k, _), _ = gemm_operands(s, acc)
    shape = s.state.stage(a_name).shape
    row = 1
    for n in shape[a_k + 1 :]:
        row *= n
    return blocking.one_l1_set(target.hardware, row * dtypes.bits(s.state.stage(a_name).dtype) // 8)


def gemm_choices(s, acc: str, target) -> dict:
    """The tuner's candidates from the analytical model: every register tile that fits the
    hardware (rows, and columns as whole vectors of the target's width), the panel widths of
    the default tile, and the k blocks of both orders (BLIS's kc from L1, minitc's from A's
    sliver) with the mc that goes with BLIS's."""
    batch, M, N, K = gemm_shape(s, acc)
    dtype = s.state.stage(acc).dtype
    hw, vec, esize = target.hardware, target.lanes(dtype), 8 if dtype in ("float64", "int64") else 4
    p = blocking.pick_tiles(M, N, K, target, dtype, batch)
    tiles = blocking.register_tiles(hw)
    blis_kc = blocking.kc_from_l1(hw, p["mr"], p["nr"], esize)
    kcs = {blis_kc, blocking.k_block(hw, K, p["mr"], p["nr"], vec, esize, blocking.panel_bytes(target)), K // 2, K // 4}
    return {
        "mr": tuple(sorted({min(rows, M) for rows, _ in tiles})),
        "nr": tuple(sorted({vecs * vec for _, vecs in tiles})),
        "nc": tuple(p["nr"] * m for m in (1, 2, 4, 8, 16) if p["nr"] * m <= blocking.ceil_div(N, p["nr"]) * p["nr"]),
        "kc": tuple(sorted(k // 4 * 4 for k in kcs if 16 <= k < K)),
        "mc": (blocking.mc_from_l2(hw, min(blis_kc, K), p["mr"], esize),),
        "l2": prefetch.candidates(hw, p["mr"], p["nr"] // vec),
    }


# -- the stages around the product: inlined operands, the elementwise epilogue ------------------


def inline_operands(s, acc: str) -> None:
    """Inline the computed stages the product reads (a fused kernel's index prologue: the head
    permutes of attention's q, k and v) into its reads and its packing copies, so the operands
    are read in place from the kernel's inputs."""
    todo = [acc]
    while todo:
        for name in s.state.stage(todo.pop()).read_stages():
            st = s.state.stage(name)
            if st.is_placeholder or st.reduce_axes or st.inline:
                continue
            if st.scope == "global":
                s.compute_inline(name)
            todo.append(name)


def gemm_producer(s, out: str) -> str:
    """The dense product stage under the epilogue `out`, directly or through elementwise stages."""
    return epilogue_anchor(s, out, "dense", "dense_epilogue")


def epilogue_anchor(s, out: str, tag: str, template_name: str) -> str:
    """The reduction stage tagged `tag`: `out` itself, or the one under the elementwise
    epilogue `out` (a fused kernel: bias, activation, a residual add), found through
    elementwise stages only."""
    if s.state.stage(out).tag == tag and s.state.stage(out).reduce_axes:
        return out
    for name in reductions_under(s, out):
        if s.state.stage(name).tag == tag:
            return name
    raise ScheduleError(f"{template_name} template: {out} reads no {tag} product stage")


def cache_under_epilogue(s, out: str, product: str, layout=None):
    """A local cache of the product (its accumulator tile, stored transposed by `layout`) with
    the epilogue between it and `out`, if any, inlined into the store."""
    acc = s.cache_write(product, "local", layout=layout)
    if product != out:
        inline_epilogue(s, out, product)
        s.compute_inline(product)
    return acc


def inline_epilogue(s, out: str, product: str) -> None:
    """Inline the elementwise stages between `out` and the product (a fused epilogue chain:
    bias, activation, a residual add), so `out` reads the product directly."""
    todo = [out]
    while todo:
        for name in s.state.stage(todo.pop()).read_stages():
            st = s.state.stage(name)
            if name != product and not st.is_placeholder and not st.reduce_axes and not st.inline:
                s.compute_inline(name)
                todo.append(name)
