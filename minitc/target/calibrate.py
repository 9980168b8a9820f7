"""A short calibration of the host's core: what it does per cycle, measured, not looked up.

    calibration(cpu, features, facts)   # measured once per machine (about 2 s), then cached

gives a dict of plain numbers:

    ghz                       clock while the calibration ran (a chain of dependent integer adds,
                              one cycle each on every x86 core)
    fma[bits]                 {"latency": cycles, "per_cycle": FMAs issued per cycle} for 256-
                              and, with AVX-512, 512-bit vectors: latency x per_cycle is the
                              number of independent accumulators a micro-kernel needs
    loads_per_cycle[bits]     vector loads from L1 per cycle
    broadcasts_per_cycle[bits] scalar-to-vector broadcasts from L1 per cycle (vbroadcastss)
    read_bytes_per_cycle      {"l1d", "l2", "l3"}: bytes one core reads per cycle from a buffer
                              resident in that level, with the widest vectors
    stream_bytes_per_cycle[bits] a triad a = 3b + c over L2-resident arrays, in vectors of bits:
                              the width memory-bound kernels should use is the faster one
    memory_gbps               one core's read bandwidth from a buffer twice the L3
    load_latency_cycles       {"l1d", "l2", "l3"}: load-to-use cycles of a chain of dependent
                              loads whose lines live in that level (how far ahead a prefetch
                              must ask: templates/gemm_prefetch.py)

The kernels are written directly in LLVM IR (this layer sits below minitc's code generator):
volatile loads that nothing consumes, so only the load ports limit them; FMA chains on
registers; inline-assembly broadcasts and adds that LLVM cannot fold. Each rate is the best
of SAMPLES runs of at least MIN_SECONDS, so a load on the machine slows it less.

The result is cached in the user's cache directory ($XDG_CACHE_HOME/minitc/hardware, else
~/.cache/minitc/hardware) under the fingerprint of the host's facts (host.py) and the host's
LLVM cpu and features: another machine, or the same one after a change of cpu, caches or cores,
calibrates again. MINITC_CALIBRATION=off skips the measurement (the description then uses the
table of cpu names, as for a target that is not the host).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import time
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np

VERSION = 2  # bump when the measurements change meaning: older cache files are measured again
SAMPLES = 5
MIN_SECONDS = 0.004
UNROLL = 16  # operations per loop iteration: the loop's own add/compare/branch is in the noise


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minitc" / "hardware"


def enabled() -> bool:
    return os.environ.get("MINITC_CALIBRATION", "on").lower() not in ("off", "0", "no")


# -- the kernels, in LLVM IR ------------------------------------------------------------------------


def _loop(name: str, args: str, body: list, setup: list = (), phis: list = (), ret: str = "void") -> str:
    """`define ret @name(i64 %iters, args)` running `body` iters times."""
    lines = [f"define {ret} @{name}(i64 %iters{', ' + args if args else ''}) {{", "entry:", *setup, "  br label %loop"]
    lines += ["loop:", "  %i = phi i64 [ 0, %entry ], [ %next, %loop ]", *phis, *body]
    lines += [
        "  %next = add i64 %i, 1",
        "  %more = icmp ult i64 %next, %iters",
        "  br i1 %more, label %loop, label %done",
    ]
    return "\n".join(lines + ["done:"])


def _adds_ir() -> str:
    add = 'call i64 asm "add $2, $0", "=r,0,r"'
    body = [f"  %x{u + 1} = {add}(i64 %x{u}, i64 %k)" for u in range(UNROLL)]
    phis = [f"  %x0 = phi i64 [ 0, %entry ], [ %x{UNROLL}, %loop ]"]
    return _loop("adds", "i64 %k", body, phis=phis, ret="i64") + f"\n  ret i64 %x{UNROLL}\n}}"


def _splat(vec: str, lanes: int, name: str, value: str) -> list:
    return [
        f"  %{name}0 = insertelement {vec} poison, float {value}, i64 0",
        f"  %{name} = shufflevector {vec} %{name}0, {vec} poison, <{lanes} x i32> zeroinitializer",
    ]


def _fma_ir(lanes: int, chains: int) -> str:
    """`chains` independent accumulators, each `acc = fma(acc, x, y)` UNROLL // chains (at
    least once) per iteration: one chain measures the latency, many the throughput."""
    vec, fma = f"<{lanes} x float>", f"@llvm.fma.v{lanes}f32"
    steps = max(1, UNROLL // chains)
    setup = _splat(vec, lanes, "x", "%xs") + _splat(vec, lanes, "y", "%ys")
    phis = [f"  %a{c}_0 = phi {vec} [ %y, %entry ], [ %a{c}_{steps}, %loop ]" for c in range(chains)]
    body = [
        f"  %a{c}_{s + 1} = call {vec} {fma}({vec} %a{c}_{s}, {vec} %x, {vec} %y)"
        for s in range(steps)
        for c in range(chains)
    ]
    name = f"fma_{lanes}_{chains}"
    text = _loop(name, "float %xs, float %ys, ptr %out", body, setup, phis)
    total = f"%a0_{steps}"
    for c in range(1, chains):
        text += f"\n  %s{c} = fadd {vec} {total}, %a{c}_{steps}"
        total = f"%s{c}"
    return text + f"\n  store {vec} {total}, ptr %out, align 4\n  ret void\n}}"


def _loads_ir(lanes: int) -> str:
    """UNROLL volatile vector loads from distinct cache lines of `%p` per iteration."""
    vec = f"<{lanes} x float>"
    body = []
    for u in range(UNROLL):
        body += [
            f"  %p{u} = getelementptr i8, ptr %p, i64 {u * 64}",
            f"  %v{u} = load volatile {vec}, ptr %p{u}, align 4",
        ]
    return _loop(f"loads_{lanes}", "ptr %p", body) + "\n  ret void\n}"


def _broadcasts_ir(lanes: int) -> str:
    reg = "zmm" if lanes == 16 else "ymm"
    regs = range(1, 9)
    asm = "\\0A".join(f"vbroadcastss {4 * u}($0), %{reg}{1 + u % 8}" for u in range(UNROLL))
    clobbers = ",".join(f"~{{xmm{r}}}" for r in regs)
    body = [f'  call void asm sideeffect "{asm}", "r,{clobbers}"(ptr %p)']
    return _loop(f"broadcasts_{lanes}", "ptr %p", body) + "\n  ret void\n}"


def _sweep(name: str, args: str, body: list, step: int, setup: list = ()) -> str:
    """`name(i64 %reps, args, i64 %nvec)`: `body` for %j = 0, step, ... < nvec, reps times."""
    return "\n".join(
        [
            f"define void @{name}(i64 %reps, {args}, i64 %nvec) {{",
            "entry:",
            *setup,
            "  br label %rep",
            "rep:",
            "  %r = phi i64 [ 0, %entry ], [ %rnext, %rdone ]",
            "  br label %loop",
            "loop:",
            "  %j = phi i64 [ 0, %rep ], [ %jnext, %loop ]",
            *body,
            f"  %jnext = add i64 %j, {step}",
            "  %jmore = icmp ult i64 %jnext, %nvec",
            "  br i1 %jmore, label %loop, label %rdone",
            "rdone:",
            "  %rnext = add i64 %r, 1",
            "  %rmore = icmp ult i64 %rnext, %reps",
            "  br i1 %rmore, label %rep, label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


def _read_ir(lanes: int) -> str:
    """`read(reps, p, nvec)`: volatile vector loads over nvec vectors of `p`, reps times."""
    vec = f"<{lanes} x float>"
    body = [
        line
        for u in range(8)
        for line in (
            f"  %o{u} = add i64 %j, {u}",
            f"  %q{u} = getelementptr {vec}, ptr %p, i64 %o{u}",
            f"  %w{u} = load volatile {vec}, ptr %q{u}, align 4",
        )
    ]
    return _sweep(f"read_{lanes}", "ptr %p", body, 8)


def _triad_ir(lanes: int) -> str:
    """`triad(reps, a, b, c, nvec)`: a = b * 3 + c over nvec vectors, reps times: what a
    memory-bound kernel does, to compare vector widths by."""
    vec = f"<{lanes} x float>"
    body = [
        *(f"  %p{x} = getelementptr {vec}, ptr %{x}, i64 %j" for x in "abc"),
        f"  %vb = load {vec}, ptr %pb, align 4",
        f"  %vc = load {vec}, ptr %pc, align 4",
        f"  %vm = fmul {vec} %vb, %s",
        f"  %va = fadd {vec} %vm, %vc",
        f"  store {vec} %va, ptr %pa, align 4",
    ]
    return _sweep(f"triad_{lanes}", "ptr %a, ptr %b, ptr %c", body, 1, _splat(vec, lanes, "s", "3.0"))


def _chase_ir() -> str:
    """`chase(iters, p) -> p`: UNROLL dependent loads an iteration, each reading the address of
    the next, so each waits the full load-to-use latency of the level the lines live in."""
    body = [f"  %p{u + 1} = load volatile ptr, ptr %p{u}, align 8" for u in range(UNROLL)]
    phis = [f"  %p0 = phi ptr [ %start, %entry ], [ %p{UNROLL}, %loop ]"]
    return _loop("chase", "ptr %start", body, phis=phis, ret="ptr") + f"\n  ret ptr %p{UNROLL}\n}}"


def pointer_chain(nbytes: int, seed: int = 0) -> tuple:
    """(buffer, first line's address): an int64 buffer of about `nbytes` whose 64-byte lines
    each hold the address of the next line of one random cycle through all of them. Random over
    the whole buffer: visited page by page, the prefetchers fetched the rest of each page and
    the Zen 5's L2 read 9 cycles, its L3 21 (16 and 56 this way, the published 14 and ~50 plus
    TLB misses)."""
    lines = max(nbytes // 64, 2)
    raw = np.zeros(lines * 8 + 8, np.int64)
    words = raw[(-raw.ctypes.data % 64) // 8 :][: lines * 8]
    order = np.random.default_rng(seed).permutation(lines)
    addresses = words.ctypes.data + order * 64
    words[order * 8] = np.roll(addresses, -1)
    return words, int(addresses[0])


# -- running them ----------------------------------------------------------------------------------


def _best_seconds(call, iters: int) -> tuple:
    """(best seconds, iters) of call(iters), iters grown until one run takes MIN_SECONDS."""
    while True:
        t0 = time.perf_counter()
        call(iters)
        if time.perf_counter() - t0 >= MIN_SECONDS or iters > 2**40:
            break
        iters *= 4
    best = float("inf")
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        call(iters)
        best = min(best, time.perf_counter() - t0)
    return best, iters


def _resident_bytes(level: int, sizes: dict, cpus: int) -> int:
    """A buffer size that lives in cache `level` (sizes: bytes per level) and mostly out of the
    level above: half the L1 or L2, a core's share of the L3 (at most 8 MiB), at least four
    times the level above; 0 where the level is unknown or not twice the one above."""
    size, above = sizes.get(level, 0), sizes.get(level - 1, 0)
    if level == 1:
        return size // 2
    if not size > 2 * above > 0:
        return 0
    nbytes = size // 2 if level == 2 else min(size // (2 * max(1, cpus)), 8 << 20)
    return max(nbytes, 4 * above)


def _aligned(n: int) -> np.ndarray:
    """n float32 ones starting on a cache line (each page touched: no shared zero page)."""
    raw = np.ones(n + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip : skip + n]


def _engine(cpu: str, features: str, ir: str):
    from minitc.target.llvm_state import LLVM_LOCK, ensure_llvm_initialized

    ensure_llvm_initialized()
    with LLVM_LOCK:
        tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=2, jit=True)
        mod = llvm.parse_assembly(ir)
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
    return engine


def measure(cpu: str, features: str, facts) -> dict:
    """Run the calibration on this host (whose LLVM cpu and feature string are given)."""
    wide = "+avx512f" in features.split(",")
    registers = 32 if wide else 16
    widths = (8, 16) if wide else (8,)
    chains = min(registers - 4, 24)
    parts = [_adds_ir(), _chase_ir()]
    for lanes in widths:
        vec = f"<{lanes} x float>"
        parts.append(f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})")
        parts += [
            _fma_ir(lanes, 1),
            _fma_ir(lanes, chains),
            _loads_ir(lanes),
            _broadcasts_ir(lanes),
            _read_ir(lanes),
            _triad_ir(lanes),
        ]
    engine = _engine(cpu, features, "\n".join(parts))
    fn = engine.get_function_address
    i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float

    adds = ctypes.CFUNCTYPE(i64, i64, i64)(fn("adds"))
    seconds, iters = _best_seconds(lambda n: adds(n, 3), 1 << 16)
    cycle = seconds / (iters * UNROLL)
    result = {"version": VERSION, "ghz": round(1e-9 / cycle, 3), "fma": {}}
    for key in ("loads_per_cycle", "broadcasts_per_cycle"):
        result[key] = {}
    buf = _aligned(1 << 16)
    out = np.zeros(16, np.float32)

    def per_cycle(call, ops_per_iter):
        s, n = _best_seconds(call, 1 << 12)
        return s / cycle, n * ops_per_iter

    for lanes in widths:
        bits = str(32 * lanes)
        fma = ctypes.CFUNCTYPE(None, i64, f32, f32, ptr)
        lat = fma(fn(f"fma_{lanes}_1"))
        thr = fma(fn(f"fma_{lanes}_{chains}"))
        cycles, ops = per_cycle(lambda n, f=lat: f(n, 0.999999, 1e-6, out.ctypes.data), UNROLL)
        latency = cycles / ops
        cycles, ops = per_cycle(
            lambda n, f=thr: f(n, 0.999999, 1e-6, out.ctypes.data), chains * max(1, UNROLL // chains)
        )
        result["fma"][bits] = {"latency": round(latency, 2), "per_cycle": round(ops / cycles, 2)}
        for key, name in (("loads_per_cycle", "loads"), ("broadcasts_per_cycle", "broadcasts")):
            f = ctypes.CFUNCTYPE(None, i64, ptr)(fn(f"{name}_{lanes}"))
            cycles, ops = per_cycle(lambda n, f=f: f(n, buf.ctypes.data), UNROLL)
            result[key][bits] = round(ops / cycles, 2)
    sizes = {c.level: c.size for c in facts.caches}
    stream = _aligned(3 * max(sizes.get(2, 256 << 10) // 8, 4096))  # three arrays, half the L2
    third = stream.size // 3
    a, b, c = (stream[i * third :].ctypes.data for i in range(3))
    result["stream_bytes_per_cycle"] = {}
    for lanes in widths:
        triad = ctypes.CFUNCTYPE(None, i64, ptr, ptr, ptr, i64)(fn(f"triad_{lanes}"))
        nvec = third // lanes
        seconds, reps = _best_seconds(lambda n, f=triad, v=nvec: f(n, a, b, c, v), 1)
        result["stream_bytes_per_cycle"][str(32 * lanes)] = round(reps * nvec * lanes * 12 / (seconds / cycle), 1)
    lanes = widths[-1]
    read = ctypes.CFUNCTYPE(None, i64, ptr, i64)(fn(f"read_{lanes}"))
    result["read_bytes_per_cycle"] = {"l1d": round(result["loads_per_cycle"][str(32 * lanes)] * 4 * lanes, 1)}
    for level, key in ((2, "l2"), (3, "l3")):
        nbytes = _resident_bytes(level, sizes, facts.cpus)
        if nbytes:
            data = _aligned(nbytes // 4)
            nvec = data.size // lanes // 8 * 8
            seconds, reps = _best_seconds(lambda n, d=data, v=nvec: read(n, d.ctypes.data, v), 1)
            result["read_bytes_per_cycle"][key] = round(reps * nvec * lanes * 4 / (seconds / cycle), 1)
    big = _aligned(min(max(2 * sizes.get(3, 0), 64 << 20), 512 << 20) // 4)
    nvec = big.size // lanes // 8 * 8
    seconds, reps = _best_seconds(lambda n: read(n, big.ctypes.data, nvec), 1)
    result["memory_gbps"] = round(reps * nvec * lanes * 4 / seconds / 1e9, 1)
    chase = ctypes.CFUNCTYPE(ptr, i64, ptr)(fn("chase"))
    result["load_latency_cycles"] = {}
    for level, key in ((1, "l1d"), (2, "l2"), (3, "l3")):
        nbytes = _resident_bytes(level, sizes, facts.cpus)
        if nbytes:
            words, start = pointer_chain(nbytes)
            seconds, iters = _best_seconds(lambda n, s=start: chase(n, s), 1 << 10)
            result["load_latency_cycles"][key] = round(seconds / (iters * UNROLL) / cycle, 1)
            del words
    del engine
    return result


@functools.lru_cache(maxsize=None)
def calibration(cpu: str, features: str, facts) -> dict | None:
    """The host's calibration: from the cache file of this machine if there is one, else
    measured now and written there. None where calibration is turned off."""
    if not enabled():
        return None
    path = cache_dir() / f"{cpu}-{facts.fingerprint()}-{_digest(features)}.json"
    try:
        stored = json.loads(path.read_text())
        if stored.get("version") == VERSION and stored.get("facts") == facts.to_dict():
            return stored["calibration"]
    except (OSError, ValueError, AttributeError):
        pass  # missing, unreadable or from another version: measure again
    result = measure(cpu, features, facts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": VERSION, "facts": facts.to_dict(), "calibration": result}, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: measured again next time
    return result


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]
