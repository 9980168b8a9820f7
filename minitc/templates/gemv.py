"""Matrix-vector templates: a dense layer with few rows (text generation's decode steps, where M
is batch x one new token), Y[M, N] = epilogue(X[M, K] @ W + b). Each weight is read once and
is much larger than X, so the kernel is bound by how fast it streams W from memory. Both
templates read every weight element once, for all M rows together, and keep the whole
reduction over K in registers (no k blocks, no packing): parallel over panels of output
columns, which for the model compiler's packed weight ([N/B, K, B]) are contiguous regions.

Which one applies depends on where W is contiguous (`weight_form`):

`gemv` (W read along N: the packed [N/B, K, B] weight, or [K, N]): vectors of W's columns,
X's elements broadcast, an M x nr register tile over the whole of K; this is the GEMM
micro-kernel (gemm.gemm_schedule) with all rows in one tile, no k blocks and no packing:

    for jo in parallel(N / nc):                         # a panel of nc columns per task
        for jr in range(nc / nr):
            acc[M, nr] = 0                              # M x nr/L vector accumulators
            for ko in range(K / ku):
                for kk in unrolled(ku):
                    for i in unrolled(M):
                        for jv in unrolled(nr / L):
                            for lane in vectorized(L):  # nr/L streams of W, one line each per k
                                acc[i, jv*L + lane] += X[i, k] * W[.., k, ..]
            Y[:, tile] = epilogue(acc)                  # bias, activation, residual: from registers

`gemv_dot` (W read along K: torch's [N, K]): dot products, `lanes` partial sums per row of W
(one cache line: rfactor), `rows` rows of W read side by side, then the horizontal step:

    for jo in parallel(N / nc):
        for jt in range(nc / rows):
            part[M, rows, lanes] = 0
            for ko in range(K / lanes):
                for i in unrolled(M):
                    for r in unrolled(rows):
                        for kl in vectorized(lanes):
                            part[i, r, kl] += X[i, ko*lanes + kl] * W[jt*rows + r, ko*lanes + kl]
            Y[:, jt*rows : +rows] = epilogue(sum over kl of part)

The register tile's sizes come from the target (`gemv_vectors`, `dot_rows`): the fewest weight
streams whose step keeps up with the rate the weight arrives (`step_bytes_per_cycle`: FMA
latency and rate, loads and broadcasts, against what a core reads from its L2), at least the
target's `row_streams`, and no more than its vector registers hold. On Zen 5 that is 4 vectors
of W at M = 1 (8, enough for the FMAs' peak, ran 10-15% slower) and 3 at M = 8 (1 ran at half
the speed). A dense stage takes these templates for M <= MAX_ROWS (`gemv_tag`, registered with
`@specializes`: `template_tag` asks it); larger M keeps the GEMM's.
"""

from __future__ import annotations

from dataclasses import dataclass

from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.templates.elementwise import PARALLEL, check_int, extent, pick_tile, worth_parallel
from minitc.templates.gemm import epilogue_anchor, gemm_operands, gemm_schedule, inline_epilogue, weight_block
from minitc.templates.params import Ints, Param
from minitc.templates.registry import choices, defaults, specializes, template

_PANEL = Param(
    "nc",
    "output columns per parallel task (whole tiles)",
    Ints(1, 65536),
    "whole tiles, about TASKS_PER_CORE tasks per core",
    candidates=(16, 32, 48, 64, 96, 128, 192, 256),
)
_KU = Param(
    "ku",
    "unroll of the k loop",
    Ints(1, 16),
    "4, 2 or 1 (gemv_dot: 2 or 1), dividing the k steps",
    candidates=(1, 2, 4, 8),
)
GEMV_PARAMS = (
    Param(
        "nr",
        "columns of the register tile (whole vectors of W)",
        Ints(1, 4096),
        "the fewest weight streams whose step keeps up with the L2 (gemv_vectors) times the lanes",
        candidates=(8, 16, 24, 32),
    ),
    _PANEL,
    _KU,
    PARALLEL,
)
GEMV_DOT_PARAMS = (
    Param("rows", "rows of W read side by side", Ints(1, 1024),
          "the fewest weight streams whose step keeps up with the L2 (dot_rows)", candidates=(1, 2, 4, 8, 16)),
    Param("lanes", "partial sums per row of W (0: one product per step)", Ints(0, 1024),
          "one cache line of W's row (at least a preferred vector), fewer for a short K", candidates=(4, 7, 8, 16)),
    _PANEL, _KU, PARALLEL,
)  # fmt: skip

