"""LLVM IR of the bf16 and int8 GEMMs on AMX tiles (`tdpbf16ps`, `tdpbusd`): the same
contracts and packed B as gemm_bf16.py (Bp[N // 32, K // 2, 32, 2], float32 C) and
gemm_int8.py (Bp[N // 32, K // 4, 32, 4], int32 C), for M and N multiples of 32 and K of 32
(bf16) or 64 (int8).

Each task (a range of 32-column panels, on the runtime's thread pool) configures the tiles
(`ldtilecfg`: 8 tiles of 16 rows x 64 bytes), then computes 32 x 32 blocks of C in tiles 0-3
from two 16 x 32 tiles of A (4-5) and two 16-pair x 16-column tiles of B (6-7) per 32 values
of k: B's tile rows are its packed rows, 128 bytes apart. The process must have asked Linux
for the tile data state first (templates/gemm_bf16.py does, arch_prctl).
"""

from __future__ import annotations

from minitc.backends.llvm.gemm_bf16 import GemmShape, parallel_entry, task_entry
from minitc.errors import BuildError

TILE = 32  # C block: 2 x 2 tiles of 16 x 16 floats (or int32)


class Kind:
    """bf16 (tdpbf16ps: pairs of k, float32 C) or int8 (tdpbusd: uint8 A x int8 B in quads
    of k, int32 C, B packed [N // 32, K // 4, 32, 4] as gemm_int8.py's). A tile row is 64
    bytes of k either way."""

    def __init__(self, name: str):
        self.name = name
        self.elem, self.group, self.op = ("bfloat", 2, "tdpbf16ps") if name == "bf16" else ("i8", 4, "tdpbusd")
        self.kstep = 64 // (2 if name == "bf16" else 1)  # k per tile row: 32 bf16 or 64 int8
        self.bytes = 2 if name == "bf16" else 1


def check(s: GemmShape, kind: str = "bf16") -> None:
    k = Kind(kind).kstep
    if s.nr != TILE or s.M % TILE or s.N % TILE or s.K % k:
        raise BuildError(f"AMX {kind} GEMM: M and N must be multiples of {TILE} (nr {TILE}), K of {k}, got {s}")


def render(s: GemmShape, name: str, kind: str = "bf16") -> str:
    check(s, kind)
    decls = [
        "declare void @minitc_parallel_launch(ptr, ptr, i64)",
        "declare i64 @minitc_num_threads()",
        "declare void @llvm.x86.ldtilecfg(ptr)",
        "declare void @llvm.x86.tilerelease()",
        "declare void @llvm.x86.tilezero(i8 immarg)",
        "declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)",
        "declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)",
        f"declare void @llvm.x86.{Kind(kind).op}(i8 immarg, i8 immarg, i8 immarg)",
        # palette 1; bytes 16..31: 64 bytes per row of each tile; bytes 48..55: 16 rows each
        '@cfg = internal constant [64 x i8] c"' + _config() + '", align 64',
        "",
    ]
    return "\n".join(decls + [_task(s, name, Kind(kind)), parallel_entry(name, s.N // TILE)])


def _config() -> str:
    cfg = [0] * 64
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    return "".join(f"\\{b:02X}" for b in cfg)


def _task(s: GemmShape, name: str, kind: Kind) -> str:
    panels, blocks, steps = s.N // TILE, s.M // TILE, s.K // kind.kstep
    e, op = kind.elem, kind.op
    # bytes between tile rows: a row of A; a packed row of B (32 columns x group); a row of C
    a_stride, b_stride, c_stride = kind.bytes * s.K, kind.bytes * kind.group * TILE, 4 * s.N
    L = [
        *task_entry(name, panels, ["  call void @llvm.x86.ldtilecfg(ptr @cfg)"]),
        "panel:",
        "  %p = phi i64 [ %lo, %entry ], [ %pnext, %block_end ]",
        f"  %boff = mul i64 %p, {s.K * TILE}",
        f"  %bp = getelementptr inbounds {e}, ptr %B, i64 %boff",
        "  br label %block",
        "block:",
        "  %i = phi i64 [ 0, %panel ], [ %inext, %kdone ]",
        "  call void @llvm.x86.tilezero(i8 0)",
        "  call void @llvm.x86.tilezero(i8 1)",
        "  call void @llvm.x86.tilezero(i8 2)",
        "  call void @llvm.x86.tilezero(i8 3)",
        f"  %arow = mul i64 %i, {TILE * s.K}",
        f"  %ab = getelementptr inbounds {e}, ptr %A, i64 %arow",
        "  br label %kloop",
        "kloop:",
        "  %k = phi i64 [ 0, %block ], [ %knext, %kloop ]",
        f"  %ak = mul i64 %k, {kind.kstep}",  # A's columns from k * kstep
        f"  %a0 = getelementptr inbounds {e}, ptr %ab, i64 %ak",
        f"  %a1 = getelementptr inbounds {e}, ptr %a0, i64 {16 * s.K}",
        f"  %bk = mul i64 %k, {16 * TILE * kind.group}",  # 16 packed rows of 32 columns x group
        f"  %b0 = getelementptr inbounds {e}, ptr %bp, i64 %bk",
        f"  %b1 = getelementptr inbounds {e}, ptr %b0, i64 {16 * kind.group}",
        f"  call void @llvm.x86.tileloadd64(i8 4, ptr %a0, i64 {a_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 5, ptr %a1, i64 {a_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 6, ptr %b0, i64 {b_stride})",
        f"  call void @llvm.x86.tileloadd64(i8 7, ptr %b1, i64 {b_stride})",
        f"  call void @llvm.x86.{op}(i8 0, i8 4, i8 6)",
        f"  call void @llvm.x86.{op}(i8 1, i8 4, i8 7)",
        f"  call void @llvm.x86.{op}(i8 2, i8 5, i8 6)",
        f"  call void @llvm.x86.{op}(i8 3, i8 5, i8 7)",
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
