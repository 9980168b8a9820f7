"""GPU template for `conv2d_winograd` (minitc/ops/winograd.py): three launches.

    input   V[xi, nu, c, p] = B^T d B: a thread per (channel, tile), which loads its 4x4 patch
            into registers (the padding a select) and writes its 16 positions, unrolled (each a
            sum of four registers), coalesced along the tiles p
    gemm    M[xi, nu] = U[xi, nu]^T x V[xi, nu]: the GEMM template (gemm.py) with the 16
            positions as its batch (blockIdx.z): shared k-major tiles, float4 fills of U's
            output channels and V's tiles, double-buffered, a register tile a thread
    output  Y = A^T M A: a thread per 2x2 output tile, unrolled, reading its 16 values of M
            along p (coalesced)

The 16 products are the whole cost: 2.25x fewer FMAs than the direct convolution, in the
GEMM template's tiling. V and M are global temporaries, about 4x the input and the output.
"""

from __future__ import annotations

from minitc.templates.gemm import inline_epilogue
from minitc.templates.gpu.gemm import GPU_GEMM_PARAMS, _gemm_shape, gemm_gpu, pick_gpu_tiles
from minitc.templates.gpu.registry import defaults, template
from minitc.templates.winograd import NCHW_TAG as TAG
from minitc.templates.winograd import nchw_stages


def _thread_per(s, outer: list, inner: list, threads: int = 256):
    """One thread per iteration of the `outer` loops (fused, split into blocks of `threads`),
    the `inner` loops unrolled inside it. Returns the thread loop."""
    s.reorder(*outer, *inner)
    bo, ti = s.split(s.fuse(*outer), factor=threads)
    s.bind(bo, "blockIdx.x")
    s.bind(ti, "threadIdx.x")
    for lp in inner:
        s.unroll(lp)
    return ti


@template(TAG, GPU_GEMM_PARAMS)
def schedule_conv2d_winograd(s, out, target, bm=64, bn=64, tm=4, tn=4, bk=16, shared=True):
    patch, data, gemm = nchw_stages(s, out)
    inline_epilogue(s, out, gemm)  # the output transform and a fused epilogue: one stage, a thread per 2x2 tile
    acc = s.stage_name(s.cache_write(gemm, "local"))
    gemm_gpu(s, gemm, acc, target, bm=bm, bn=bn, tm=tm, tn=tn, bk=bk, shared=shared)
    xi, nu, c, p = s.loops(data)
    thread = _thread_per(s, [c, p], [xi, nu])
    values = s.cache_read(patch, "local", [data])  # the 4x4 patch in registers, each loaded once
    s.compute_at(values, thread)
    for lp in s.loops(values):
        s.unroll(lp)
    s.compute_inline(patch)  # the padding: a select in those loads
    n, k, oh, ow = s.loops(out)
    oh_o, oh_i = s.split(oh, factor=2)
    ow_o, ow_i = s.split(ow, factor=2)
    _thread_per(s, [n, k, oh_o, ow_o], [oh_i, ow_i])


@defaults(TAG)
def winograd_defaults(s, out, target) -> dict:
    """The GEMM template's tiles for the 16 products [K x C] x [C x tiles], with a column tile
    (a multiple of 4, 16 to 64) that divides the tiles where one does: tile counts are
    N*TH*TW, rarely a power of two, and a partial column tile costs guards in every fill."""
    M, N, K = _gemm_shape(s, nchw_stages(s, out)[2])
    sms = getattr(target, "sm_count", 0) or 132
    tiles = pick_gpu_tiles(M, N, K, sms=sms, batch=16, rows_of_b=True)
    if N % tiles["bn"]:
        dividing = [b for b in range(64, 15, -4) if N % b == 0]
        if dividing:
            tiles["bn"] = dividing[0]
    return {**tiles, "shared": True}
