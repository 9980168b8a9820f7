"""GEMM blocking derived from the hardware description, analytically, after BLIS ("Analytical
Modeling Is Enough for High-Performance BLIS", Low, Igual, Smith and Quintana-Ortí, ACM TOMS
2016). Nothing here names a cpu: every number comes from `target.hardware` (measured on the
host: minitc/target/hardware.py).

The micro-kernel keeps an mr x nr tile of C in registers (mr rows broadcast from A, nr = nv
vectors of B's columns) and per k does mr x nv FMAs, mr broadcasts and nv vector loads:

- **register tile.** The accumulators hide the FMA latency: mr x nv >= latency x FMAs issued
  per cycle (`hw.fma_chains`); they, the nv B vectors and one broadcast fit the register file;
  the loads and broadcasts of one k issue no slower than its FMAs.
- **kc from L1.** In the BLIS order the kc x nr micro-panel of B stays in L1 while mr x kc
  slivers of A stream past it. Of the L1's W ways, the A sliver may take
  C_A = floor((W - 1) / (1 + nr / mr)) (one way is left for C and the rest), so
  kc = C_A x sets x line / (mr x element bytes) (the paper's equation for kc).
- **mc from L2, nc from L3.** The mc x kc block of A fills the L2 but for two ways; the kc x nc
  block of B fills this core's share of the L3 but for two ways.
- **which order, and when to block k at all** (`k_block`). minitc's default order keeps the
  mr x K sliver of A in L1 and streams the K x nr micro-panel of B from L2: per k, nr x element
  bytes from L2 every mr x nv / rate cycles. Where that stream needs more than L2_STREAM_SHARE
  of what one core reads from its L2 per cycle (`hw.read_bytes_per_cycle["l2"]`, measured), the
  BLIS order is used with kc from L1; else k is blocked only as far as A's sliver must fit half
  the L1 (measured on the Zen 5: kc = 128 from L1 ran the 128 x 3072 x 768 dense 7% slower than
  blocks of 768 there, whose L2 feeds B at 58 bytes a cycle).
"""

from __future__ import annotations

import math

# (rows, vectors) register tiles considered, in order of preference on ties; 8 x 2 and 4 x 4
# divide the widths (64, 128, 896) that leave 8 x 3 and 6 x 4 a tail
REGISTER_TILES = (
    (6, 2), (4, 3), (5, 2), (8, 1), (12, 1), (3, 4), (2, 4), (7, 1), (1, 4), (8, 3), (6, 4), (14, 2), (8, 2), (4, 4)
)  # fmt: skip
SPARE_REGISTERS = 1  # one register for A's broadcast
L2_STREAM_SHARE = 0.5  # of the L2's read rate, what B's stream may take: the rest is A's, C's and prefetches'


def register_tiles(hw) -> list:
    """The (rows, vectors) tiles that fit `hw`'s register file (accumulators, B's vectors and
    a broadcast) and whose loads keep up with their FMAs."""
    fits = []
    for rows, vecs in REGISTER_TILES:
        if rows * vecs + vecs + SPARE_REGISTERS > hw.vector_registers:
            continue
        fma_cycles = rows * vecs / hw.fma_per_cycle
        load_cycles = vecs / hw.loads_per_cycle + rows / hw.broadcasts_per_cycle
        if load_cycles <= fma_cycles or rows * vecs >= hw.fma_chains:
            fits.append((rows, vecs))
    return fits


def kernel_efficiency(hw, accs: int, loads: float, broadcasts: float) -> float:
    """Fraction of the FMA peak a micro-kernel step reaches from registers, when it does one
    FMA into each of `accs` accumulators, `loads` vector loads and `broadcasts` broadcasts:
    latency hidden (accumulators over hw.fma_chains) and loads not the bottleneck. Every
    register-blocked template (GEMMs, the convolutions, Winograd's products) rates its tiles
    with it."""
    fma_cycles = accs / hw.fma_per_cycle
    load_cycles = loads / hw.loads_per_cycle + broadcasts / hw.broadcasts_per_cycle
    return min(1.0, accs / hw.fma_chains) * min(1.0, fma_cycles / max(load_cycles, 1e-9))


