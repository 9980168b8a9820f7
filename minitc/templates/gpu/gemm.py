"""GPU GEMM template (matmul, batch_matmul, dense, dense + epilogue): shared-memory tiling.

    for [b in bind("blockIdx.z")] by in bind("blockIdx.y", M / bm): bx in bind("blockIdx.x", N / bn):
        for ty in bind("threadIdx.y", bm / tm): tx in bind("threadIdx.x", bn / tn):
            acc[tm, tn] = 0                                 # registers, one tile per thread
            for ko in range(K / bk):
                barrier()
                A_shared[bk, bm] = A[...]^T; B_shared[bk, bn] = B[...]   # float4 global loads
                barrier()
                for ki in unrolled(bk):
                    a[tm] = A_shared[ki, ty*tm:]; b[tn] = B_shared[ki, tx*tn:]   # float4 reads
                    for i in unrolled(tm): for j in unrolled(tn): acc[i, j] += a[i] * b[j]
            for i: for j in vectorized(4): out[...] = epilogue(acc[i, j])   # float4 stores

Both shared tiles are k-major whatever the operands' layouts (vector_fetch copies 4 elements a
thread along the source rows; lowering stages a transposing fill through registers), so each
k's register rows are float4 loads. Lowering (minitc/lowering/double_buffer.py) double-buffers
the tiles when there are 2+ k-steps and they fit: the next tile's global loads are issued
before the compute, stored to the other buffer after it, one barrier per k-step.

Each block reads a bm x bk and a bk x bn tile once from global memory and each thread reuses
every value it loads from shared memory tn (or tm) times from registers, which is what moves a
GEMM from memory-bound to compute-bound. Tiles need not divide the shape (guards), but a
barrier may not sit under a thread-dependent guard, so bm/bn/bk that divide M/N/K are best.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.templates.gemm import gemm_operands, gemm_producer, inline_epilogue, inline_operands
from minitc.templates.gpu.registry import MAX_THREADS, defaults, template, unrolled_k_steps
from minitc.templates.params import SWITCH, Ints, Param

_TILES = "pick_gpu_tiles: "
SHARED = Param("shared", "stage the operands' tiles in shared memory", SWITCH, "true")
GPU_GEMM_PARAMS = (
    Param("bm", "output rows per block", Ints(1, 1024), _TILES + "128 (64 for short products), halved until "
          "there are blocks for every SM", candidates=(16, 32, 64, 128)),
    Param("bn", "output columns per block", Ints(1, 1024), _TILES + "as bm", candidates=(16, 32, 64, 128)),
    Param("tm", "output rows per thread (registers)", Ints(1, 64), _TILES + "4, up to 16 for large products",
          candidates=(1, 2, 4, 8)),
    Param("tn", "output columns per thread (registers)", Ints(1, 64), _TILES + "4, up to 8 for large products",
          candidates=(1, 2, 4, 8)),
    Param("bk", "k per shared tile", Ints(1, 256), _TILES + "16 (8 for the largest tiles), dividing K",
          candidates=(4, 8, 16, 32)),
    SHARED,
)  # fmt: skip


def gemm_gpu(s, out: str, acc: str, target, *, bm, bn, tm, tn, bk, shared=True, gathered=()):
    """Schedule `acc` (a product summing over one reduction axis) computed per thread inside
    `out`, whose last two axes are tiled over blocks and threads (see the module docstring).
    The operands named in `gathered` are computed into their shared tiles element by element
    (an inlined gather such as im2col: its rows are not contiguous in memory)."""
    for name, v in (("bm", bm), ("bn", bn), ("tm", tm), ("tn", tn), ("bk", bk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"GPU gemm template: {name} must be a positive int, got {v!r}")
    # every combination is made legal (so every point of the design space is a program): block
    # tiles are whole thread tiles, no larger than the matrix, with at most MAX_THREADS threads
    M, N, _ = _gemm_shape(s, acc)
    bm, bn = min(_round_up(bm, tm), _round_up(M, tm)), min(_round_up(bn, tn), _round_up(N, tn))
    while (bm // tm) * (bn // tn) > MAX_THREADS:
        if bm // tm >= bn // tn:
            tm *= 2
            bm = _round_up(bm, tm)
        else:
            tn *= 2
            bn = _round_up(bn, tn)
    a_role, b_role = gemm_operands(s, acc)
    loops = s.loops(out)
    batch, (i, j) = loops[:-2], loops[-2:]
    io, ii = s.split(i, factor=bm)
    jo, ji = s.split(j, factor=bn)
    ty, i_reg = s.split(ii, factor=tm)
    tx, j_reg = s.split(ji, factor=tn)
    s.reorder(*batch, io, jo, ty, tx, i_reg, j_reg)
    if batch:
        s.bind(s.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    s.bind(io, "blockIdx.y")
    s.bind(jo, "blockIdx.x")
    s.bind(ty, "threadIdx.y")
    s.bind(tx, "threadIdx.x")
    if tn in (2, 4):
        s.vectorize(j_reg)  # the copy-out writes float2/float4 rows where they are aligned
    else:  # unrolled, so that nvcc keeps the register tile in registers (an epilogue's loop
        s.unroll(i_reg)  # over a 16x8 tile was not unrolled: the tile went to the stack)
        if tn % 4 == 0:
            jo_reg, jv = s.split(j_reg, factor=4)
            s.unroll(jo_reg)
            s.vectorize(jv)
        else:
            s.unroll(j_reg)
    s.compute_at(acc, tx)
    *_, ai, aj, ak = s.loops(acc)
    ko, ki = s.split(ak, factor=bk)
    s.reorder(ko, ki, ai, aj)
    s.unroll(ai)
    if not shared:
        _vector_reads_of_b(s, aj, tn, tm >= 8 and _rows_of_b(b_role))
        return
    s.unroll(aj)
    if unrolled_k_steps():  # so that the next k's shared loads overlap this k's FMAs
        s.unroll(ki)
    threads = (bm // tm, bn // tn)
    M, N, K = _gemm_shape(s, acc)
    for (name, k_dim, mn_dim), tile, regs in ((a_role, min(bm, M), tm), (b_role, min(bn, N), tn)):
        # the shared tile is laid out [k][m] (A) and [k][n] (B) whatever the operand's layout,
        # so that a thread's tm (tn) values of one k are contiguous: float4 reads into registers
        ndim = len(s.state.stage(name).shape)
        layout = [d for d in range(ndim) if d not in (k_dim, mn_dim)] + [k_dim, mn_dim]
        identity = layout == list(range(ndim))
        cache = s.cache_read(name, "shared", [acc], None if identity else layout)
        s.compute_at(cache, ko)
        rows = 1 if name in gathered else s.state.stage(name).shape[-1]  # the operand's contiguous dimension
        tiles = {k_dim: min(bk, K), mn_dim: tile}
        vector_fetch(s, cache, threads, layout.index(ndim - 1), tiles[ndim - 1] if ndim - 1 in tiles else 1, rows)
        vector_registers(s, cache, acc, ki, regs)  # this k's tm (tn) values


def vector_registers(s, cache, acc: str, at, count: int) -> None:
    """Read the `count` values of the shared tile `cache` that `acc` uses at loop `at` into
    registers, as float4 (or float2) vectors where `count` allows."""
    reg = s.cache_read(cache, "local", [acc])
    s.compute_at(reg, at)
    *_, r = s.loops(reg)
    lanes = 4 if count % 4 == 0 else 2 if count % 2 == 0 else 1
    if lanes > 1:
        ro, ri = s.split(r, factor=lanes)
        s.unroll(ro)
        s.vectorize(ri)


def _vector_reads_of_b(s, aj, tn: int, rows: bool) -> None:
    """Without shared tiles: float4/float2 loads of B's rows feed the register tile where they
    are read along rows; that paid only with 8 rows a thread or more (a 4x4 tile got slower)."""
    lanes = 4 if tn % 4 == 0 else 2 if tn % 2 == 0 else 1
    if lanes > 1 and rows:
        ajo, aji = s.split(aj, factor=lanes)
        s.unroll(ajo)
        s.vectorize(aji)
    else:
        s.unroll(aj)


def _rows_of_b(b_role: tuple) -> bool:
    """Whether B's tile is read along its rows (its j dimension after its k one; not dense's
    W[n, k]), so that a thread's tn values of one k are contiguous."""
    _, k_dim, j_dim = b_role
    return j_dim > k_dim


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def cooperative_fetch(s, cache, threads: tuple) -> None:
    """All threads of the block copy the tile together: fuse its loops, deal the elements out
    to threadIdx.x (fastest, so neighbouring threads read neighbouring addresses) and y."""
    loops = s.loops(cache)
    _deal(s, s.fuse(*loops) if len(loops) > 1 else loops[0], threads)


