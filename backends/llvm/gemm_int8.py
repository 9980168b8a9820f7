"""LLVM IR of an int8 GEMM: C[M, N] (int32) = A[M, K] (uint8, row-major) @ B (int8), B packed
ahead of time in the quad-interleaved (VNNI-4) layout that `vpdpbusd` reads:

    Bp[N // nr, K // 4, nr, 4]      Bp[p, k4, c, e] = B[4*k4 + e, p*nr + c]

The register tile and the tasks are gemm_bf16.py's (mr rows x nr columns, column panels on the
thread pool). Per quad of k every accumulator gets

- `vnni`: `llvm.x86.avx512.vpdpbusd.512` (AVX-512 VNNI: 64 u8 x s8 products per instruction,
  summed in fours into int32 without saturation), or
- `int`: the exact emulation: the quads split into their four bytes, widened (A zero-, B
  sign-extended) to int32, multiplied and added. Integer sums are exact: both paths agree.

A signed int8 A is the caller's business (templates/gemm_int8.py adds 128 and subtracts
128 * the column sums of B, the u8 x s8 compensation).
"""

from __future__ import annotations

from minitc.backends.llvm.gemm_bf16 import GemmShape, _entry, _task
from minitc.errors import BuildError

PATHS = ("vnni", "int")
VPDPBUSD = "llvm.x86.avx512.vpdpbusd.512"


def render(shape: GemmShape, path: str, name: str) -> str:
    if path not in PATHS:
        raise BuildError(f"int8 GEMM: unknown path {path!r}; one of {', '.join(PATHS)}")
    if shape.nr % 16 or shape.N % shape.nr or shape.K % 4:
        raise BuildError(f"int8 GEMM: nr must be a multiple of 16 dividing N, and K a multiple of 4, got {shape}")
    rows = sorted({shape.mr, shape.M % shape.mr} - {0}, reverse=True)
    head = [
        "declare void @minitc_parallel_launch(ptr, ptr, i64)",
        "declare i64 @minitc_num_threads()",
        f"declare <16 x i32> @{VPDPBUSD}(<16 x i32>, <64 x i8>, <64 x i8>)",
        "",
    ]
    parts = ["\n".join(head)] + [_micro_kernel(shape, path, r, f"{name}_mk{r}") for r in rows]
    return "\n".join(parts + [_task(shape, name, "i8"), _entry(shape, name)])


def _micro_kernel(s: GemmShape, path: str, mr: int, fname: str) -> str:
    nv, k4s = s.nr // 16, s.K // 4
    acc = {(r, v): f"%acc{r}_{v}" for r in range(mr) for v in range(nv)}
    new = {(r, v): f"%new{r}_{v}" for r in range(mr) for v in range(nv)}
    lines = [
        f"define internal void @{fname}(ptr noalias %a, ptr noalias %b, ptr noalias %c) alwaysinline nounwind {{",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %k4 = phi i64 [ 0, %entry ], [ %k4next, %loop ]",
    ]
    lines += [f"  {acc[key]} = phi <16 x i32> [ zeroinitializer, %entry ], [ {new[key]}, %loop ]" for key in acc]
    for v in range(nv):  # the panel's row k4: nr columns x 4 values
        lines.append(f"  %bo{v} = mul i64 %k4, {s.nr * 4}")
        lines.append(f"  %bi{v} = add i64 %bo{v}, {v * 64}")
        lines.append(f"  %bp{v} = getelementptr inbounds i8, ptr %b, i64 %bi{v}")
        lines.append(f"  %b{v} = load <64 x i8>, ptr %bp{v}, align 1")
        if path == "int":
            lines += _bytes(f"%b{v}", "sext")
    for r in range(mr):
        lines.append(f"  %ai{r} = add i64 %k4, {r * s.K // 4}")  # quad index of A[r, 4*k4]
        lines.append(f"  %ap{r} = getelementptr inbounds i32, ptr %a, i64 %ai{r}")
        lines.append(f"  %aq{r} = load i32, ptr %ap{r}, align 1")
        lines.append(f"  %ains{r} = insertelement <16 x i32> poison, i32 %aq{r}, i64 0")
        lines.append(f"  %abc{r} = shufflevector <16 x i32> %ains{r}, <16 x i32> poison, <16 x i32> zeroinitializer")
        lines.append(f"  %a{r} = bitcast <16 x i32> %abc{r} to <64 x i8>")
        if path == "int":
            lines += _bytes(f"%a{r}", "zext")
        for v in range(nv):
            if path == "vnni":
                lines.append(
                    f"  {new[r, v]} = call <16 x i32> @{VPDPBUSD}(<16 x i32> {acc[r, v]}, "
                    f"<64 x i8> %a{r}, <64 x i8> %b{v})"
                )
                continue
            total = acc[r, v]
            for j in range(4):
                prod = f"%p{r}_{v}_{j}"
                lines.append(f"  {prod} = mul <16 x i32> %a{r}x{j}, %b{v}x{j}")
                out = new[r, v] if j == 3 else f"%s{r}_{v}_{j}"
                lines.append(f"  {out} = add <16 x i32> {total}, {prod}")
                total = out
    lines += [
        "  %k4next = add nuw nsw i64 %k4, 1",
        f"  %more = icmp ult i64 %k4next, {k4s}",
        "  br i1 %more, label %loop, label %done",
        "done:",
    ]
    for r in range(mr):
        for v in range(nv):
            lines.append(f"  %cp{r}_{v} = getelementptr inbounds i32, ptr %c, i64 {r * s.N + v * 16}")
            lines.append(f"  store <16 x i32> {new[r, v]}, ptr %cp{r}_{v}, align 4")
    return "\n".join(lines + ["  ret void", "}", ""])


def _bytes(vec: str, extend: str) -> list:
    """`{vec}x0` .. `{vec}x3`: byte j of each of the 16 quads of a <64 x i8>, as int32."""
    lines = []
    for j in range(4):
        idx = ", ".join(f"i32 {4 * i + j}" for i in range(16))
        lines.append(f"  {vec}h{j} = shufflevector <64 x i8> {vec}, <64 x i8> poison, <16 x i32> <{idx}>")
        lines.append(f"  {vec}x{j} = {extend} <16 x i8> {vec}h{j} to <16 x i32>")
    return lines