def efficiency(hw, rows: int, vecs: int) -> float:
    """kernel_efficiency of the GEMM tile: rows x vecs accumulators, vecs loads of B, rows
    broadcasts of A."""
    return kernel_efficiency(hw, rows * vecs, vecs, rows)


def kc_from_l1(hw, mr: int, nr: int, esize: int) -> int:
    """The BLIS kc: the A sliver takes C_A of the L1's ways, the B micro-panel the rest."""
    l1 = hw.cache(1)
    ways = l1.ways if l1 and l1.ways else 8
    sets = l1.sets if l1 and l1.ways else (l1.size if l1 else 32768) // (ways * 64)
    line = l1.line if l1 else 64
    c_a = max(1, math.floor((ways - 1) / (1 + nr / mr)))
    return max(16, c_a * sets * line // (mr * esize))


def mc_from_l2(hw, kc: int, mr: int, esize: int) -> int:
    """Rows of A whose mc x kc block fills the L2 but for two of its ways."""
    l2 = hw.cache(2)
    if not l2:
        return 0
    ways = l2.ways or 8
    usable = l2.size * max(1, ways - 2) // ways
    return max(mr, usable // (kc * esize) // mr * mr)


def nc_from_l3(hw, kc: int, nr: int, esize: int, cores: int) -> int:
    """Columns of B whose kc x nc block fills this core's share of the L3 but for two ways."""
    l3 = hw.cache(3)
    if not l3:
        return 0
    ways = l3.ways or 16
    share = l3.size // max(1, min(cores, l3.shared_cpus))
    usable = share * max(1, ways - 2) // ways
    return max(nr, usable // (kc * esize) // nr * nr)


def one_l1_set(hw, stride_bytes: int) -> bool:
    """Whether addresses `stride_bytes` apart all fall into one L1 set (the stride a multiple
    of the L1's way: sets x line bytes, 4 KiB on most x86 cores)."""
    l1 = hw.cache(1)
    way = l1.sets * l1.line if l1 and l1.sets else 4096
    return stride_bytes % way == 0


def b_stream_bytes_per_cycle(hw, mr: int, lanes: int, esize: int) -> float:
    """Bytes per cycle the K x nr micro-panel of B needs from L2 when it does not stay in L1:
    nr x esize per k, every mr x nv / rate cycles."""
    return lanes * esize * hw.fma_per_cycle / mr


def b_stream_too_fast(hw, mr: int, lanes: int, esize: int) -> bool:
    """True where streaming B's micro-panel from L2 would need more than L2_STREAM_SHARE of
    what one core reads from its L2 per cycle."""
    l2_rate = hw.read_bytes_per_cycle.get("l2", 0)
    return l2_rate > 0 and b_stream_bytes_per_cycle(hw, mr, lanes, esize) > L2_STREAM_SHARE * l2_rate


def k_block(hw, K: int, mr: int, nr: int, lanes: int, esize: int, panel_bytes: int) -> int:
    """kc, or 0 for no k blocks. A micro-panel that fits half the L1 needs none. Where the L2
    cannot feed B's stream, the BLIS order with kc from L1 (B's micro-panel in L1). Else
    minitc's order, A's sliver in L1 and B streamed from L2, in blocks as long as A's mr x kc
    sliver fits half the L1 and B's kc x nr micro-panel half of `panel_bytes` (its L2 share)."""
    l1 = hw.cache(1)
    half_l1 = (l1.size if l1 else 32768) // 2
    if K * nr * esize <= half_l1:
        return 0
    if b_stream_too_fast(hw, mr, lanes, esize):
        kc = kc_from_l1(hw, mr, nr, esize)
    else:
        kc = min(half_l1 // (mr * esize), 2 * panel_bytes // (nr * esize))
    return 0 if kc >= K else kc


# -- the tile sizes of one product -------------------------------------------------------------

TILE_COST_SLACK = 0.01  # padded work this close to the least counts as a tie (a guarded tail row)
L2_SHARE = 4  # a packed B panel [K, nc] takes at most this fraction of the L2


def panel_bytes(target) -> int:
    """Bytes a packed B panel may take: a share of the target's L2, so it stays there while
    the row tiles stream past it."""
    return target.cache_bytes("l2") // L2_SHARE


def pick_tiles(M: int, N: int, K: int, target, dtype: str = "float32", batch: int = 1) -> dict:
    """Register tile, panel width, k unroll and k blocks for an M x N x K product, from the
    target's hardware description, by the model above.

    The register tile (mr rows x nr columns, nr a multiple of the target's vector lanes) is the
    one of `register_tiles` with the least padded work (rows and columns rounded
    up to the tile) per unit of efficiency (FMA latency hidden, loads keeping up); of tiles
    within 1% of the least cost, the one with the most accumulators (fewer loads per FMA:
    AVX-512's 8 x 3 over 4 x 3 where both divide the product, AVX2's 6 x 2 over 5 x 2 where
    both leave a tail of rows).
    Without k blocks, the B panel is as wide as fits `panel_bytes(target)` (its A rows are then
    reused from L1 by nc / nr micro-kernels), preferring widths that divide N, keeping at least
    two panels per core. Where the model says B's stream from L2 would starve the FMAs (or the
    micro-panel would not fit the L2), k is cut into blocks of kc from L1: the BLIS order."""
    hw = target.hardware
    vec = target.lanes(dtype)
    esize = 8 if dtype in ("float64", "int64") else 4
    panel = panel_bytes(target)

    def cost(t):
        rows, vecs = t
        nr = vecs * vec
        padded = (-(-M // min(rows, M)) * min(rows, M)) * (-(-N // nr) * nr)
        return padded / (M * N) / efficiency(hw, rows, vecs)

    # among tiles within TILE_COST_SLACK of the least cost, the one with the most accumulators
    # (fewer loads of A and B per FMA), then the cheaper
    tiles = register_tiles(hw)
    least = min(cost(t) for t in tiles)
    near = [t for t in tiles if cost(t) <= least * (1 + TILE_COST_SLACK)]
    rows, vecs = min(near, key=lambda t: (-t[0] * t[1], cost(t)))
    mr, nr = min(rows, M), vecs * vec
    ku = 4 if K % 4 == 0 else (2 if K % 2 == 0 else 1)
    kc = _equal_blocks(K, k_block(hw, K, mr, nr, vec, esize, panel), ku)
    tiles = ceil_div(N, nr)
    if kc:  # the kc x nc block of B lives in the L3
        fit = max(1, nc_from_l3(hw, kc, nr, esize, target.num_cores) // nr)
    else:  # the K x nc panel in a share of the L2
        fit = max(1, panel // (K * nr * esize))
    cores = max(1, target.num_cores)
    keep = max(1, batch * tiles // (2 * cores))  # panels enough for every core, when there are
    m = max(1, min(fit, keep, tiles))
    while m > 1 and tiles % m:
        m -= 1
    return {"mr": mr, "nr": nr, "nc": nr * m, "ku": ku, "kc": kc}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _equal_blocks(K: int, kc: int, ku: int) -> int:
    """kc blocks of equal length, each whole unrolls of ku, at most `kc` long (0: no blocks).
    Where a few more blocks divide K exactly (1024 in 8 blocks of 128, not 7 of 148), those:
    a block that runs past K puts a guard on every k step of the micro-kernel."""
    if not kc or kc >= K:
        return 0
    least = ceil_div(K, kc)
    for blocks in range(least, least + max(1, least // 4) + 1):
        if K % blocks == 0 and (K // blocks) % ku == 0:
            return K // blocks
    return ceil_div(ceil_div(K, least), ku) * ku
