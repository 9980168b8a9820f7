"""GEMM-family templates: matmul (every transpose), batch_matmul, dense and dense + epilogue.

All four share one structure. `out` is the output stage; `acc` the stage that sums over k (a
matmul's cache_write stage, or dense's product stage under its epilogue):

    for [b,] jo in parallel(N / nc):                     # a panel of nc columns per task
        B_local[K, nc] = B[:, jo*nc : jo*nc + nc]        # packed; transposed if B is [N, K]
        for io in range(M / mr):
            for jr in range(nc / nr):                    # A rows reused from L1 across jr
                acc[mr, nr] = 0                          # mr x nr/L vector accumulators
                for ko in range(K / ku):
                    for kk in unrolled(ku):
                        for i in unrolled(mr):
                            for jv in unrolled(nr / L):
                                for lane in vectorized(L):   # one FMA, A[i, k] broadcast
                                    acc[i, jv*L + lane] += A[i, k] * B_local[k, jr*nr + jv*L + lane]
                out[tile] = epilogue(acc)                # copy-out / bias + activation, from registers

With kc > 0 (long reductions) the BLIS order is used instead: the output accumulates in place
over kc-blocks of k, B is packed per [kc, nc] block, rows optionally blocked by mc, and an
epilogue runs per finished nc-column panel.

Leading output axes that B does not read (C[b, s, n] = sum_k A[b, s, k] * W[k, n]) are more
rows of A, not batches: they run inside the panel loop, so one packed panel serves them all.

L is the target's vector lanes (`target.lanes`: 8 float32 on AVX2, 16 on AVX-512; GEMM is
compute-bound, so it uses the full width even where 512-bit ops are split).

With `l2 = d` (gemm_prefetch.py) each k step also prefetches B's row k + d into L1.

Every tile size is a keyword argument, so each call is one point of the tuner's design space;
the `@defaults` functions (gemm_stages.py, which also finds the operands and the epilogue)
pick them for the shape and the target description (`gemm_blocking.pick_tiles`:
the register tile from the target's vector registers and lanes, the panel from its L2; factors
that divide the extents where possible; other shapes get guarded tails, which the LLVM backend
peels off the hot loops, minitc/lowering/partition.py).
"""

from __future__ import annotations

import minitc.templates.gemm_prefetch as prefetch
from minitc.errors import ScheduleError
from minitc.expr import IterVar, walk
from minitc.templates.gemm_prefetch import ABSENT

# re-exported, as the other templates import them from here: cache_under_epilogue, epilogue_anchor, is_contraction
from minitc.templates.gemm_stages import (  # noqa: F401
    cache_under_epilogue,
    contraction_under,
    epilogue_anchor,
    gemm_choices,
    gemm_defaults,
    gemm_operands,
    gemm_producer,
    inline_epilogue,
    inline_operands,
    is_contraction,
    weight_block,
)
from minitc.templates.params import SWITCH, Ints, OneOf, Param
from minitc.templates.registry import choices, defaults, template

PARALLEL = ("auto", "n", "m", "batch", "none")
TILE = "gemm_blocking.pick_tiles: "  # the register tile and blocks, from the target description

