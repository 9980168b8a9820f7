"""Schedule templates for the convolution family on NCHW data: `conv2d`, `depthwise_conv2d`,
`max_pool2d`, `avg_pool2d`.

conv2d is a direct convolution around a register-blocked micro-kernel (weights stored [C, R, S, K]
take the channel-vector variant of conv_channels.py instead). One parallel task owns a
tile of `ohb` output rows (and, with `kgroups` > 1, a share of the output channels): it pads the
input rows the tile reads into a local buffer (compute_at of the `pad` stage), then for each
block of `kb` output channels accumulates a [kb, ohb, OW] tile in a local buffer (cache_write +
compute_at) and copies it out. Inside, the micro-kernel keeps kb x ohb x owv vectors of `lanes`
output columns in registers (unrolled loops over constant tile indices) and sweeps the reduction
rc (blocked by `rcb`), ry, rx: each step is kb weight broadcasts, ohb x owv contiguous input
loads and kb x ohb x owv FMAs.

    for n_oh_o_k_o_o in parallel(N * OH/ohb * kgroups):
        pad[C, ohb*sh + .., W + 2pw] = select(inside, X[..], 0)
        for k_o_i in range(K/kb/kgroups):
            acc[kb, ohb, OW] = 0
            for rc_o, ow_o, rc_i:                       # ow_o: OW / (owv*lanes) micro-tiles
                for ry, rx in unrolled(R), unrolled(S):
                    for k, oh, ow_v in unrolled(kb), unrolled(ohb), unrolled(owv):
                        acc[k, oh, ow_v*lanes : +lanes] += pad[rc, oh*sh + ry*dh, ..] * W[k, rc, ry, rx]
            conv2d[.., k_o*kb : +kb, oh_o*ohb : +ohb, :] = acc

depthwise_conv2d and the pools share one template: a task per (image, channel, `oht` rows),
the padded rows in a local buffer, an accumulator tile of ohb x owv vectors swept over the
window (unrolled).

Every template uses only the public primitives and always applies the same steps (tile sizes
change decisions, not structure), so its trace is a point of the tuner's design space. The
`@defaults` functions choose sizes that divide the shape where they can; any size is correct.
"""

from __future__ import annotations

from minitc import dtypes
from minitc.errors import ScheduleError
from minitc.target.cpu import SPLIT_512_BITS
from minitc.templates.conv_channels import channel_defaults, schedule_conv2d_channels, unroll_micro_kernel
from minitc.templates.gemm import cache_under_epilogue, epilogue_anchor
from minitc.templates.gemm_blocking import kernel_efficiency
from minitc.templates.params import PLACES, SWITCH, Ints, Param
from minitc.templates.registry import defaults, template

SPARE_REGISTERS = 4  # vector registers left to the weight broadcast and the input vectors