# Rows of X these templates take. A tile of 8 rows x 1 vector, W's vector and a broadcast fit
# the 16 registers of AVX2; and with 2 M flops per 4-byte weight every x86 core is still
# memory-bound there (measured on Zen 5: docs/scheduling.md).
MAX_ROWS = 8
TASKS_PER_CORE = 4  # panels per core: tasks are claimed dynamically, so a slow core takes fewer
LINE_BYTES = 64  # a cache line on every x86-64: gemv_dot's partial sums cover one per row and step
SPARE_REGISTERS = 1  # a broadcast of X (gemv) or a vector of X (gemv_dot)
MAX_STREAMS = 16  # weight streams a tile may read side by side, at most
KEEP_UP = 0.95  # a tile within 5% of the rate the weight arrives at keeps up with it


def gemv_product(s, out: str) -> str:
    """The dense product stage of `out` (itself, or under its elementwise epilogue)."""
    return epilogue_anchor(s, out, "dense", "gemv")


def weight_form(s, product: str) -> str:
    """The form of W's reads: "columns" in vectors along N (packed or [K, N]), "dot" along K ([N, K])."""
    _, (_, b_k, b_j) = gemm_operands(s, product)
    return "columns" if weight_block(s, product) or b_j > b_k else "dot"


@specializes("dense", "dense_epilogue")
def gemv_tag(s, out: str):
    """The template of a dense stage of at most MAX_ROWS rows (gemv or gemv_dot), else None."""
    try:
        product = gemv_product(s, out)
        rows = s.state.stage(product).shape[0]
        form = weight_form(s, product)
    except ScheduleError:
        return None
    if rows > MAX_ROWS:
        return None
    return "gemv" if form == "columns" else "gemv_dot"


