"""LLVM IR of the bf16 GEMM on AMX tiles (`tdpbf16ps`): the same contract and packed B as
gemm_bf16.py (Bp[N // 32, K // 2, 32, 2], float32 C), for M, N and K multiples of 32.

Each task (a range of 32-column panels, on the runtime's thread pool) configures the tiles
(`ldtilecfg`: 8 tiles of 16 rows x 64 bytes), then computes 32 x 32 blocks of C in tiles 0-3
from two 16 x 32 tiles of A (4-5) and two 16-pair x 16-column tiles of B (6-7) per 32 values
of k: B's tile rows are its packed rows, 128 bytes apart. The process must have asked Linux
for the tile data state first (templates/gemm_bf16.py does, arch_prctl).
"""

from __future__ import annotations

from minitc.backends.llvm.gemm_bf16 import GemmShape
from minitc.errors import BuildError

TILE = 32  # C block: 2 x 2 tiles of 16 x 16 floats


def check(s: GemmShape) -> None:
    if s.nr != TILE or s.M % TILE or s.N % TILE or s.K % TILE:
        raise BuildError(f"AMX bf16 GEMM: M, N and K must be multiples of {TILE} (and nr {TILE}), got {s}")


def render(s: GemmShape, name: str) -> str:
    check(s)
    decls = [
        "declare void @minitc_parallel_launch(ptr, ptr, i64)",
        "declare i64 @minitc_num_threads()",
        "declare void @llvm.x86.ldtilecfg(ptr)",
        "declare void @llvm.x86.tilerelease()",
        "declare void @llvm.x86.tilezero(i8 immarg)",
        "declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)",
        "declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)",
        "declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)",
        # palette 1; bytes 16..31: 64 bytes per row of each tile; bytes 48..55: 16 rows each
        '@cfg = internal constant [64 x i8] c"' + _config() + '", align 64',
        "",
    ]
    return "\n".join(decls + [_task(s, name), _entry(s, name)])


def _config() -> str:
    cfg = [0] * 64
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    return "".join(f"\\{b:02X}" for b in cfg)