def _deal(s, fused, threads: tuple) -> None:
    """Deal the iterations of `fused` out to threadIdx.x, then threadIdx.y."""
    ny, nx = threads
    rest, fx = s.split(fused, factor=nx)
    s.bind(fx, "threadIdx.x")
    if ny > 1:
        _, fy = s.split(rest, factor=ny)
        s.bind(fy, "threadIdx.y")


def vector_fetch(s, cache, threads: tuple, dim: int, extent: int, rows: int) -> None:
    """`cooperative_fetch` that copies 4 elements a thread where the source is contiguous:
    `dim`, the cache dimension along the source's rows, is split by 4 and vectorized when its
    tile `extent` and the source's row length `rows` are multiples of 4 (aligned float4
    loads). Neighbouring threads take neighbouring vectors of a row. A transposing fill (the
    vectors run down a column of the cache) is staged through registers by lowering
    (minitc/lowering/double_buffer.py), so its global loads stay float4."""
    if extent % 4 or rows % 4:
        return cooperative_fetch(s, cache, threads)
    loops = list(s.loops(cache))
    vo, vi = s.split(loops[dim], factor=4)
    outer = loops[:dim] + loops[dim + 1 :] + [vo]
    s.reorder(*outer, vi)
    _deal(s, s.fuse(*outer) if len(outer) > 1 else outer[0], threads)
    s.vectorize(vi)


