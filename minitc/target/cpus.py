"""What minitc knows about x86 CPUs by their LLVM names, and what it reads from the host.

    CPU_FEATURES["znver4"]      # the vector ISA the cpu implies: {"sse", ..., "avx2", "fma", "avx512f"}
    known_caches("znver4")      # {"l1d": 32 KiB, "l2": 1 MiB, "l3": 32 MiB}, from the table below
    full_rate_512("znver4")     # False: Zen 4 runs a 512-bit op as two 256-bit halves
    row_streams("znver5")       # 4: rows a streaming reduction reads side by side

These tables describe a cpu by name only for targets that are not the host (cross-compiling for
`-mcpu=X`): the host's own description is measured (host.py, calibrate.py, hardware.py).

The cache table holds one typical part per cpu name (an L3 varies with the model; templates
size their blocks by L1d and L2, which do not). A cpu missing from it gets DEFAULT_CACHES, the
smallest of the AVX2 era, so an unknown machine gets blocks that fit rather than spill.
"""

from __future__ import annotations

KIB, MIB = 1024, 1024 * 1024
LEVELS = ("l1d", "l2", "l3")  # l1d and l2 are per core; l3 is shared by a group of cores (0: none)

# x86 cpus LLVM knows, by the widest vector ISA they imply. A cpu missing here is rejected with a
# message, rather than silently compiled for a generic cpu (LLVM only warns on stderr).
_SSE = (
    "x86-64 x86-64-v2 generic core2 penryn nehalem westmere silvermont slm goldmont goldmont-plus "
    "tremont bonnell atom k8 k8-sse3 opteron opteron-sse3 athlon64 athlon64-sse3 athlon-fx "
    "amdfam10 barcelona btver1 nocona prescott corei7"
).split()
_AVX = "sandybridge ivybridge corei7-avx core-avx-i btver2 bdver1".split()
_AVX2 = (
    "x86-64-v3 haswell core-avx2 broadwell skylake alderlake raptorlake meteorlake arrowlake "
    "arrowlake-s lunarlake gracemont sierraforest grandridge clearwaterforest pantherlake "
    "znver1 znver2 znver3 bdver2 bdver3 bdver4"
).split()
_AVX512 = (
    "x86-64-v4 skylake-avx512 skx cascadelake cooperlake cannonlake icelake-client icelake-server "
    "rocketlake tigerlake sapphirerapids emeraldrapids graniterapids graniterapids-d diamondrapids "
    "knl knm znver4 znver5"
).split()
CPU_FEATURES = {}
for _names, _feats in (
    (_SSE, {"sse", "sse2"}),
    (_AVX, {"sse", "sse2", "avx"}),
    (_AVX2, {"sse", "sse2", "avx", "avx2", "fma"}),
    (_AVX512, {"sse", "sse2", "avx", "avx2", "fma", "avx512f"}),
):
    for _name in _names:
        CPU_FEATURES[_name] = frozenset(_feats)
CPU_FEATURES["bdver1"] = frozenset({"sse", "sse2", "avx"})  # fma4 only

# The low-precision dot products a cpu implies (LLVM's feature names, as in its X86.td), so a
# named cpu's description says which bf16/int8 instructions it has, as the host's flags do:
# templates/gemm_bf16.py chooses vdpbf16ps or its emulation by `avx512bf16`.
_VNNI = {"avx512vnni"}
_BF16 = {"avx512bf16", "avx512vnni"}
_AMX = _BF16 | {"avxvnni", "avx512fp16", "amx-tile", "amx-bf16", "amx-int8"}
for _names, _feats in (
    ("cascadelake icelake-client icelake-server tigerlake rocketlake", _VNNI),
    ("cooperlake znver4 znver5", _BF16),
    ("sapphirerapids emeraldrapids graniterapids graniterapids-d diamondrapids", _AMX),
    ("alderlake raptorlake meteorlake arrowlake arrowlake-s lunarlake sierraforest", {"avxvnni"}),
):
    for _name in _names.split():
        CPU_FEATURES[_name] = CPU_FEATURES[_name] | _feats

# Cores with two 512-bit FMA pipes. Zen 4 splits a 512-bit op into two 256-bit halves; client
# Intel cores (Ice Lake, Tiger Lake) fuse their two 256-bit pipes into one; Zen 5 is full-rate
# on desktop parts only, so it is counted as split, and so is an unknown AVX-512 cpu.
FULL_RATE_512 = frozenset(
    "skylake-avx512 skx cascadelake cooperlake icelake-server sapphirerapids emeraldrapids "
    "graniterapids graniterapids-d diamondrapids knl knm".split()
)