GEMM_PARAMS = (
    Param("mr", "rows of the register tile (A's rows broadcast per k step)", Ints(1, 16),
          TILE + "the register tile with the least padded work per FMA efficiency (vector registers, "
          "FMA latency and rate, loads per cycle)", candidates=(1, 2, 3, 4, 5, 6, 8)),
    Param("nr", "columns of the register tile (whole vectors of B)", Ints(1, 128),
          TILE + "that tile's vectors times the target's lanes", candidates=(8, 16, 24, 32)),
    Param("nc", "columns of a packed B panel, one parallel task's share", Ints(1, 4096),
          TILE + "as many register tiles as fit a quarter of the L2 (the L3's share with k blocks), "
          "dividing N, two panels per core", candidates=(16, 32, 48, 64, 96, 128, 192, 256)),
    Param("ku", "unroll of the k loop", Ints(1, 16), "4, else 2, else 1: the largest that divides K",
          candidates=(1, 2, 4, 8)),
    Param("kc", "k block (0: none; else the BLIS order, the output accumulated in place)", Ints(0, 16384),
          TILE + "0 where B's micro-panel fits half the L1; the BLIS kc from the L1 where the L2 cannot "
          "feed B's stream; else A's sliver in half the L1", candidates=(0, 64, 128, 256, 512)),
    Param("mc", "rows of A per block of the BLIS order (0: not blocked)", Ints(0, 65536), "0",
          candidates=(0, 32, 64, 128)),
    Param("pack_b", "copy B's panel contiguous (transposed if stored [N, K])", SWITCH,
          "true unless one row tile reads the panel (and B needs no transpose) or W is stored blocked"),
    Param("pack_a", "copy an A stored [K, M] transposed first", SWITCH,
          "true for an A stored [K, M] that several panels read and whose rows all fall into one L1 set "
          "(a multiple of the L1's way apart: gemm_blocking.one_l1_set); read in place it is k-major already"),
    Param("parallel", "the loop run in parallel: batches, column panels (n), row tiles (m), none, or auto",
          OneOf(PARALLEL), "auto: whole batches if they spread over the cores, else panels, else rows"),
    Param("l2", "prefetch B's row this many k steps ahead (0: none)", Ints(0, 256),
          "0 (off unless measured better); gemm_prefetch.candidates offers the L2 latency's distance, "
          "2x and 4x", before=0),
)  # fmt: skip


# -- the shared template -----------------------------------------------------------------------


