"""GPU conv2d template: direct convolution with shared-memory tiles of the input and weights.

    for (n, oh_o, ow_o) in bind("blockIdx.x"): for ko in bind("blockIdx.y", K / (kt*vk)):
        for ty in bind("threadIdx.y", kt): for (hy, tx) in bind("threadIdx.x", oht * wt):
            acc[vk, ohb, vw] = 0                              # registers
            for rco in range(C / bc):
                barrier(); X_shared[bc, window rows, window cols] = X[...]   # padding inlined
                W_shared[bc, R, S, kt*vk] = W[...]; barrier()            # output channels last
                for rci, ry, rx in unrolled(bc, R, S):                    # windows up to 3x3
                    w[vk] = W_shared[rci, ry, rx, ty*vk:]                 # a float4 per 4 channels
                    for k, h, c in unrolled(vk, ohb, vw): acc[k, h, c] += X_shared[...] * w[k]
            out[n, ko.., oh.., ow..] = acc                                # unrolled copy-out

A block computes a tile of oht*ohb output rows by wt*vw columns for kt*vk output channels,
and each thread vk channels x ohb rows x vw columns of it: a GEMM's blocking (channels x
pixels, reduced over channels x window) with the input window, not an im2col copy, in shared
memory, so each staged input value serves every channel of the block and every window offset.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.lowering.probes import switch_on
from minitc.templates.conv import conv_producer, find_pad_stage
from minitc.templates.gemm import cache_under_epilogue
from minitc.templates.gpu.gemm import SHARED, cooperative_fetch, vector_registers
from minitc.templates.gpu.registry import MAX_THREADS, SHARED_BYTES, defaults, template, unrolled_k_steps
from minitc.templates.params import Ints, OneOf, Param

GPU_CONV_PARAMS = (
    Param("kt", "threads along the output channels of a block", Ints(1, 1024),
          "doubled up to 8 while the block stays within 512 threads", candidates=(2, 4, 8, 16)),
    Param("vk", "output channels per thread (a float4 of weights for 4)", Ints(1, 64), "4 where it divides K, else 1",
          candidates=(1, 2, 4, 8)),
    Param("wt", "threads along the output columns of a block", Ints(1, 1024),
          "the row, if up to 32 columns, else a divisor of it from 8 to 32", candidates=(4, 8, 16, 32)),
    Param("vw", "output columns per thread", OneOf((1, 2, 4)), "1"),
    Param("bc", "input channels per shared tile", Ints(1, 1024), "8, 4 or 2, dividing C", candidates=(4, 8, 16)),
    SHARED,
    Param("oht", "threads along the output rows of a block", Ints(1, 1024),
          "the most rows dividing OH with up to 128 pixels a block", candidates=(1, 2, 4, 8, 14)),
    Param("ohb", "output rows per thread", Ints(1, 64), "1", candidates=(1, 2, 3, 4, 7)),
)  # fmt: skip


@template("conv2d", GPU_CONV_PARAMS)
def schedule_conv2d(s, out, target, kt=8, vk=4, wt=16, vw=1, bc=8, shared=True, oht=1, ohb=1):
    for name, v in (("kt", kt), ("vk", vk), ("wt", wt), ("vw", vw), ("bc", bc), ("oht", oht), ("ohb", ohb)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"GPU conv2d template: {name} must be a positive int, got {v!r}")
    conv = conv_producer(s, out)  # under a fused epilogue (bias, residual, activation): applied at the store
    _, K, OH, OW = s.state.stage(conv).shape
    # no thread without work
    kt, oht, wt = min(kt, -(-K // vk)), min(oht, -(-OH // ohb)), min(wt, -(-OW // vw))
    while kt * oht * wt > MAX_THREADS:  # every combination is a legal program: fewer, busier threads
        if kt >= max(oht, wt):
            kt, vk = kt // 2, vk * 2
        elif oht >= wt:
            oht, ohb = oht // 2, ohb * 2
        else:
            wt, vw = wt // 2, vw * 2
    bc = _fit_shared(s, conv, kt * vk, oht * ohb, wt * vw, bc) if shared else bc
    pad = find_pad_stage(s, conv)
    weight, (_, _, R, S) = _weight_stage(s, conv), _weight_shape(s, conv)
    acc = s.stage_name(cache_under_epilogue(s, out, conv))
    n, k, oh, ow = s.loops(out)
    ko, ki = s.split(k, factor=kt * vk)
    ty, kr = s.split(ki, factor=vk)
    ho, hi = s.split(oh, factor=oht * ohb)
    hy, hr = s.split(hi, factor=ohb)
    wo, wi = s.split(ow, factor=wt * vw)
    tx, wr = s.split(wi, factor=vw)
    s.reorder(n, ho, wo, ko, ty, hy, tx, kr, hr, wr)
    s.bind(s.fuse(n, ho, wo), "blockIdx.x")
    s.bind(ko, "blockIdx.y")
    s.bind(ty, "threadIdx.y")
    tx = s.fuse(hy, tx)  # neighbouring threads take neighbouring columns, then rows
    s.bind(tx, "threadIdx.x")
    for ref in (kr, hr, wr):  # the copy-out unrolled, so that the register tile stays in registers
        s.unroll(ref)
    s.compute_at(acc, tx)
    _, ak, ah, aw, rc, ry, rx = s.loops(acc)
    rco, rci = s.split(rc, factor=bc)
    s.reorder(rco, rci, ry, rx, ak, ah, aw)
    # the window unrolled too, so that the compiler loads each staged input value once for
    # every window offset that reads it (vw + S - 1 values a row, not vw * S)
    for ref in (ry, rx, ak, ah, aw) if R * S <= UNROLLED_WINDOW else (ak, ah, aw):
        s.unroll(ref)
    if R * S <= UNROLLED_WINDOW and unrolled_k_steps():  # the channel step too (no spills on layer3)
        s.unroll(rci)
    if shared:
        for name in s.state.stage(acc).read_stages():
            k_last = name == weight and vk % 4 == 0 and k_last_weights()
            layout = None if not k_last or _crsk(s, conv) else (1, 2, 3, 0)  # output channels last
            cache = s.cache_read(name, "shared", [acc], layout)
            s.compute_at(cache, rco)
            cooperative_fetch(s, cache, (kt, oht * wt))  # k fastest: stores free of bank conflicts
            if k_last:  # each window offset's vk weights: float4 reads into registers
                vector_registers(s, cache, acc, rx, vk)
    if pad is not None:
        s.compute_inline(pad)  # padding becomes a select in the loads (of the shared fill)


def _fit_shared(s, out: str, k_tile: int, h_tile: int, w_tile: int, bc: int) -> int:
    """Halve the channel step until the two shared tiles (the input window of the block's
    output rows and columns, the weights of its channels) fit in a block's shared memory."""
    attrs = s.tensor(out).op.attrs
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    _, _, R, S = _weight_shape(s, out)
    rows, cols = (h_tile - 1) * sh + (R - 1) * dh + 1, (w_tile - 1) * sw + (S - 1) * dw + 1
    while bc > 1 and 4 * bc * (rows * cols + k_tile * R * S) > SHARED_BYTES:
        bc //= 2
    return bc