# -- the parameters (shared with conv_nchwc.py and winograd.py) -----------------------------------
_TILE = "the micro-kernel whose accumulators fit the registers with the best FMA efficiency per padded work: "
KB = Param(
    "kb",
    "output channels (or channel blocks) per micro-kernel",
    Ints(1, 64),
    _TILE + "up to 16, dividing K where it can",
    candidates=(1, 2, 3, 4, 6, 8),
)
OHB = Param(
    "ohb",
    "output rows per micro-kernel",
    Ints(1, 64),
    _TILE + "up to 8, dividing the rows where it can",
    candidates=(1, 2, 3, 4, 7),
)
OWV = Param(
    "owv",
    "vectors of output columns per micro-kernel",
    Ints(1, 64),
    _TILE + "dividing a row's vectors",
    candidates=(1, 2, 3, 4),
)
LANES = Param(
    "lanes",
    "output columns per vector",
    Ints(1, 64),
    "the row's preferred vector width (target lanes), narrower for a short or strided row",
    candidates=(4, 7, 8, 16),
)
RCB = Param(
    "rcb",
    "input channels per reduction block (0: all)",
    Ints(0, 65536),
    "the most channels dividing C whose input rows and weights fit half the L1d "
    "(a blocked 1x1: all where its weights fit the L1d, else the BLIS kc)",
    candidates=(0, 4, 8, 16, 32),
)
UNROLL_WINDOW = Param(
    "unroll_window",
    "unroll the window's loops (ry, rx)",
    SWITCH,
    "true for windows up to 5x5 (7x7 for the sliding-window templates)",
)
PAD = Param(
    "pad",
    "where the padded input is computed: per task (tile), in the loads (inline), or once (root)",
    PLACES,
    "tile (conv2d_nchwc: root; inline for an input block narrower than a vector)",
)
OHT = Param(
    "oht",
    "output rows per parallel task",
    Ints(1, 65536),
    "the most rows (a multiple of ohb, or a divisor) whose tile stays in the L1d, with tasks for every core",
    candidates=(1, 2, 4, 8, 14),
)
CONV_PARAMS = (
    KB, OHB, OWV, LANES, RCB,
    Param("kgroups", "parallel groups of output-channel blocks per row tile", Ints(1, 64),
          "the fewest groups that balance the row tiles over the cores (static makespan)", candidates=(1, 2, 4)),
    UNROLL_WINDOW, PAD,
)  # fmt: skip
WINDOW_PARAMS = (
    OHT,
    Param(OHB.name, OHB.meaning, OHB.domain, "up to 4 rows dividing OH whose accumulators fit half the registers",
          OHB.candidates),
    Param(OWV.name, OWV.meaning, OWV.domain, "the most vectors of a row whose accumulators fit a quarter of the "
          "registers", OWV.candidates),
    LANES, UNROLL_WINDOW, PAD,
)  # fmt: skip


# -- helpers -------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def find_pad_stage(s, out: str):
    """The name of the `pad` stage `out` reads, or None when the operator has no padding."""
    for name in s.state.stage(out).read_stages():
        if s.state.stage(name).tag == "pad":
            return name
    return None


def _attrs(s, out: str) -> dict:
    return s.tensor(out).op.attrs