@dataclass(frozen=True)
class DenseShape:
    """The dense product under `out`: its stage, rows M, columns N, reduction K, dtype and the
    block of its packed weight (0: not packed)."""

    product: str
    M: int
    N: int
    K: int
    dtype: str
    block: int

    @classmethod
    def of(cls, s, out: str) -> DenseShape:
        product = gemv_product(s, out)
        st = s.state.stage(product)
        (k,) = st.reduce_axes
        return cls(product, st.shape[0], st.shape[1], k.extent, st.dtype, weight_block(s, product))

    def tasks(self, tile: int, target) -> dict:
        """The parameters both templates share: panels of whole tiles (`_panel`), and parallel
        where the weight is worth sharing among the cores."""
        nbytes = self.N * self.K * dtypes.bits(self.dtype) // 8
        return {"nc": _panel(-(-self.N // tile), tile, target), "parallel": worth_parallel(nbytes, target)}


def _panel(tiles: int, tile: int, target) -> int:
    """Columns per parallel task: whole tiles, about TASKS_PER_CORE tasks per core, dividing the
    tiles where a nearby count does."""
    per_task = max(1, tiles // (TASKS_PER_CORE * max(1, target.num_cores)))
    return tile * pick_tile(tiles, per_task) if per_task < tiles else tile * tiles


def step_bytes_per_cycle(hw, accs: int, loads: int, broadcasts: int, nbytes: int) -> float:
    """Bytes of W one step of a register tile consumes per cycle, when it does one FMA into
    each of `accs` accumulators, `loads` vector loads and `broadcasts` broadcasts, reading
    `nbytes` of W: the step takes as long as the FMAs issue, the loads issue, or one FMA's
    latency (each accumulator's chain takes one FMA per step), whichever is longest."""
    cycles = max(
        accs / hw.fma_per_cycle, loads / hw.loads_per_cycle + broadcasts / hw.broadcasts_per_cycle, hw.fma_latency
    )
    return nbytes / cycles


def _streams(target, dtype: str, registers, step) -> int:
    """Weight streams (vectors of W's columns, or rows of W) one step reads: the fewest whose
    step keeps up with the weight (with what one core reads from its L2, the fastest level a
    weight beyond the L1 streams from, or where no tile does, with the fastest tile), at least
    the target's row_streams; and no more than the vector registers hold. `registers(n)` and
    `step(n)` (accumulators, loads, broadcasts, bytes) describe the tile of n streams."""
    hw = target.hardware
    fit = [n for n in range(1, MAX_STREAMS + 1) if registers(n) + SPARE_REGISTERS <= hw.vector_registers] or [1]
    rates = {n: step_bytes_per_cycle(hw, *step(n)) for n in fit}
    vector_bytes = target.lanes(dtype) * dtypes.bits(dtype) // 8
    arriving = hw.read_bytes_per_cycle.get("l2", 0) or hw.loads_per_cycle * vector_bytes
    enough = KEEP_UP * min(arriving, max(rates.values()))
    fewest = min(n for n, rate in rates.items() if rate >= enough)
    return min(max(fit), max(fewest, target.row_streams))


# -- gemv: vectors along N ---------------------------------------------------------------------


def gemv_vectors(target, M: int, N: int, dtype: str, block: int = 0) -> int:
    """Vectors of W's columns per register tile (nr = vectors x lanes), at most as many as N has."""
    vec, esize = target.lanes(dtype), dtypes.bits(dtype) // 8
    vectors = _streams(
        target, dtype, lambda n: (M + 1) * n, lambda n: (M * n, n, M, n * vec * esize)
    )  # M x n accumulators and n vectors of W; per step n loads of W and M broadcasts of X
    vectors = min(vectors, -(-N // vec))
    if block:  # a tile covers whole blocks of the packed weight
        per_block = max(1, block // vec)
        vectors = max(per_block, vectors // per_block * per_block)
    return vectors


@template("gemv", GEMV_PARAMS)
def schedule_gemv(s, out, target, nr=64, nc=256, ku=4, parallel=True):
    """All M rows in one register tile of nr columns over the whole of K, W read in place,
    parallel over panels of nc columns (module docstring)."""
    check_int("gemv", nr=nr, nc=nc, ku=ku)
    product = gemv_product(s, out)
    if weight_form(s, product) != "columns":
        raise ScheduleError(f"gemv template: {product} reads W along K; gemv_dot schedules it")
    M = s.state.stage(product).shape[0]
    if product == out:
        acc = s.stage_name(s.cache_write(out, "local"))
    else:
        inline_epilogue(s, out, product)
        acc = product
    gemm_schedule(
        s, out, acc, target, mr=M, nr=nr, nc=nc, ku=ku, kc=0, pack_b=False, parallel="n" if parallel else "none"
    )


@defaults("gemv")
def gemv_defaults(s, out, target) -> dict:
    d = DenseShape.of(s, out)
    nr = gemv_vectors(target, d.M, d.N, d.dtype, d.block) * target.lanes(d.dtype)
    return {"nr": nr, "ku": next(u for u in (4, 2, 1) if d.K % u == 0), **d.tasks(nr, target)}


@choices("gemv")
def gemv_choices(s, out, target) -> dict:
    """Tiles of 1 to twice the default's vectors, and panels of 1 to 16 tiles."""
    d = DenseShape.of(s, out)
    vec = target.lanes(d.dtype)
    most = 2 * gemv_vectors(target, d.M, d.N, d.dtype, d.block)
    nrs = tuple(v * vec for v in range(1, most + 1) if v * vec <= -(-d.N // vec) * vec)
    return {"nr": nrs, "nc": tuple(sorted({nr * m for nr in nrs for m in (1, 2, 4, 8, 16)}))}


# -- gemv_dot: dot products along K ------------------------------------------------------------


def dot_lanes(target, K: int, dtype: str) -> int:
    """Partial sums per row of W: one cache line (at least a vector of the preferred width),
    fewer for a short K; 0 (no partial sums: one product per step) below a vector."""
    line = max(target.preferred_lanes(dtype), LINE_BYTES * 8 // dtypes.bits(dtype))
    if K >= line:
        return line
    simd = target.preferred_lanes(dtype)
    return K // simd * simd


def dot_rows(target, M: int, N: int, lanes: int, dtype: str) -> int:
    """Rows of W read side by side (each `lanes` partial sums for every row of X)."""
    v = max(1, -(-lanes // target.lanes(dtype)))  # vectors per row of W and step
    nbytes = v * target.lanes(dtype) * dtypes.bits(dtype) // 8
    rows = _streams(
        target, dtype, lambda n: (M + 1) * n * v, lambda n: (M * n * v, (n + M) * v, 0, n * nbytes)
    )  # M x n x v accumulators and n x v vectors of W; per step n x v loads of W and M x v of X
    return min(N, rows)


@template("gemv_dot", GEMV_DOT_PARAMS)
def schedule_gemv_dot(s, out, target, rows=4, lanes=16, nc=64, ku=2, parallel=True):
    """Dot products of X's rows with `rows` rows of W at a time, `lanes` partial sums each,
    then the horizontal step and the epilogue per tile; parallel over panels of nc rows of W
    (module docstring). lanes=0: one product per step, the tile's M x rows sums unrolled."""
    check_int("gemv_dot", rows=rows, nc=nc, ku=ku)
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 0:
        raise ScheduleError(f"gemv_dot template: lanes must be an int >= 0 (0: no partial sums), got {lanes!r}")
    product = gemv_product(s, out)
    if weight_form(s, product) != "dot":
        raise ScheduleError(f"gemv_dot template: {product} reads W along N; gemv schedules it")
    if product != out:
        inline_epilogue(s, out, product)
    rf = _partial_sums(s, product, lanes)
    i, j, *k = s.loops(out)  # k: the horizontal step's loop when out is the product itself
    jp, jt = s.split(j, factor=max(rows, nc // rows * rows))
    jt, jr = s.split(jt, factor=rows)
    s.reorder(jp, jt, *k, i, jr)
    s.unroll(i)
    s.unroll(jr)
    if product != out:
        s.compute_at(product, jt)
        pi, pj, *pk = s.loops(product)
        s.reorder(*pk, pi, pj)
        s.unroll(pi)
        s.unroll(pj)
    if rf is not None:
        s.compute_at(rf, jt)
        ri, rj, kl, *ko = s.loops(rf)  # no ko where the lanes cover K
        _unrolled_k(s, ko, ku, [ri, rj, kl])
        s.vectorize(kl)
    if parallel and extent(s, jp) > 1:
        s.parallel(jp)


def _partial_sums(s, product: str, lanes: int):
    """Split the product's k by `lanes` and rfactor the lanes (a stage of partial sums); None
    for lanes=0 or lanes past K (lanes equal to K: the whole row in one step)."""
    (k,) = s.loops(product)[2:]
    K = extent(s, k)
    if not lanes or lanes > K:
        return None
    inner = s.split(k, factor=lanes)[1] if lanes < K else k
    return s.rfactor(inner)


def _unrolled_k(s, ko: list, ku: int, inner: list) -> None:
    """The steps over k (`ko`: one loop or none) outside the `inner` loops (rows of X, rows of W,
    lanes), ku steps unrolled; the rows unrolled."""
    s.unroll(inner[0])
    s.unroll(inner[1])
    if not ko:
        return
    (ko,) = ko
    if ku > 1 and extent(s, ko) > ku:
        ko, kk = s.split(ko, factor=ku)
        s.reorder(ko, kk, *inner)
        s.unroll(kk)
    else:
        s.reorder(ko, *inner)


@defaults("gemv_dot")
def gemv_dot_defaults(s, out, target) -> dict:
    d = DenseShape.of(s, out)
    lanes = dot_lanes(target, d.K, d.dtype)
    rows = dot_rows(target, d.M, d.N, lanes, d.dtype)
    steps = d.K // lanes if lanes else d.K
    return {"rows": rows, "lanes": lanes, "ku": 2 if steps % 2 == 0 else 1, **d.tasks(rows, target)}


@choices("gemv_dot")
def gemv_dot_choices(s, out, target) -> dict:
    d = DenseShape.of(s, out)
    simd = target.preferred_lanes(d.dtype)
    lanes = tuple(simd * m for m in (1, 2, 4) if simd * m <= d.K)
    rows = tuple(r for r in (1, 2, 3, 4, 6, 8) if r <= d.N)
    return {"rows": rows, "lanes": lanes, "nc": tuple(sorted({r * m for r in rows for m in (4, 16, 64)}))}