UNROLLED_WINDOW = 9  # windows up to 3x3 are unrolled (a 7x7 stem is not: 49 copies of the tile)


def k_last_weights() -> bool:
    """Whether the shared weight tile is stored [C, R, S, K] and read as float4 rows of vk
    channels; MINITC_GPU_CONV_K_LAST=0 keeps it [K, C, R, S] (scalar reads), for probing."""
    return switch_on("MINITC_GPU_CONV_K_LAST")


def _crsk(s, out: str) -> bool:
    """Whether the weight is stored [C, R, S, K] (`weight_layout="CRSK"`), not [K, C, R, S]."""
    return s.tensor(out).op.attrs.get("weight_layout") == "CRSK"


def _weight_stage(s, out: str) -> str:
    st = s.state.stage(out)
    crsk = _crsk(s, out)
    for r in st.reads():
        if r.indices and r.indices[-1 if crsk else 0] is st.axes[1]:
            return r.stage
    raise ScheduleError(f"GPU conv2d template: {out} reads no [K, C, R, S] or [C, R, S, K] weight")


def _weight_shape(s, out: str) -> tuple:
    """[K, C, R, S] of the weight: the read indexed by the output-channel axis, first (weights
    stored [K, C, R, S]) or last (`weight_layout="CRSK"`)."""
    shape = s.state.stage(_weight_stage(s, out)).shape
    return (shape[3], *shape[:3]) if _crsk(s, out) else shape


BLOCK_THREADS = 512  # at most this many threads a block by default
BLOCK_PIXELS = 128  # whole output rows a block spans by default, within this many pixels
ROW_WIDTH = 16  # output columns a block spans by default (a divisor of the row from 8 up, if any)


@defaults("conv2d")
def conv2d_defaults(s, out, target) -> dict:
    """Each thread 4 output channels x 1 pixel (a float4 of weights and one staged input a
    window offset: neighbouring threads read neighbouring words, without bank conflicts). A
    block spans up to 16 columns and as many whole rows as stay within 128 pixels, then as many
    channels (up to 32) as stay within 512 threads: wide pixel tiles make the weight tile, the
    costlier fill, serve more outputs. On an H100 (experiments/gpu_conv_probe.py, seven ResNet
    layers, docs/gpu.md) this was the fastest of the defaults tried on each layer."""
    conv = conv_producer(s, out)
    _, K, OH, OW = s.state.stage(conv).shape
    C = s.state.stage(conv).reduce_axes[0].extent
    vk = 4 if K % 4 == 0 else 1
    wt = OW if OW <= ROW_WIDTH else max((d for d in range(8, ROW_WIDTH + 1) if OW % d == 0), default=ROW_WIDTH)
    oht = max(d for d in range(1, OH + 1) if OH % d == 0 and d * wt <= max(BLOCK_PIXELS, wt))
    kt = 1
    while kt < 8 and 2 * kt * oht * wt <= BLOCK_THREADS and 2 * kt * vk <= K:
        kt *= 2
    bc = next((b for b in (8, 4, 2) if C % b == 0), min(C, 8))
    return {"kt": kt, "vk": vk, "wt": wt, "vw": 1, "bc": bc, "shared": True, "oht": oht, "ohb": 1}
