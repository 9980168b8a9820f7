"""Schedule template for `conv2d_winograd_nchwc` (minitc/ops/winograd.py), under a fused
elementwise epilogue (bias, residual add, activation) or alone. Four root stages, each
parallel:

    pad     zero-padded input, parallel over channel blocks
    input   V = B^T d B: a task per (image, channel block, tile row); the 16 positions of a
            tile unrolled, so each is a sum of four loads; the channels of a block vectorized
    gemm    M[xi, nu] = U[xi, nu] x V[xi, nu]: a task per (image, position, `kb` output blocks);
            the micro-kernel of conv2d_nchwc's 1x1 case: `pixels` tiles x kb vectors of
            accumulators, one broadcast of V per tile and input channel, kb weight vectors
    output  Y = A^T M A and the epilogue: a task per (image, output block, tile row), the 2x2
            outputs of a tile unrolled

The 16 channel products are the whole cost (2.25x fewer FMAs than the direct convolution);
the transforms are additions over data that stays in L2.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.templates.conv import _place_pad
from minitc.templates.conv_nchwc import KB, PIXELS, _registers_per_vector, micro_tile
from minitc.templates.gemm import epilogue_anchor, inline_epilogue
from minitc.templates.registry import defaults, template

TAG = "conv2d_winograd_nchwc"
NCHW_TAG = "conv2d_winograd"


def _read_tagged(s, stage: str, tag: str, op: str = TAG) -> str:
    found = [n for n in s.state.stage(stage).read_stages() if s.state.stage(n).tag == tag]
    if not found:
        raise ScheduleError(f"{op} template: {stage} reads no {tag} stage (build it with tc.ops.{op})")
    return found[0]


def nchw_stages(s, out: str) -> tuple:
    """(patch, input, gemm) stages of tc.ops.conv2d_winograd under `out`, its output transform
    or an elementwise epilogue of it (CPU and GPU templates)."""
    gemm = epilogue_anchor(s, out, "winograd_gemm", NCHW_TAG)
    data = _read_tagged(s, gemm, "winograd_input", NCHW_TAG)
    return _read_tagged(s, data, "winograd_patch", NCHW_TAG), data, gemm


def _stages(s, out: str) -> tuple:
    """(pad, input, gemm) stages of the convolution under `out`."""
    gemm = epilogue_anchor(s, out, "winograd_gemm", TAG)
    input_ = _read_tagged(s, gemm, "winograd_input")
    return _read_tagged(s, input_, "pad"), input_, gemm


@template(TAG, (KB, PIXELS))
def schedule_conv2d_winograd_nchwc(s, out, target, kb=2, pixels=7):
    """kb: output-channel blocks and pixels: tiles of a row in the channel products' micro-kernel."""
    pad, input_, gemm = _stages(s, out)
    inline_epilogue(s, out, gemm)  # the output transform and the epilogue: one stage
    lanes = s.state.stage(input_).shape[-1]
    _place_pad(s, pad, "root", None, lanes)

    n, xi, nu, c, th, tw, ci = s.loops(input_)
    s.reorder(n, c, th, tw, xi, nu, ci)
    s.parallel(s.fuse(n, c, th))
    s.unroll(xi)
    s.unroll(nu)
    s.vectorize(ci)

    n, xi, nu, k, th, tw, kl, rc, rci = s.loops(gemm)
    ko, ki = s.split(k, factor=kb)
    two, twi = s.split(tw, factor=pixels)
    s.reorder(n, xi, nu, ko, th, two, rc, rci, twi, ki, kl)
    s.parallel(s.fuse(n, xi, nu, ko))
    s.unroll(twi)
    s.unroll(ki)
    s.vectorize(kl)

    n, k, oh, ow, kl = s.loops(out)
    oho, ohi = s.split(oh, factor=2)
    owo, owi = s.split(ow, factor=2)
    s.reorder(n, k, oho, owo, ohi, owi, kl)
    s.parallel(s.fuse(n, k, oho))
    s.unroll(ohi)
    s.unroll(owi)
    s.vectorize(kl)


@defaults(TAG)
def conv2d_winograd_nchwc_defaults(s, out, target) -> dict:
    """conv2d_nchwc's micro-tile over the output blocks and a row of tiles."""
    st = s.state.stage(_stages(s, out)[2])
    _, _, _, KB, _, TW, block = st.shape
    kb, pixels = micro_tile(KB, TW, _registers_per_vector(target, st.dtype, block), target)
    return dict(kb=kb, pixels=pixels)


def _dividing(n: int, most: int) -> int:
    """The largest power of two up to `most` that divides n."""
    f = most
    while n % f:
        f //= 2
    return f


@template(NCHW_TAG)
def schedule_conv2d_winograd(s, out, target):
    """The NCHW form (tc.ops.conv2d_winograd, written for the GPU): each stage parallel, the
    input patch read once into the transform, the 16 products with a register tile of 4 output
    channels x a vector of tiles. Blocked data (conv2d_winograd_nchwc above) is the CPU's fast
    path; this keeps the GPU form a reasonable CPU program."""
    patch, data, gemm = nchw_stages(s, out)
    s.compute_inline(patch)
    xi, nu, c, p = s.loops(data)
    s.reorder(c, p, xi, nu)
    s.parallel(c)
    s.unroll(xi)
    s.unroll(nu)

    st = s.state.stage(gemm)
    lanes = _dividing(st.shape[-1], target.lanes(st.dtype))
    acc = s.stage_name(s.cache_write(gemm, "local"))
    xi, nu, k, p = s.loops(gemm)
    ko, ki = s.split(k, factor=_dividing(st.shape[-2], 4))
    po, pi = s.split(p, factor=lanes)
    s.reorder(xi, nu, ko, po, ki, pi)
    s.parallel(s.fuse(xi, nu, ko))
    s.unroll(ki)
    s.vectorize(pi)
    s.compute_at(acc, po)
    *batch, aki, api, arc = s.loops(acc)
    for lp in batch:  # extent 1 under the tile
        s.unroll(lp)
    apo, api = s.split(api, factor=lanes)
    s.reorder(arc, aki, apo, api)
    s.unroll(aki)
    s.unroll(apo)
    s.vectorize(api)

    n, k, oh, ow = s.loops(out)
    oho, ohi = s.split(oh, factor=2)
    owo, owi = s.split(ow, factor=2)
    s.reorder(n, k, oho, owo, ohi, owi)
    s.parallel(s.fuse(n, k))
    s.unroll(ohi)
    s.unroll(owi)