def _lanes(extent: int, width: int, strided: bool = False) -> int:
    """Vector lanes for a row of `extent` outputs. The register width when it divides the row;
    otherwise a divisor of the row, so that no vector is masked (a masked accumulator vector is
    never promoted to a register): for strided (gathered) inputs a power of two, else the row
    itself when it fits one register (7), else a divisor just under the width (28 -> 7). Lanes
    that are not a power of two cost extra loads and shuffles but keep the loop unguarded."""
    if extent % width == 0:
        return width
    pow2 = [p for p in (width // 2, width // 4) if p >= 4 and extent % p == 0]
    if strided and pow2:
        return pow2[0]
    if extent <= width:
        return extent
    near = [d for d in _divisors(extent) if width // 2 < d < width]
    if near:
        return max(near)
    return pow2[0] if pow2 else width


def acc_registers(target) -> int:
    """Accumulator registers of the conv2d micro-kernel: the target's vector registers but
    SPARE_REGISTERS (12 of AVX2's 16, 28 of AVX-512's 32)."""
    return target.vector_registers - SPARE_REGISTERS


def row_width(target, dtype: str, extent: int) -> int:
    """The register width (lanes) that vectors along a row of `extent` outputs are cut from:
    the target's full width, except where 512-bit ops are split in halves and only 256 bits
    divide the row. There whole 256-bit vectors run as many lanes per cycle, where wider ones
    would carry idle or masked lanes (56 = 7 x 8, not 16 x k)."""
    width = target.lanes(dtype)
    if target.full_rate_512:
        return width
    narrow = min(width, max(1, SPLIT_512_BITS // dtypes.bits(dtype)))
    return narrow if extent % width and not extent % narrow else width


def _vector_loads(lanes: int, width: int) -> int:
    """Loads that one unaligned contiguous vector of `lanes` elements costs: one per
    power-of-two piece (7 lanes: 4 + 2 + 1)."""
    return sum(bin(min(width, lanes - w)).count("1") for w in range(0, lanes, width))


def _vectorize_rows(s, stage: str, lanes: int) -> None:
    """Vectorize the innermost (row) loop of an elementwise stage such as the padding."""
    inner = s.loops(stage)[-1]
    _, vec = s.split(inner, factor=lanes)
    s.vectorize(vec)


def _place_pad(s, pad: str | None, where: str, tile_loop, lanes: int) -> None:
    """Padding computed per parallel tile ("tile"), substituted into the reads ("inline"), or
    computed once before the convolution ("root", parallel over its channels)."""
    if pad is None:
        return
    if where == "inline":
        s.compute_inline(pad)
        return
    if where == "tile":
        s.compute_at(pad, tile_loop)
    elif where == "root":
        s.parallel(s.loops(pad)[1])
    else:
        raise ScheduleError(f"pad must be 'tile', 'inline' or 'root', got {where!r}")
    _vectorize_rows(s, pad, lanes)


def _static_makespan(works: list, threads: int) -> float:
    """Time of the slowest thread over the ideal when the parallel runtime splits `works` (one
    per iteration of the parallel loop) into `threads` contiguous chunks (1.0: balanced)."""
    n = max(1, min(len(works), threads))
    chunks = [sum(works[t * len(works) // n : (t + 1) * len(works) // n]) for t in range(n)]
    return max(chunks) * threads / sum(works) if sum(works) else 1.0


# -- conv2d --------------------------------------------------------------------------------------


@template("conv2d", CONV_PARAMS)
def schedule_conv2d(s, out, target, kb=4, ohb=3, owv=1, lanes=8, rcb=0, kgroups=1, unroll_window=True, pad="tile"):
    """Direct NCHW convolution (see the module docstring). kb: output channels, ohb: output rows
    and owv: vectors of `lanes` output columns per micro-kernel; rcb: input channels per
    reduction block (0: all); kgroups: parallel groups of output-channel blocks per row tile;
    unroll_window: unroll ry and rx; pad: "tile", "inline" or "root"."""
    conv = conv_producer(s, out)
    K, C = s.state.stage(conv).shape[1], s.state.stage(conv).reduce_axes[0].extent
    pad_stage = find_pad_stage(s, conv)
    if _attrs(s, conv).get("weight_layout") == "CRSK":  # output channels in the lanes
        tile = schedule_conv2d_channels(s, out, conv, kb, ohb, owv, lanes, rcb, kgroups, unroll_window)
        _place_pad(s, pad_stage, pad, tile, lanes)
        return
    acc = cache_under_epilogue(s, out, conv)  # an epilogue is applied to the tile as it is stored

    # output: parallel over (image, row tile, channel group); a [kb, ohb, OW] tile per k_o
    n, k, oh, ow = s.loops(out)
    ko, ki = s.split(k, factor=kb)
    kgo, kgi = s.split(ko, nparts=min(kgroups, _cdiv(K, kb)))
    oho, ohi = s.split(oh, factor=ohb)
    owo, owl = s.split(ow, factor=lanes)
    s.reorder(n, oho, kgo, kgi, ki, ohi, owo, owl)
    tile = s.fuse(n, oho, kgo)
    s.parallel(tile)
    s.vectorize(owl)
    _place_pad(s, pad_stage, pad, tile, lanes)

    # micro-kernel: kb x ohb x owv accumulator vectors, the reduction outside them
    s.compute_at(acc, kgi)
    an, ak, aoh, aow, rc, ry, rx = s.loops(acc)
    wo, wi = s.split(aow, factor=owv * lanes)
    wv, wl = s.split(wi, factor=lanes)
    rco, rci = s.split(rc, factor=rcb or C)
    s.reorder(an, rco, wo, rci, ry, rx, ak, aoh, wv, wl)
    unroll_micro_kernel(s, (ry, rx), unroll_window, (ak, aoh, wv), wl)


def conv_producer(s, out: str) -> str:
    """The convolution stage itself, or the one under an elementwise epilogue `out` (a fused
    kernel of the model front end: bias, residual add, activation)."""
    return epilogue_anchor(s, out, "conv2d", "conv2d")


@defaults("conv2d")
def conv2d_defaults(s, out, target) -> dict:
    """Tile sizes for the shape and target: at most `acc_registers(target)` accumulator
    registers per micro-kernel, rated by the hardware's FMA latency, FMA rate and loads per
    cycle (gemm_blocking.kernel_efficiency) over the padded work, ties to the fewest loads per
    FMA; sizes that divide K, OH and
    the vectors of a row when possible (a masked vector in the accumulator tile is never
    unrolled into registers), input rows and weights of a reduction block within half the L1d."""
    out = conv_producer(s, out)
    if _attrs(s, out).get("weight_layout") == "CRSK":
        return channel_defaults(s, out, target)
    st = s.state.stage(out)
    N, K, OH, OW = st.shape
    C, R, S = (a.extent for a in st.reduce_axes)
    sh, sw = _attrs(s, out)["stride"]
    dh, dw = _attrs(s, out)["dilation"]
    width = row_width(target, st.dtype, OW)
    lanes = _lanes(OW, width, strided=sw > 1)
    regs = _cdiv(lanes, width)  # registers per vector
    nvec = _cdiv(OW, lanes)
    per_vector = lanes if sw > 1 else _vector_loads(lanes, width)  # strided: lane by lane
    budget = acc_registers(target)
    best = None
    for kb in range(1, min(K, 16) + 1):
        for ohb in range(1, min(OH, 8) + 1):
            for owv in _divisors(nvec) if lanes == width else [1]:  # see _lanes
                acc = kb * ohb * owv * regs
                if acc > budget and (kb, ohb, owv) != (1, 1, 1):
                    continue
                # per step: ohb x owv input vectors loaded, kb weights broadcast
                eff = kernel_efficiency(target.hardware, acc, ohb * owv * per_vector, kb)
                waste = (_cdiv(K, kb) * kb / K) * (_cdiv(OH, ohb) * ohb / OH)
                key = (round(eff / waste, 3), round(acc / (ohb * owv * per_vector + kb), 3), kb)
                if best is None or key > best[0]:
                    best = (key, dict(kb=kb, ohb=ohb, owv=owv))
    params = best[1]
    # reduction block: what one output tile's sweep over a block of channels reads, its input
    # rows (the tile's columns and the window's halo, not the whole row) and the block's
    # weights, which the next tile reads again, stays within half of L1. Counting whole rows
    # (58 columns for a 14-wide tile) gave ResNet's 3x3 64->64 at 56x56 rcb = 16 where 32 and 64
    # ran 3% faster on a Zen 5 (docs/hardware.md)
    in_rows = (params["ohb"] - 1) * sh + (R - 1) * dh + 1
    in_cols = (params["owv"] * lanes - 1) * sw + (S - 1) * dw + 1
    per_channel = 4 * (in_rows * in_cols + params["kb"] * R * S)
    rcb = max([d for d in _divisors(C) if d * per_channel <= target.cache_bytes("l1d") // 2] or [1])
    # channel groups: split the output channels of a row tile over tasks only when the row
    # tiles alone balance badly over the cores: each group repeats the padding of its rows, and
    # LLVM then tends not to unswitch the row guard of a partial tile out of the micro-kernel
    ohb, kblocks = params["ohb"], _cdiv(K, params["kb"])
    rows = [min(ohb, OH - i * ohb) for i in range(_cdiv(OH, ohb))] * N
    threads = max(1, target.num_cores)

    def cost(g):
        per = _cdiv(kblocks, g)
        groups = [max(0, min(per, kblocks - j * per)) for j in range(g)]
        return _static_makespan([r * b for r in rows for b in groups], threads) * (1 + 0.15 * (g - 1))

    kgroups = min(range(1, min(kblocks, 8) + 1), key=cost)
    return dict(params, lanes=lanes, rcb=rcb, kgroups=kgroups, unroll_window=R * S <= 25, pad="tile")


# -- depthwise_conv2d and pooling ----------------------------------------------------------------


def _schedule_window(s, out, target, oht, ohb, owv, lanes, unroll_window, pad):
    """Per-channel sliding windows: a parallel task per (image, channel, oht output rows), the
    padded rows computed in it, an accumulator tile of ohb rows x owv vectors swept over the
    window."""
    pad_stage = find_pad_stage(s, out)
    acc = s.cache_write(out, "local")
    n, c, oh, ow = s.loops(out)
    oho, ohi = s.split(oh, factor=oht)
    owo, owl = s.split(ow, factor=lanes)
    s.reorder(n, c, oho, ohi, owo, owl)
    tile = s.fuse(n, c, oho)
    s.parallel(tile)
    s.vectorize(owl)
    _place_pad(s, pad_stage, pad, tile, lanes)

    s.compute_at(acc, tile)
    an, ac, aoh, aow, ry, rx = s.loops(acc)
    ho, hi = s.split(aoh, factor=ohb)
    wo, wi = s.split(aow, factor=owv * lanes)
    wv, wl = s.split(wi, factor=lanes)
    s.reorder(an, ac, ho, wo, ry, rx, hi, wv, wl)
    unroll_micro_kernel(s, (ry, rx), unroll_window, (hi, wv), wl)


def _window_defaults(s, out, target) -> dict:
    st = s.state.stage(out)
    _, _, OH, OW = st.shape
    R, S = (a.extent for a in st.reduce_axes)
    width = row_width(target, st.dtype, OW)
    lanes = _lanes(OW, width, strided=_attrs(s, out)["stride"][1] > 1)
    regs = _cdiv(lanes, width)
    nvec = _cdiv(OW, lanes)
    accs = target.vector_registers // 2  # the window's accumulators: half the registers
    owv = max(d for d in _divisors(nvec) if d * regs <= accs // 2) if lanes == width else 1
    ohb = max(d for d in range(1, 5) if d * owv * regs <= accs and (OH % d == 0 or d == 1))
    # rows per task: a multiple of ohb whose accumulator tile stays well inside L1
    per_row = 4 * OW
    oht = ohb * max(1, min(_cdiv(OH, ohb), (target.cache_bytes("l1d") // 4) // (per_row * ohb)))
    return dict(oht=oht, ohb=ohb, owv=owv, lanes=lanes, unroll_window=R * S <= 49, pad="tile")


@template("depthwise_conv2d", WINDOW_PARAMS)
def schedule_depthwise_conv2d(s, out, target, oht=8, ohb=2, owv=2, lanes=8, unroll_window=True, pad="tile"):
    """Depthwise convolution: oht output rows per parallel task, ohb x owv accumulator vectors
    of `lanes` columns; unroll_window unrolls ry and rx; pad: "tile", "inline" or "root"."""
    _schedule_window(s, out, target, oht, ohb, owv, lanes, unroll_window, pad)


@template("max_pool2d", WINDOW_PARAMS)
def schedule_max_pool2d(s, out, target, oht=8, ohb=2, owv=2, lanes=8, unroll_window=True, pad="tile"):
    """Max pooling; the parameters are those of the depthwise_conv2d template."""
    _schedule_window(s, out, target, oht, ohb, owv, lanes, unroll_window, pad)


@template("avg_pool2d", WINDOW_PARAMS)
def schedule_avg_pool2d(s, out, target, oht=8, ohb=2, owv=2, lanes=8, unroll_window=True, pad="tile"):
    """Average pooling; the parameters are those of the depthwise_conv2d template."""
    _schedule_window(s, out, target, oht, ohb, owv, lanes, unroll_window, pad)


for _tag in ("depthwise_conv2d", "max_pool2d", "avg_pool2d"):
    defaults(_tag)(_window_defaults)