def _gemm_shape(s, acc: str) -> tuple:
    st = s.state.stage(acc)
    (k,) = st.reduce_axes
    return st.shape[-2], st.shape[-1], k.extent


def pick_gpu_tiles(M: int, N: int, K: int, sms: int = 132, batch: int = 1, rows_of_b: bool = False) -> dict:
    """64x64 block tiles of 4x4 per thread (256 threads, 16 FMAs per 8 shared loads) and k
    steps of 16; halved when that divides the matrix, shrunk to cover a small one, and halved
    again (down to 32) while there are fewer blocks than SMs to run them. When B's tile is read
    along its rows (`rows_of_b`: float4 loads) and 128x128 tiles divide the matrix into at
    least one block per SM: 16x8 per thread (128 threads; 128 FMAs per 4 float4 A and 2 float4
    B loads from shared memory) and k-steps of 8. On an H100 (experiments/gpu_gemm_probe.py,
    k-steps unrolled) matmul 4096^3 ran 2.95 ms so, against 3.07 with k-steps of 16 and 3.56
    for 8x8 tiles."""

    def fit(n: int, tile: int, step: int) -> int:
        for t in (tile, tile // 2):
            if n % t == 0:
                return t
        return min(tile, -(-n // step) * step)  # guarded partial tiles

    if rows_of_b and M % 128 == 0 and N % 128 == 0 and batch * (M // 128) * (N // 128) >= sms:
        return {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "bk": fit(K, 8, 8)}

    bm, bn = fit(M, 64, 4), fit(N, 64, 4)
    while batch * -(-M // bm) * -(-N // bn) < sms and max(bm, bn) > 32:
        if bm >= bn:
            bm = fit(M, max(32, bm // 8 * 4), 4)
        else:
            bn = fit(N, max(32, bn // 8 * 4), 4)
    return {"bm": bm, "bn": bn, "tm": 4, "tn": 4, "bk": fit(K, 16, 16)}


def schedule_product(s, out, target, bm=64, bn=64, tm=4, tn=4, bk=16, shared=True):
    """matmul, batch_matmul and dense: the output is the product, so each thread's register
    tile is a local cache of it."""
    acc = s.stage_name(s.cache_write(out, "local"))
    gemm_gpu(s, out, acc, target, bm=bm, bn=bn, tm=tm, tn=tn, bk=bk, shared=shared)


# in this order, before dense_epilogue: the language model lists template parameters in
# registration order (lm/tokenizer.py)
for _tag in ("matmul", "batch_matmul", "dense"):
    template(_tag, GPU_GEMM_PARAMS)(schedule_product)


@template("dense_epilogue", GPU_GEMM_PARAMS)
def schedule_dense_epilogue(s, out, target, bm=64, bn=64, tm=4, tn=4, bk=16, shared=True):
    """The epilogue is the output; the product under it becomes each thread's register tile.
    The elementwise stages between them (bias, activation, a residual add) are inlined into it."""
    product = gemm_producer(s, out)
    inline_epilogue(s, out, product)
    gemm_gpu(s, out, product, target, bm=bm, bn=bn, tm=tm, tn=tn, bk=bk, shared=shared)


@template("conv2d_gemm", GPU_GEMM_PARAMS)
def schedule_conv2d_gemm(s, out, target, bm=64, bn=64, tm=4, tn=4, bk=16, shared=True):
    """The implicit GEMM Y[n] = W @ col[n] (tc.ops.conv2d_gemm): the weight rows are A (float4
    fills), the im2col matrix B, computed from the padded input straight into its shared tile."""
    acc = s.stage_name(s.cache_write(out, "local"))
    col = next(name for name in s.state.stage(acc).read_stages() if s.state.stage(name).tag == "im2col")
    gemm_gpu(s, out, acc, target, bm=bm, bn=bn, tm=tm, tn=tn, bk=bk, shared=shared, gathered=(col,))
    inline_operands(s, acc)  # the gather and the padding: index arithmetic and a select in the fill


def _defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    acc = gemm_producer(s, out) if st.tag == "dense_epilogue" else out
    batch = st.shape[0] if len(st.shape) == 3 else 1
    # B's shared tile is laid out [k][n] for every operand layout (dense's W[n, k] included)
    sms = getattr(target, "sm_count", 0) or 132
    return {**pick_gpu_tiles(*_gemm_shape(s, acc), sms=sms, batch=batch, rows_of_b=True), "shared": True}


for _tag in ("matmul", "batch_matmul", "conv2d_gemm", "dense", "dense_epilogue"):
    defaults(_tag)(_defaults)
