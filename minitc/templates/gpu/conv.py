"""GPU conv2d template: direct convolution with shared-memory tiles of the input and weights.

    for (n, oh, wo) in bind("blockIdx.x"): for ko in bind("blockIdx.y", K / (kt*vk)):
        for ty in bind("threadIdx.y", kt): for tx in bind("threadIdx.x", wt):
            acc[vk, vw] = 0                                   # registers
            for rco in range(C / bc):
                barrier(); X_shared[bc, window rows, window cols] = X[...]   # padding inlined
                W_shared[kt*vk, bc, R, S] = W[...]; barrier()
                for rci, ry, rx: for k in unrolled(vk): for w in unrolled(vw):
                    acc[k, w] += X_shared[...] * W_shared[...]
            out[n, ko.., oh, wo..] = acc

A block computes one output row segment of wt*vw pixels for kt*vk output channels; each input
value it stages is reused by every channel of the block and each weight by every pixel.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.templates.conv import find_pad_stage
from minitc.templates.gpu import MAX_THREADS, SHARED_BYTES, defaults, template
from minitc.templates.gpu.gemm import cooperative_fetch


@template("conv2d")
def schedule_conv2d(s, out, target, kt=8, vk=4, wt=16, vw=1, bc=8, shared=True):
    for name, v in (("kt", kt), ("vk", vk), ("wt", wt), ("vw", vw), ("bc", bc)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ScheduleError(f"GPU conv2d template: {name} must be a positive int, got {v!r}")
    _, K, _, OW = s.state.stage(out).shape
    kt, wt = min(kt, -(-K // vk)), min(wt, -(-OW // vw))  # no thread without work
    while kt * wt > MAX_THREADS:  # every combination is a legal program: fewer, busier threads
        if kt >= wt:
            kt, vk = kt // 2, vk * 2
        else:
            wt, vw = wt // 2, vw * 2
    bc = _fit_shared(s, out, kt * vk, wt * vw, bc) if shared else bc
    pad = find_pad_stage(s, out)
    acc = s.stage_name(s.cache_write(out, "local"))
    n, k, oh, ow = s.loops(out)
    ko, ki = s.split(k, factor=kt * vk)
    ty, kr = s.split(ki, factor=vk)
    wo, wi = s.split(ow, factor=wt * vw)
    tx, wr = s.split(wi, factor=vw)
    s.reorder(n, oh, wo, ko, ty, tx, kr, wr)
    s.bind(s.fuse(n, oh, wo), "blockIdx.x")
    s.bind(ko, "blockIdx.y")
    s.bind(ty, "threadIdx.y")
    s.bind(tx, "threadIdx.x")
    s.compute_at(acc, tx)
    _, ak, _, aw, rc, ry, rx = s.loops(acc)
    rco, rci = s.split(rc, factor=bc)
    s.reorder(rco, rci, ry, rx, ak, aw)
    s.unroll(ak)
    s.unroll(aw)
    if shared:
        for name in s.state.stage(acc).read_stages():
            cache = s.cache_read(name, "shared", [acc])
            s.compute_at(cache, rco)
            cooperative_fetch(s, cache, (kt, wt))
    if pad is not None:
        s.compute_inline(pad)  # padding becomes a select in the loads (of the shared fill)


def _fit_shared(s, out: str, k_tile: int, w_tile: int, bc: int) -> int:
    """Halve the channel step until the two shared tiles (the input window of one output row
    segment, the weights of the block's channels) fit in a block's shared memory."""
    attrs = s.tensor(out).op.attrs
    (_, sw), (dh, dw) = attrs["stride"], attrs["dilation"]  # a block covers one output row
    _, _, R, S = _weight_shape(s, out)
    rows, cols = (R - 1) * dh + 1, (w_tile - 1) * sw + (S - 1) * dw + 1
    while bc > 1 and 4 * bc * (rows * cols + k_tile * R * S) > SHARED_BYTES:
        bc //= 2
    return bc


def _weight_shape(s, out: str) -> tuple:
    """[K, C, R, S] of the weight: the read indexed by the output-channel axis, first (weights
    stored [K, C, R, S]) or last (`weight_layout="CRSK"`)."""
    st = s.state.stage(out)
    crsk = s.tensor(out).op.attrs.get("weight_layout") == "CRSK"
    for r in st.reads():
        if r.indices and r.indices[-1 if crsk else 0] is st.axes[1]:
            shape = s.state.stage(r.stage).shape
            return (shape[3], *shape[:3]) if crsk else shape
    raise ScheduleError(f"GPU conv2d template: {out} reads no [K, C, R, S] or [C, R, S, K] weight")


WIDE_FROM_CHANNELS = 16  # input channels from which the wide block (64 channels x 32 pixels) is the default


@defaults("conv2d")
def conv2d_defaults(s, out, target) -> dict:
    """64 output channels x 32 pixels a block (512 threads) with 4-channel steps where the input
    has 16 channels or more, else 32 channels x 16 pixels with 8-channel steps. Measured on an
    H100 (the dataset's 3x3 layers of ResNet-18 at 28x28, lm/data): the wide block ran 67 and
    44 us against 122 and 54 us for the narrow one; on the 3-channel stem the narrow one was
    the fastest template program measured."""
    _, K, _, OW = s.state.stage(out).shape
    C = s.state.stage(out).reduce_axes[0].extent
    vk = 4 if K % 4 == 0 else 1
    wide = C >= WIDE_FROM_CHANNELS
    kt = max(1, min(16 if wide else 8, K // vk))
    wt = min(32 if wide else 16, OW)
    bc = next((b for b in ((4, 2) if wide else (8, 4, 2)) if C % b == 0), 8)
    return {"kt": kt, "vk": vk, "wt": wt, "vw": 1, "bc": bc}
