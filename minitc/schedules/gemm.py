"""GEMM-family templates: matmul (every transpose), batch_matmul, dense and dense + epilogue.

All four share one register-blocked structure (the output tile loops are the output stage's;
`acc` is the stage that sums over k: the cache_write stage of a matmul, or dense's product stage
under its epilogue):

    for [b] jo in parallel(N / nc):                  # a panel of nc columns per task
        B_local[k, nc] = pack B[:, jo*nc : jo*nc + nc]   (transposed operands: layout swap)
        for io in range(M / mr):
            for jr in range(nc / nr):
                acc[mr, nr] = 0                      # register tile: mr x (nr / 8) ymm
                for ko in range(K / ku):
                    for ku, for i in unrolled(mr), for jv in unrolled(nr / 8):
                        for lane in vectorized(8):
                            acc[i, jv*8 + lane] += A[i, k] * B_local[k, jr*nr + jv*8 + lane]
                for i, j in tile: C[...] = epilogue(acc[i, j])    # stored straight from registers

Tile sizes are keyword arguments, so every call is one point of the tuner's design space; the
`@defaults` functions choose them for the shape and target (factors that divide the extents
where possible; other shapes get guarded tails, which the backend peels off the hot loops).
"""
from __future__ import annotations

from backends.llvm.target import simd_width

from ..errors import ScheduleError
from . import defaults, template

PARALLEL = ("auto", "n", "m", "batch", "none")


# -- the shared template -----------------------------------------------------------------------


def _operands(s, acc: str) -> tuple:
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
        if k_axis not in dims:
            continue
        if j_axis in dims:
            roles["b"] = (r.stage, dims[k_axis], dims[j_axis])
        elif i_axis in dims:
            roles["a"] = (r.stage, dims[k_axis], dims[i_axis])
    if "a" not in roles or "b" not in roles:
        raise ScheduleError(f"gemm template: stage {acc} is not a product of an [.., M, K] and a [.., K, N] operand")
    return roles["a"], roles["b"]