def gemm_schedule(
    s,
    out: str,
    acc: str,
    target,
    *,
    mr,
    nr,
    nc,
    ku,
    kc=0,
    mc=0,
    pack_b=True,
    pack_a=False,
    parallel="auto",
    vec=None,
    prefetch_b=0,
    a_panels=False,
):
    """Schedule the GEMM-like stage `acc` (summing over its one reduction axis) for the output
    stage `out`: `out` is the copy-out of a cache_write or an elementwise epilogue, computed
    per mr x nr register tile (kc = 0), or, with kc > 0, `acc` itself (accumulating in place
    over kc-blocks of k) or an epilogue applied per nc-column panel. With pack_a, an A stored
    [.., K, M] is first copied transposed (once, in parallel). With prefetch_b = d, each k
    step prefetches B's row k + d; with a_panels, A's rows are packed k-major per row tile
    (per mc x kc block with kc): `_pack_a_panels`. See the module docstring."""
    checks = (("mr", mr), ("nr", nr), ("nc", nc), ("ku", ku), ("kc", kc + 1), ("mc", mc + 1), ("l2", prefetch_b + 1))
    for name, v in checks:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"gemm template: {name} must be a positive int, got {v!r}")
    if parallel not in PARALLEL:
        raise ScheduleError(f"gemm template: parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    block = weight_block(s, acc)
    if block:  # already packed, read in place: a register tile covers whole blocks
        nr, pack_b = -(-nr // block) * block, False
    vec = min(vec or target.lanes(s.state.stage(acc).dtype), nr, block or nr)
    if block % vec:
        raise ScheduleError(f"gemm template: {vec}-lane vectors do not divide the weight's blocks of {block} columns")
    nc = max(nr, nc // nr * nr)
    tile = dict(mr=mr, nr=nr, ku=ku, vec=vec)
    if pack_a:
        _transpose_a(s, acc, vec, target)
    if kc:
        k_loop = _kblocked(
            s, out, acc, target, nc=nc, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel, a_panels=a_panels, **tile
        )
        return _prefetch(s, acc, k_loop, prefetch_b)
    out_loops = s.loops(out)
    (batch, rows), (i, j) = _batch_and_rows(s, acc, out_loops[:-2]), out_loops[-2:]
    jo, jr = s.split(j, factor=nc)
    jr, ji = s.split(jr, factor=nr)
    io, ii = s.split(i, factor=mr)
    s.reorder(*batch, jo, *rows, io, jr, ii, ji)
    # the epilogue / copy-out, applied to the tile as it leaves the registers
    s.unroll(ii)
    _vector_columns(s, ji, vec)
    s.compute_at(acc, jr)
    acc_loops = s.loops(acc)
    for lp in acc_loops[:-3]:  # batch dims of the tile: extent 1
        s.unroll(lp)
    ci, cj, ck = acc_loops[-3:]
    k_loop = _micro_kernel(s, [], ci, cj, ck, **tile)
    if pack_b:
        _pack(s, acc, jo, vec)
    if a_panels:
        _pack_a_panels(s, acc, io, vec, s.state.stage(acc).reduce_axes[0].extent)
    _parallelize(s, parallel, batch, jo, io, target)
    _prefetch(s, acc, k_loop, prefetch_b)


def _prefetch(s, acc: str, k_loop, d: int) -> None:
    """Prefetch B's row d k steps ahead (packed or read in place: the B operand acc reads now)."""
    if d:
        _, (b_name, _, _) = gemm_operands(s, acc)
        prefetch.prefetch_b(s, acc, k_loop, b_name, d)


def _kblocked(s, out, acc, target, *, mr, nr, nc, ku, kc, mc, vec, pack_b, parallel, a_panels=False):
    """BLIS order: k split into kc-blocks, the B block [kc, nc] packed per block, rows in
    blocks of mc, then column tiles outside row tiles, so one kc x nr micro-panel of B stays
    in L1 while the mc rows stream past it (the accumulator tile is loaded and stored once
    per block; LLVM keeps it in registers across the block's k loop). Returns the
    micro-kernel's innermost k loop."""
    rows = []
    if out == acc:
        loops = s.loops(acc)
        (batch, rows), (i, j, k) = _batch_and_rows(s, acc, loops[:-3]), loops[-3:]
        jo, j = s.split(j, factor=nc)
        outer = [*batch, jo]
    else:  # the epilogue: per panel of nc columns, after the panel's product is complete
        loops = s.loops(out)
        batch, (i, j) = loops[:-2], loops[-2:]
        jo, jr = s.split(j, factor=nc)
        s.reorder(*batch, jo, i, jr)
        _vector_columns(s, jr, vec)
        s.compute_at(acc, jo)
        acc_loops = s.loops(acc)
        for lp in acc_loops[:-3]:
            s.unroll(lp)
        i, j, k = acc_loops[-3:]
        outer = []
    ko, k = s.split(k, factor=kc)
    outer += [ko, *rows]
    if mc:
        mo, i = s.split(i, factor=max(mr, mc // mr * mr))
        outer.append(mo)
    jr, j = s.split(j, factor=nr)
    io, i = s.split(i, factor=mr)
    k_loop = _micro_kernel(s, outer + [jr, io], i, j, k, mr=mr, nr=nr, ku=ku, vec=vec)
    if pack_b:
        _pack(s, acc, ko, vec, kc)
    if a_panels:
        _pack_a_panels(s, acc, mo if mc else ko, vec, kc)
    _parallelize(s, parallel, batch, jo, mo if mc else io, target)
    return k_loop


def _batch_and_rows(s, acc: str, loops) -> tuple:
    """The leading output loops split into (batch, rows): a batch loop is one B reads too; the
    others index only A's rows (C[b, s, n] = sum_k A[b, s, k] * W[k, n]), so they run inside
    the column panel loop as more rows, and one packed B panel serves them all."""
    _, (b_name, _, _) = gemm_operands(s, acc)
    st = s.state.stage(acc)
    indices = [index for r in st.reads() if r.stage == b_name for index in r.indices]
    read = {ax.name for index in indices for ax in walk(index) if isinstance(ax, IterVar)}
    batch = [lp for lp, ax in zip(loops, st.axes) if ax.name in read]
    return batch, [lp for lp in loops if lp not in batch]


def _micro_kernel(s, outer, i, j, k, *, mr, nr, ku, vec):
    """The mr x nr register tile under the loops `outer`: k (unrolled by ku) outside the
    unrolled rows and the unrolled x vectorized columns. Returns the innermost k loop."""
    jv, jl = s.split(j, factor=vec)
    if ku > 1:
        kio, k = s.split(k, factor=ku)
        s.reorder(*outer, kio, k, i, jv, jl)
        s.unroll(k)
    else:
        s.reorder(*outer, k, i, jv, jl)
    s.unroll(i)
    s.unroll(jv)
    s.vectorize(jl)
    return k


def _vector_columns(s, j, vec: int) -> None:
    if s.state.stage(j.stage).loop(j.name).extent > vec:
        jo, j = s.split(j, factor=vec)
        s.unroll(jo)
    s.vectorize(j)


def _transpose_a(s, acc: str, vec: int, target) -> None:
    """Copy an A stored [.., K, M] into [.., M, K] at the root, so the micro-kernel reads its
    rows along k (a transposed A touches a new cache line per k)."""
    (a_name, a_k, a_i), _ = gemm_operands(s, acc)
    if a_k > a_i:  # already [.., M, K]
        return
    layout = list(range(len(s.state.stage(a_name).shape)))
    layout[a_k], layout[a_i] = a_i, a_k
    al = s.cache_read(a_name, "local", [acc], layout=layout)
    outer = _schedule_pack(s, al, vec, True, al.shape[-2], attached=False)
    if target.num_cores > 1:
        s.parallel(outer)


def _pack_a_panels(s, acc: str, at, vec: int, kext: int) -> None:
    """Copy A's rows read under loop `at` k-major into a local [.., k, rows] panel per
    iteration of `at` (BLIS's packed A): the mr broadcasts of a k step then read one cache
    line, where in place they read mr rows a row apart (4 KiB for K = 1024 fp32, one L1 set)."""
    (a_name, a_k, a_i), _ = gemm_operands(s, acc)
    if a_k < a_i:
        raise ScheduleError("gemm template: A panels read an A stored [.., M, K]; copy a transposed A first (pack_a)")
    layout = list(range(len(s.state.stage(a_name).shape)))
    layout[a_k], layout[a_i] = a_i, a_k
    al = s.cache_read(a_name, "local", [acc], layout=layout)
    s.compute_at(al, at)
    _schedule_pack(s, al, vec, True, kext)


def _pack(s, acc: str, at, vec: int, kc: int = 0) -> None:
    """Pack the B operand of `acc` per iteration of loop `at` into a contiguous [.., k, n]
    panel (transposed when B is stored [.., N, K])."""
    _, (b_name, b_k, b_j) = gemm_operands(s, acc)
    ndim = len(s.state.stage(b_name).shape)
    layout = None
    if b_k > b_j:
        layout = list(range(ndim))
        layout[b_k], layout[b_j] = b_j, b_k
    bl = s.cache_read(b_name, "local", [acc], layout=layout)
    s.compute_at(bl, at)
    _schedule_pack(s, bl, vec, layout is not None, kc or s.state.stage(acc).reduce_axes[0].extent)


def _schedule_pack(s, bl, vec: int, transposed: bool, kext: int, attached: bool = True):
    """The packing loop of a [.., K, nc] panel: contiguous vector copies, or for a transposed
    source unrolled 8x8 blocks of scalar copies (reads along k, writes along j: both sides
    touch whole cache lines, where 8-lane gathers or either plain loop order stride one of
    them). Returns the outermost loop."""
    loops = s.loops(bl)
    batch, (kx, jx) = loops[:-2], loops[-2:]
    if attached:  # batch dims of an attached panel have extent 1
        for lp in batch:
            s.unroll(lp)
    if not transposed:
        jxo, jxi = s.split(jx, factor=vec)
        s.vectorize(jxi)
        return batch[0] if batch else kx
    kb = next(f for f in (vec, 4, 2, 1) if kext % f == 0)  # no k tail inside a block
    kxo, kxi = s.split(kx, factor=kb)
    jxo, jxi = s.split(jx, factor=vec)
    s.reorder(jxo, kxo, jxi, kxi)
    s.unroll(jxi)
    s.unroll(kxi)
    return batch[0] if batch else jxo


def _parallelize(s, parallel: str, batch, jo, io, target) -> None:
    """`batch`: the batch loops (fused), `n`: the column panels (fused with the batch loops),
    `m`: the row tiles (inside a serial panel loop; the panel is packed once for all tasks)."""
    if parallel == "auto":
        parallel = _auto_parallel(s, batch, jo, io, target)
    if parallel == "none":
        return
    if parallel == "batch" and batch:
        s.parallel(s.fuse(*batch) if len(batch) > 1 else batch[0])
    elif parallel in ("n", "batch"):  # no batch loops: panels
        s.parallel(s.fuse(*batch, jo) if batch else jo)
    else:
        s.parallel(io)


def _extent(s, loop) -> int:
    return s.state.stage(loop.stage).loop(loop.name).extent


def _auto_parallel(s, batch, jo, io, target) -> str:
    """Whole batches per task if they spread evenly, else column panels (each task packs its
    own), else row tiles."""
    cores = max(1, target.num_cores)
    if cores == 1:
        return "none"
    nb = 1
    for lp in batch:
        nb *= _extent(s, lp)
    if batch and (nb % cores == 0 or nb >= 4 * cores):
        return "batch"
    panels = nb * _extent(s, jo)
    if panels % cores == 0 or panels >= 4 * cores:
        return "n"
    return "m" if _extent(s, io) >= 2 * cores else "n"


# -- the operators -----------------------------------------------------------------------------


def _matmul_like(s, out, target, **params):
    acc = out if params.get("kc") else s.stage_name(s.cache_write(out, "local"))
    gemm_schedule(s, out, acc, target, **params)
    inline_operands(s, acc)


# `l2` is a slot of the design space only where gemm_prefetch.offered (ABSENT: see there)


@template("matmul", GEMM_PARAMS)
def schedule_matmul(
    s, out, target, mr=6, nr=16, nc=16, ku=4, kc=0, mc=0, pack_b=True, pack_a=False, parallel="auto", l2=ABSENT
):
    """C = A @ B (any transposes): mr x nr register tile, B packed in [K, nc] panels."""
    _matmul_like(s, out, target, **_params(locals()))


@template("conv2d_gemm", GEMM_PARAMS)  # Y[n] = W @ col[n], col (im2col) computed inline into B's packing
@template("batch_matmul", GEMM_PARAMS)
def schedule_batch_matmul(
    s, out, target, mr=6, nr=16, nc=16, ku=4, kc=0, mc=0, pack_b=True, pack_a=False, parallel="auto", l2=ABSENT
):
    """C[b] = A[b] @ B[b]: the matmul structure inside a loop over the batch."""
    _matmul_like(s, out, target, **_params(locals()))


@template("dense", GEMM_PARAMS)
def schedule_dense(
    s, out, target, mr=4, nr=24, nc=24, ku=4, kc=0, mc=0, pack_b=True, pack_a=False, parallel="auto", l2=ABSENT
):
    """Y = X @ W.T: W ([out, in]) is packed transposed into [in, nc] panels."""
    _matmul_like(s, out, target, **_params(locals()))


@template("dense_epilogue", GEMM_PARAMS)
def schedule_dense_epilogue(
    s, out, target, mr=4, nr=24, nc=24, ku=4, kc=0, mc=0, pack_b=True, pack_a=False, parallel="auto", l2=ABSENT
):
    """act(X @ W.T + bias), or any elementwise epilogue of the product: the product is computed
    per output tile into a register accumulator (compute_at), and the epilogue (inlined into
    one stage) is applied as the tile is stored."""
    _with_epilogue(s, out, gemm_producer(s, out), target, _params(locals()))


@template("matmul_epilogue", GEMM_PARAMS)
def schedule_matmul_epilogue(
    s, out, target, mr=6, nr=16, nc=16, ku=4, kc=0, mc=0, pack_b=True, pack_a=False, parallel="auto", l2=ABSENT
):
    """An elementwise epilogue of a matrix product written by hand (templates/__init__.py's
    template_tag finds one): as dense_epilogue, the epilogue applied as each tile is stored."""
    _with_epilogue(s, out, contraction_under(s, out), target, _params(locals()))


def _with_epilogue(s, out, product, target, params: dict) -> None:
    inline_epilogue(s, out, product)
    gemm_schedule(s, out, product, target, **params)


def _params(given: dict) -> dict:
    """gemm_schedule's keywords from a template's parameters (`l2` as prefetch_b)."""
    names = ("mr", "nr", "nc", "ku", "kc", "mc", "pack_b", "pack_a", "parallel")
    return {**{n: given[n] for n in names}, "prefetch_b": prefetch.ahead(given["l2"])}


for _tag in ("matmul", "batch_matmul", "conv2d_gemm", "dense"):
    defaults(_tag)(lambda s, out, target: gemm_defaults(s, out, target))
    choices(_tag)(lambda s, out, target: gemm_choices(s, out, target))

# an epilogue's parameters are its product's: the product found by tag (dense) or by structure
for _tag, _product in (("dense_epilogue", gemm_producer), ("matmul_epilogue", contraction_under)):
    defaults(_tag)(lambda s, out, target, product=_product: gemm_defaults(s, product(s, out), target))
    choices(_tag)(lambda s, out, target, product=_product: gemm_choices(s, product(s, out), target))