def _task(s: GemmShape, name: str) -> str:
    panels, blocks, steps = s.N // TILE, s.M // TILE, s.K // TILE
    a_stride, b_stride, c_stride = 2 * s.K, 4 * TILE, 4 * s.N  # bytes between tile rows
    L = [
        f"define internal void @{name}_task(ptr %closure, i64 %t, i64 %n) nounwind {{",
        "entry:",
        "  %A = load ptr, ptr %closure",
        "  %pB = getelementptr inbounds ptr, ptr %closure, i64 1",
        "  %B = load ptr, ptr %pB",
        "  %pC = getelementptr inbounds ptr, ptr %closure, i64 2",
        "  %C = load ptr, ptr %pC",
        "  call void @llvm.x86.ldtilecfg(ptr @cfg)",
        f"  %lo0 = mul i64 %t, {panels}",
        "  %lo = udiv i64 %lo0, %n",
        "  %t1 = add i64 %t, 1",
        f"  %hi0 = mul i64 %t1, {panels}",
        "  %hi = udiv i64 %hi0, %n",
        "  %any = icmp ult i64 %lo, %hi",
        "  br i1 %any, label %panel, label %exit",
        "panel:",
        "  %p = phi i64 [ %lo, %entry ], [ %pnext, %block_end ]",
        f"  %boff = mul i64 %p, {s.K * TILE}",
        "  %bp = getelementptr inbounds bfloat, ptr %B, i64 %boff",
        "  br label %block",
        "block:",
        "  %i = phi i64 [ 0, %panel ], [ %inext, %kdone ]",
        "  call void @llvm.x86.tilezero(i8 0)",
        "  call void @llvm.x86.tilezero(i8 1)",
        "  call void @llvm.x86.tilezero(i8 2)",
        "  call void @llvm.x86.tilezero(i8 3)",
        f"  %arow = mul i64 %i, {TILE * s.K}",
        "  %ab = getelementptr inbounds bfloat, ptr %A, i64 %arow",
        "  br label %kloop",
        "kloop:",
        "  %k = phi i64 [ 0, %block ], [ %knext, %kloop ]",
        f"  %ak = mul i64 %k, {TILE}",  # A columns k*32
        "  %a0 = getelementptr inbounds bfloat, ptr %ab, i64 %ak",
        f"  %a1 = getelementptr inbounds bfloat, ptr %a0, i64 {16 * s.K}",
        f"  %bk = mul i64 %k, {16 * TILE * 2}",  # 16 packed rows of 32 columns x 2
        "  %b0 = getelementptr inbounds bfloat, ptr %bp, i64 %bk",
        "  %b1 = getelementptr inbounds bfloat, ptr %b0, i64 32",
        f"  call void @llvm.x86.tileloadd64(i8 4, ptr %a0, i64 {a_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 5, ptr %a1, i64 {a_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 6, ptr %b0, i64 {b_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 7, ptr %b1, i64 {b_stride})",
        "  call void @llvm.x86.tdpbf16ps(i8 0, i8 4, i8 6)",
        "  call void @llvm.x86.tdpbf16ps(i8 1, i8 4, i8 7)",
        "  call void @llvm.x86.tdpbf16ps(i8 2, i8 5, i8 6)",
        "  call void @llvm.x86.tdpbf16ps(i8 3, i8 5, i8 7)",
        "  %knext = add nuw nsw i64 %k, 1",
        f"  %kmore = icmp ult i64 %knext, {steps}",
        "  br i1 %kmore, label %kloop, label %kdone",
        "kdone:",
        f"  %crow = mul i64 %i, {TILE * s.N}",
        f"  %ccol = mul i64 %p, {TILE}",
        "  %coff = add i64 %crow, %ccol",
        "  %c0 = getelementptr inbounds float, ptr %C, i64 %coff",
        "  %c1 = getelementptr inbounds float, ptr %c0, i64 16",
        f"  %c2 = getelementptr inbounds float, ptr %c0, i64 {16 * s.N}",
        "  %c3 = getelementptr inbounds float, ptr %c2, i64 16",
        f"  call void @llvm.x86.tilestored64(i8 0, ptr %c0, i64 {c_stride})",
        f"  call void @llvm.x86.tilestored64(i8 1, ptr %c1, i64 {c_stride})",
        f"  call void @llvm.x86.tilestored64(i8 2, ptr %c2, i64 {c_stride})",
        f"  call void @llvm.x86.tilestored64(i8 3, ptr %c3, i64 {c_stride})",
        "  %inext = add nuw nsw i64 %i, 1",
        f"  %imore = icmp ult i64 %inext, {blocks}",
        "  br i1 %imore, label %block, label %block_end",
        "block_end:",
        "  %pnext = add nuw nsw i64 %p, 1",
        "  %pmore = icmp ult i64 %pnext, %hi",
        "  br i1 %pmore, label %panel, label %exit",
        "exit:",
        "  call void @llvm.x86.tilerelease()",
        "  ret void",
        "}",
        "",
    ]
    return "\n".join(L)


def _entry(s: GemmShape, name: str) -> str:
    panels = s.N // TILE
    return "\n".join(
        [
            f"define void @{name}(ptr noalias %A, ptr noalias %B, ptr noalias %C) nounwind {{",
            "entry:",
            "  %closure = alloca [3 x ptr], align 8",
            "  store ptr %A, ptr %closure",
            "  %pB = getelementptr inbounds ptr, ptr %closure, i64 1",
            "  store ptr %B, ptr %pB",
            "  %pC = getelementptr inbounds ptr, ptr %closure, i64 2",
            "  store ptr %C, ptr %pC",
            "  %threads = call i64 @minitc_num_threads()",
            f"  %few = icmp ult i64 %threads, {panels}",
            f"  %n = select i1 %few, i64 %threads, i64 {panels}",
            f"  call void @minitc_parallel_launch(ptr @{name}_task, ptr %closure, i64 %n)",
            "  ret void",
            "}",
            "",
        ]
    )
