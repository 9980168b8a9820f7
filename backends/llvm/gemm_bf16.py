"""LLVM IR of a bfloat16 GEMM: C[M, N] (float32) = A[M, K] (bfloat16, row-major) @ B, with B
packed ahead of time in the pair-interleaved (VNNI-2) layout that `vdpbf16ps` reads:

    Bp[N // nr, K // 2, nr, 2]      Bp[p, k2, c, e] = B[2*k2 + e, p*nr + c]

so one 64-byte load holds 16 columns x 2 consecutive k. The micro-kernel keeps an mr x nr tile
of C in mr * (nr // 16) registers of 16 floats; per pair of k it loads nr // 16 vectors of B,
broadcasts the pair A[i, 2*k2 : 2*k2 + 2] of each row as one 32-bit value, and updates every
accumulator with

- `dpbf16`: `llvm.x86.avx512bf16.dpbf16ps.512` (AVX-512 BF16: 32 products per instruction), or
- `fma`: the exact emulation, for a CPU without it: the pairs split into odd and even lanes,
  widened to float32 (exact) and accumulated with two FMAs, odd first, the order vdpbf16ps
  documents. Products of two bfloat16 are exact in float32, so both paths round alike; only
  denormals differ (vdpbf16ps treats them as zero).

Column panels of B are the parallel tasks, run by the runtime's thread pool
(`minitc_parallel_launch`, as the outlined parallel loops of codegen.py). Rendering is pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from minitc.errors import BuildError

PATHS = ("dpbf16", "fma")
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


@dataclass(frozen=True)
class GemmShape:
    """A bf16 GEMM and its register tile: mr rows x nr columns (nr a multiple of 16)."""

    M: int
    N: int
    K: int
    mr: int
    nr: int

    def check(self) -> None:
        if min(self.M, self.N, self.K, self.mr, self.nr) <= 0:
            raise BuildError(f"bf16 GEMM: sizes and tile must be positive, got {self}")
        if self.nr % 16 or self.N % self.nr:
            raise BuildError(f"bf16 GEMM: nr={self.nr} must be a multiple of 16 that divides N={self.N}")
        if self.K % 2:
            raise BuildError(f"bf16 GEMM: K={self.K} must be even (pairs of k); pad A and B with a zero column")


def render(shape: GemmShape, path: str, name: str) -> str:
    """The module: `void @name(ptr A, ptr Bp, ptr C)` and its task and micro-kernel functions."""
    if path not in PATHS:
        raise BuildError(f"bf16 GEMM: unknown path {path!r}; one of {', '.join(PATHS)}")
    shape.check()
    rows = sorted({shape.mr, shape.M % shape.mr} - {0}, reverse=True)
    parts = [_header(path)]
    parts += [_micro_kernel(shape, path, r, f"{name}_mk{r}") for r in rows]
    parts.append(_task(shape, name))
    parts.append(_entry(shape, name))
    return "\n".join(parts)


def _header(path: str) -> str:
    decls = [
        "declare void @minitc_parallel_launch(ptr, ptr, i64)",
        "declare i64 @minitc_num_threads()",
        "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
    ]
    if path == "dpbf16":
        decls.append(f"declare <16 x float> @{DPBF16}(<16 x float>, <32 x bfloat>, <32 x bfloat>)")
    return "\n".join(decls) + "\n"


def _micro_kernel(s: GemmShape, path: str, mr: int, fname: str) -> str:
    """`void fname(ptr a, ptr b, ptr c)`: the mr x nr tile of C at c (row stride N) from mr rows
    of A at a (row stride K) and one packed panel of B at b, over all of K."""
    nv, k2s = s.nr // 16, s.K // 2
    lines = [
        f"define internal void @{fname}(ptr noalias %a, ptr noalias %b, ptr noalias %c) alwaysinline nounwind {{",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %k2 = phi i64 [ 0, %entry ], [ %k2next, %loop ]",
    ]
    acc = {(r, v): f"%acc{r}_{v}" for r in range(mr) for v in range(nv)}
    new = {(r, v): f"%new{r}_{v}" for r in range(mr) for v in range(nv)}
    for key in acc:
        lines.append(f"  {acc[key]} = phi <16 x float> [ zeroinitializer, %entry ], [ {new[key]}, %loop ]")
    for v in range(nv):  # the panel's row k2: nr columns x 2 values
        lines.append(f"  %bo{v} = mul i64 %k2, {s.nr * 2}")
        lines.append(f"  %bi{v} = add i64 %bo{v}, {v * 32}")
        lines.append(f"  %bp{v} = getelementptr inbounds bfloat, ptr %b, i64 %bi{v}")
        lines.append(f"  %b{v} = load <32 x bfloat>, ptr %bp{v}, align 2")
        if path == "fma":
            lines += _split_pairs(f"%b{v}", f"%b{v}")
    for r in range(mr):
        lines.append(f"  %ai{r} = add i64 %k2, {r * s.K // 2}")  # pair index of A[r, 2*k2]
        lines.append(f"  %ap{r} = getelementptr inbounds i32, ptr %a, i64 %ai{r}")
        lines.append(f"  %apair{r} = load i32, ptr %ap{r}, align 4")
        lines.append(f"  %ains{r} = insertelement <16 x i32> poison, i32 %apair{r}, i64 0")
        lines.append(f"  %abc{r} = shufflevector <16 x i32> %ains{r}, <16 x i32> poison, <16 x i32> zeroinitializer")
        lines.append(f"  %a{r} = bitcast <16 x i32> %abc{r} to <32 x bfloat>")
        if path == "fma":
            lines += _split_pairs(f"%a{r}", f"%a{r}")
        for v in range(nv):
            if path == "dpbf16":
                lines.append(
                    f"  {new[r, v]} = call <16 x float> @{DPBF16}(<16 x float> {acc[r, v]}, "
                    f"<32 x bfloat> %a{r}, <32 x bfloat> %b{v})"
                )
            else:
                fma = "call <16 x float> @llvm.fma.v16f32"
                lines.append(
                    f"  %odd{r}_{v} = {fma}(<16 x float> %a{r}o, <16 x float> %b{v}o, <16 x float> {acc[r, v]})"
                )
                lines.append(
                    f"  {new[r, v]} = {fma}(<16 x float> %a{r}e, <16 x float> %b{v}e, <16 x float> %odd{r}_{v})"
                )
    lines += [
        "  %k2next = add nuw nsw i64 %k2, 1",
        f"  %more = icmp ult i64 %k2next, {k2s}",
        "  br i1 %more, label %loop, label %done",
        "done:",
    ]
    for r in range(mr):
        for v in range(nv):
            lines.append(f"  %ci{r}_{v} = add i64 {r * s.N}, {v * 16}")
            lines.append(f"  %cp{r}_{v} = getelementptr inbounds float, ptr %c, i64 %ci{r}_{v}")
            lines.append(f"  store <16 x float> {new[r, v]}, ptr %cp{r}_{v}, align 4")
    lines += ["  ret void", "}", ""]
    return "\n".join(lines)


def _split_pairs(vec: str, out: str) -> list:
    """`{out}e`, `{out}o`: the even and odd bfloat16 lanes of a <32 x bfloat>, as float32."""
    even = ", ".join(f"i32 {2 * i}" for i in range(16))
    odd = ", ".join(f"i32 {2 * i + 1}" for i in range(16))
    lines = []
    for tag, idx in (("e", even), ("o", odd)):
        lines.append(f"  {out}h{tag} = shufflevector <32 x bfloat> {vec}, <32 x bfloat> poison, <16 x i32> <{idx}>")
        lines.append(f"  {out}{tag} = fpext <16 x bfloat> {out}h{tag} to <16 x float>")
    return lines


def task_entry(name: str, panels: int, setup=()) -> list:
    """The entry block of task t of n (the ABI of parallel_entry): A, B and C from the closure,
    `setup` lines, then panels [lo, hi) = [t*P/n, (t+1)*P/n), branching to %panel or %exit."""
    return [
        f"define internal void @{name}_task(ptr %closure, i64 %t, i64 %n) nounwind {{",
        "entry:",
        "  %A = load ptr, ptr %closure",
        "  %pB = getelementptr inbounds ptr, ptr %closure, i64 1",
        "  %B = load ptr, ptr %pB",
        "  %pC = getelementptr inbounds ptr, ptr %closure, i64 2",
        "  %C = load ptr, ptr %pC",
        *setup,
        f"  %lo0 = mul i64 %t, {panels}",
        "  %lo = udiv i64 %lo0, %n",
        "  %t1 = add i64 %t, 1",
        f"  %hi0 = mul i64 %t1, {panels}",
        "  %hi = udiv i64 %hi0, %n",
        "  %any = icmp ult i64 %lo, %hi",
        "  br i1 %any, label %panel, label %exit",
    ]


def _task(s: GemmShape, name: str, elem: str = "bfloat") -> str:
    """Task t of n: column panels [t*P/n, (t+1)*P/n), every row tile of each. `elem` is the
    LLVM type of A's and B's elements (gemm_int8.py's i8)."""
    panels, full = s.N // s.nr, s.M // s.mr
    tail = s.M % s.mr
    lines = [
        *task_entry(name, panels),
        "panel:",
        "  %p = phi i64 [ %lo, %entry ], [ %pnext, %panel_end ]",
        f"  %boff = mul i64 %p, {s.K * s.nr}",
        f"  %bp = getelementptr inbounds {elem}, ptr %B, i64 %boff",
        f"  %coff = mul i64 %p, {s.nr}",
        "  %cp = getelementptr inbounds float, ptr %C, i64 %coff",
    ]
    if full:
        lines += [
            "  br label %rows",
            "rows:",
            "  %i = phi i64 [ 0, %panel ], [ %inext, %rows ]",
            f"  %aoff = mul i64 %i, {s.mr * s.K}",
            f"  %ap = getelementptr inbounds {elem}, ptr %A, i64 %aoff",
            f"  %crow = mul i64 %i, {s.mr * s.N}",
            "  %cpi = getelementptr inbounds float, ptr %cp, i64 %crow",
            f"  call void @{name}_mk{s.mr}(ptr %ap, ptr %bp, ptr %cpi)",
            "  %inext = add nuw nsw i64 %i, 1",
            f"  %rmore = icmp ult i64 %inext, {full}",
            "  br i1 %rmore, label %rows, label %rows_done",
            "rows_done:",
        ]
    else:
        lines += ["  br label %rows_done", "rows_done:"]
    if tail:
        lines += [
            f"  %apt = getelementptr inbounds {elem}, ptr %A, i64 {full * s.mr * s.K}",
            f"  %cpt = getelementptr inbounds float, ptr %cp, i64 {full * s.mr * s.N}",
            f"  call void @{name}_mk{tail}(ptr %apt, ptr %bp, ptr %cpt)",
        ]
    lines += [
        "  br label %panel_end",
        "panel_end:",
        "  %pnext = add nuw nsw i64 %p, 1",
        "  %pmore = icmp ult i64 %pnext, %hi",
        "  br i1 %pmore, label %panel, label %exit",
        "exit:",
        "  ret void",
        "}",
        "",
    ]
    return "\n".join(lines)


def _entry(s: GemmShape, name: str) -> str:
    return parallel_entry(name, s.N // s.nr)


def parallel_entry(name: str, panels: int) -> str:
    """The kernel's entry: A, B and C in a closure, one task per column panel, at most one per
    thread of the pool (the low-precision GEMMs' task functions share this ABI)."""
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