def gemm_schedule(s, out: str, acc: str, target, *, mr, nr, nc, ku, kc=0, mc=0, pack_b=True, parallel="auto", vec=None):
    """Schedule the GEMM-like stage `acc` (summing over its one reduction axis) for the output
    stage `out`: `out` is the copy-out of a cache_write or an elementwise epilogue, computed
    per mr x nr register tile (kc = 0), or, with kc > 0, `acc` itself (accumulating in place
    over kc-blocks of k) or an epilogue applied per nc-column panel. See the module docstring."""
    for name, v in (("mr", mr), ("nr", nr), ("nc", nc), ("ku", ku), ("kc", kc + 1), ("mc", mc + 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"gemm template: {name} must be a positive int, got {v!r}")
    if parallel not in PARALLEL:
        raise ScheduleError(f"gemm template: parallel must be one of {', '.join(PARALLEL)}, got {parallel!r}")
    vec = min(vec or simd_width(target, s.state.stage(acc).dtype), nr)
    nc = max(nr, nc // nr * nr)
    tile = dict(mr=mr, nr=nr, ku=ku, vec=vec)
    if kc:
        return _kblocked(s, out, acc, target, nc=nc, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel, **tile)
    out_loops = s.loops(out)
    batch, (i, j) = out_loops[:-2], out_loops[-2:]
    jo, jr = s.split(j, factor=nc)
    jr, ji = s.split(jr, factor=nr)
    io, ii = s.split(i, factor=mr)
    s.reorder(*batch, jo, io, jr, ii, ji)
    # the epilogue / copy-out, applied to the tile as it leaves the registers
    s.unroll(ii)
    _vector_columns(s, ji, vec)
    s.compute_at(acc, jr)
    acc_loops = s.loops(acc)
    for lp in acc_loops[:-3]:  # batch dims of the tile: extent 1
        s.unroll(lp)
    ci, cj, ck = acc_loops[-3:]
    _micro_kernel(s, [], ci, cj, ck, **tile)
    if pack_b:
        _pack(s, acc, jo, vec)
    _parallelize(s, parallel, batch, jo, io, target)


def _kblocked(s, out, acc, target, *, mr, nr, nc, ku, kc, mc, vec, pack_b, parallel):
    """BLIS order: k split into kc-blocks, the B block [kc, nc] packed per block, rows in
    blocks of mc, then column tiles outside row tiles, so one kc x nr micro-panel of B stays
    in L1 while the mc rows stream past it (the accumulator tile is loaded and stored once
    per block; LLVM keeps it in registers across the block's k loop)."""
    if out == acc:
        loops = s.loops(acc)
        batch, (i, j, k) = loops[:-3], loops[-3:]
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
    outer.append(ko)
    if mc:
        mo, i = s.split(i, factor=max(mr, mc // mr * mr))
        outer.append(mo)
    jr, j = s.split(j, factor=nr)
    io, i = s.split(i, factor=mr)
    _micro_kernel(s, outer + [jr, io], i, j, k, mr=mr, nr=nr, ku=ku, vec=vec)
    if pack_b:
        _pack(s, acc, ko, vec, kc)
    _parallelize(s, parallel, batch, jo, mo if mc else io, target)


def _micro_kernel(s, outer, i, j, k, *, mr, nr, ku, vec):
    """The mr x nr register tile under the loops `outer`: k (unrolled by ku) outside the
    unrolled rows and the unrolled x vectorized columns."""
    jv, jl = s.split(j, factor=vec)
    if ku > 1:
        kio, kii = s.split(k, factor=ku)
        s.reorder(*outer, kio, kii, i, jv, jl)
        s.unroll(kii)
    else:
        s.reorder(*outer, k, i, jv, jl)
    s.unroll(i)
    s.unroll(jv)
    s.vectorize(jl)


def _vector_columns(s, j, vec: int) -> None:
    if s.state.stage(j.stage).loop(j.name).extent > vec:
        jo, j = s.split(j, factor=vec)
        s.unroll(jo)
    s.vectorize(j)


def _pack(s, acc: str, at, vec: int, kc: int = 0) -> None:
    """Pack the B operand of `acc` per iteration of loop `at` into a contiguous [.., k, n]
    panel (transposed when B is stored [.., N, K])."""
    _, (b_name, b_k, b_j) = _operands(s, acc)
    ndim = len(s.state.stage(b_name).shape)
    layout = None
    if b_k > b_j:
        layout = list(range(ndim))
        layout[b_k], layout[b_j] = b_j, b_k
    bl = s.cache_read(b_name, "local", [acc], layout=layout)
    s.compute_at(bl, at)
    _schedule_pack(s, bl, vec, layout is not None, kc or s.state.stage(acc).reduce_axes[0].extent)


def _schedule_pack(s, bl, vec: int, transposed: bool, kext: int) -> None:
    """The packing loop of a [.., K, nc] panel: contiguous vector copies, or for a transposed
    source unrolled 8x8 blocks of scalar copies (reads along k, writes along j; measured faster
    than 8-lane gathers or either plain loop order on Zen 2)."""
    loops = s.loops(bl)
    for lp in loops[:-2]:
        s.unroll(lp)
    kx, jx = loops[-2:]
    if not transposed:
        jxo, jxi = s.split(jx, factor=vec)
        s.vectorize(jxi)
        return
    kb = next(f for f in (vec, 4, 2, 1) if kext % f == 0)  # no k tail inside a block
    kxo, kxi = s.split(kx, factor=kb)
    jxo, jxi = s.split(jx, factor=vec)
    s.reorder(jxo, kxo, jxi, kxi)
    s.unroll(jxi)
    s.unroll(kxi)


def _parallelize(s, parallel: str, batch, jo, io, target) -> None:
    if parallel == "none":
        return
    if parallel == "auto":
        parallel = _auto_parallel(s, batch, jo, io, target)
    if parallel == "batch" and batch:
        s.parallel(s.fuse(*batch) if len(batch) > 1 else batch[0])
    elif parallel == "n":
        if batch:
            s.parallel(s.fuse(*batch, jo))
        else:
            s.parallel(jo)
    elif parallel == "m":
        s.parallel(io)
    elif parallel == "batch":
        s.parallel(jo)


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


# -- tile sizes ----------------------------------------------------------------------------------

REGISTER_TILES = ((6, 2), (4, 3), (8, 1), (3, 4), (2, 4), (5, 2), (7, 1), (1, 4))  # (rows, vectors)


def pick_tiles(M: int, N: int, K: int, target, dtype: str = "float32") -> dict:
    """Register tile, panel width and k unroll for an M x N x K product: the tile with the
    least padded work (rows and columns rounded up to the tile), preferring 12 accumulators
    (6x16, 4x24: enough independent FMA chains to hide the FMA latency on two pipes)."""
    vec = simd_width(target, dtype)
    regs = 32 if vec >= 16 else 16

    def cost(t):
        rows, vecs = t
        nr = vecs * vec
        padded = (-(-M // rows) * rows) * (-(-N // nr) * nr)
        accs = rows * vecs
        if accs + vecs + 1 > regs:
            return None
        # per k: accs FMAs against rows broadcasts + vecs loads; fewer than ~10 chains stall
        eff = min(1.0, accs / 10) * min(1.0, 2 * accs / (rows + vecs) / 2)
        return padded / (M * N) / eff

    best = min((t for t in REGISTER_TILES if cost(t) is not None), key=cost)
    mr, nr = best[0], best[1] * vec
    if N < nr:  # narrow outputs: one (possibly masked) vector column
        nr = vec * -(-N // vec) if N > vec else vec
        mr = min(M, 6)
    mr = min(mr, M)
    ku = 4 if K % 4 == 0 else (2 if K % 2 == 0 else 1)
    return {"mr": mr, "nr": nr, "nc": nr, "ku": ku}


def _shape(s, acc: str) -> tuple:
    st = s.state.stage(acc)
    M, N = st.shape[-2:]
    (k,) = st.reduce_axes
    batch = 1
    for n in st.shape[:-2]:
        batch *= n
    return batch, M, N, k.extent


def _defaults_for(s, acc: str, target) -> dict:
    batch, M, N, K = _shape(s, acc)
    p = pick_tiles(M, N, K, target, s.state.stage(acc).dtype)
    p["pack_b"] = M > p["mr"]  # a panel read by one row tile is not worth copying
    p["parallel"] = "auto"
    return p


# -- the operators -----------------------------------------------------------------------------


def _matmul_like(s, out, target, **params):
    acc = out if params.get("kc") else s.stage_name(s.cache_write(out, "local"))
    gemm_schedule(s, out, acc, target, **params)


@template("matmul")
def schedule_matmul(s, out, target, mr=6, nr=16, nc=16, ku=4, kc=0, mc=0, pack_b=True, parallel="auto"):
    """C = A @ B (any transposes): mr x nr register tile, B packed in [K, nc] panels."""
    _matmul_like(s, out, target, mr=mr, nr=nr, nc=nc, ku=ku, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel)


@template("batch_matmul")
def schedule_batch_matmul(s, out, target, mr=6, nr=16, nc=16, ku=4, kc=0, mc=0, pack_b=True, parallel="auto"):
    """C[b] = A[b] @ B[b]: the matmul structure inside a loop over the batch."""
    _matmul_like(s, out, target, mr=mr, nr=nr, nc=nc, ku=ku, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel)


@template("dense")
def schedule_dense(s, out, target, mr=4, nr=24, nc=24, ku=4, kc=0, mc=0, pack_b=True, parallel="auto"):
    """Y = X @ W.T: W ([out, in]) is packed transposed into [in, nc] panels."""
    _matmul_like(s, out, target, mr=mr, nr=nr, nc=nc, ku=ku, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel)


@template("dense_epilogue")
def schedule_dense_epilogue(s, out, target, mr=4, nr=24, nc=24, ku=4, kc=0, mc=0, pack_b=True, parallel="auto"):
    """act(X @ W.T + bias): the product is computed per output tile into a register
    accumulator (compute_at), and bias/activation are applied as the tile is stored."""
    gemm_schedule(s, out, _producer(s, out), target, mr=mr, nr=nr, nc=nc, ku=ku, kc=kc, mc=mc, pack_b=pack_b, parallel=parallel)


def _producer(s, out: str) -> str:
    for name in s.state.stage(out).read_stages():
        if s.state.stage(name).tag == "dense":
            return name
    raise ScheduleError(f"dense_epilogue template: {out} reads no dense product stage")


for _tag in ("matmul", "batch_matmul", "dense"):
    defaults(_tag)(lambda s, out, target: _defaults_for(s, out, target))


@defaults("dense_epilogue")
def dense_epilogue_defaults(s, out, target) -> dict:
    return _defaults_for(s, _producer(s, out), target)