# Cpus on which a row reduction over a matrix too large for the caches ran faster reading four
# rows side by side (one cache line of each per step) than one row at a time. Row sums of 4096^2
# float32 at 2 threads, alternating in one process: Zen 5 0.990 ms against 1.058 (AVX2 code there
# 0.788 against 0.856); Zen 4 the other way, 1.630 against 1.371 and 1.644 against 1.389 (torch
# 1.38). Zen 2 and Zen 3 ran one row at a time level with torch; the others are unmeasured.
ROW_STREAMS = {"znver5": 4}

DEFAULT_CACHES = {"l1d": 32 * KIB, "l2": 256 * KIB, "l3": 8 * MIB}
_CACHE_GROUPS = (  # (cpu names, L1d KiB, L2 KiB, L3 MiB)
    ("sandybridge ivybridge corei7-avx core-avx-i haswell core-avx2 broadwell skylake", 32, 256, 8),
    ("cannonlake", 32, 256, 4),
    ("icelake-client rocketlake", 48, 512, 8),
    ("tigerlake", 48, 1280, 12),
    ("alderlake", 48, 1280, 30),
    ("raptorlake meteorlake", 48, 2048, 24),
    ("arrowlake arrowlake-s pantherlake", 48, 3072, 36),
    ("lunarlake", 48, 2560, 12),
    ("gracemont sierraforest grandridge clearwaterforest", 32, 1024, 32),  # 4 MiB L2 per 4 cores
    ("skylake-avx512 skx cascadelake cooperlake", 32, 1024, 24),
    ("icelake-server", 48, 1280, 48),
    ("sapphirerapids emeraldrapids graniterapids graniterapids-d diamondrapids", 48, 2048, 96),
    ("knl knm", 32, 512, 0),  # 1 MiB L2 per 2-core tile, no L3
    ("znver1", 32, 512, 8),  # L3 per 4-core complex
    ("znver2", 32, 512, 16),
    ("znver3", 32, 512, 32),  # L3 per 8-core complex
    ("znver4", 32, 1024, 32),
    ("znver5", 48, 1024, 32),
)
CACHES = {
    name: {"l1d": l1 * KIB, "l2": l2 * KIB, "l3": l3 * MIB}
    for names, l1, l2, l3 in _CACHE_GROUPS
    for name in names.split()
}


def known_caches(cpu: str) -> dict:
    """{"l1d", "l2", "l3"} -> bytes for an LLVM cpu name: the table's, else DEFAULT_CACHES."""
    return dict(CACHES.get(cpu, DEFAULT_CACHES))


def full_rate_512(cpu: str) -> bool:
    """True if the cpu runs 512-bit vector operations at the rate of 256-bit ones."""
    return cpu in FULL_RATE_512


def row_streams(cpu: str) -> int:
    """Rows a streaming row reduction reads side by side on `cpu` (ROW_STREAMS, else 1)."""
    return ROW_STREAMS.get(cpu, 1)


# Associativity of L1d, L2 and L3 (the analytical GEMM blocking divides caches by ways).
DEFAULT_WAYS = (8, 8, 16)
CACHE_WAYS = {
    **dict.fromkeys("icelake-client rocketlake tigerlake icelake-server".split(), (12, 20, 12)),
    **dict.fromkeys("sapphirerapids emeraldrapids graniterapids graniterapids-d diamondrapids".split(), (12, 16, 15)),
    **dict.fromkeys("skylake-avx512 skx cascadelake cooperlake".split(), (8, 16, 11)),
    **dict.fromkeys(
        "alderlake raptorlake meteorlake arrowlake arrowlake-s lunarlake pantherlake".split(), (12, 10, 12)
    ),
    "znver4": (8, 8, 16),
    "znver5": (12, 16, 16),
}
# FMA latency in cycles where it is not 4 (Skylake and later, Zen 4 and 5).
DEFAULT_FMA_LATENCY = 4.0
FMA_LATENCY = dict.fromkeys("haswell core-avx2 broadwell znver1 znver2 znver3".split(), 5.0)
LOADS_PER_CYCLE = 2.0  # vector loads and broadcasts from L1: two on every core named here
# Bytes per cycle one core reads from its L2, sustained (AMD's 64-byte path measured near 60 on
# Zen 5 by calibrate.py); others get a conservative default.
DEFAULT_L2_BYTES_PER_CYCLE = 32.0
L2_BYTES_PER_CYCLE = dict.fromkeys("znver2 znver3 znver4 znver5".split(), 60.0)
DEFAULT_MEMORY_GBPS = 10.0
DEFAULT_GHZ = 3.0
