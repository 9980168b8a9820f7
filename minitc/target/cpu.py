"""CPU targets (LLVM): parsing `llvm ...` target strings and the hardware facts codegen needs.

    parse_cpu_target("llvm")                                  # the host (cpu, features, triple, cores)
    parse_cpu_target("llvm -mcpu=znver1")                     # a named x86 cpu
    parse_cpu_target("llvm -mcpu=skylake -mattr=+avx2,+fma")  # plus explicit features
    parse_cpu_target("llvm -num-cores=2")                     # the host, with a core count

`LLVMTarget.string` is the normalised form (`llvm -mcpu=znver2 -num-cores=2`): the same machine
always prints the same way, so it can key caches and tuning records.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import llvmlite.binding as llvm

from minitc import dtypes
from minitc.errors import BuildError

_OPTIONS = ("-mcpu", "-mattr", "-mtriple", "-num-cores")

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


@dataclass(frozen=True)
class LLVMTarget:
    """A CPU to generate code for. `features` is an LLVM feature string (`+avx2,+fma,...`);
    for the host it is the host's full list, so a VM that masks out an ISA is respected."""

    cpu: str
    features: str
    triple: str
    num_cores: int
    explicit_attrs: str = ""  # the -mattr the user gave, kept for the normalised string

    @property
    def string(self) -> str:
        parts = ["llvm"]
        if self.triple != _host()["triple"]:
            parts.append(f"-mtriple={self.triple}")
        parts.append(f"-mcpu={self.cpu}")
        if self.explicit_attrs:
            parts.append(f"-mattr={self.explicit_attrs}")
        parts.append(f"-num-cores={self.num_cores}")
        return " ".join(parts)

    @property
    def is_host_compatible(self) -> bool:
        """True if code for this target can run on this machine."""
        if self.triple != _host()["triple"]:
            return False
        host = enabled_features(parse_cpu_target("llvm"))
        return enabled_features(self) <= host

    def __str__(self):
        return self.string


def ensure_llvm_initialized():
    """Initialise LLVM's native target and asm printer once (llvmlite 0.50 no longer has
    `llvm.initialize()`)."""
    _init()


@functools.lru_cache(maxsize=None)
def _init():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    return True


@functools.lru_cache(maxsize=None)
def _host() -> dict:
    _init()
    return {
        "cpu": llvm.get_host_cpu_name(),
        "features": llvm.get_host_cpu_features().flatten(),
        "triple": llvm.get_process_triple(),
        "cores": os.cpu_count() or 1,
    }


def parse_cpu_target(target) -> LLVMTarget:
    """Parse an `llvm ...` target string (an LLVMTarget passes through unchanged).
    Raises BuildError for anything else, naming the bad part and what is accepted."""
    if isinstance(target, LLVMTarget):
        return target
    if not isinstance(target, str):
        raise BuildError(f"target must be a string like 'llvm -mcpu=znver2', got {target!r}")
    words = target.split()
    if not words or words[0] != "llvm":
        kind = words[0] if words else "(empty)"
        raise BuildError(
            f"target {target!r} is not an LLVM CPU target (kind {kind!r}); the LLVM backend accepts "
            f"'llvm' optionally followed by {', '.join(o + '=...' for o in _OPTIONS)}"
        )
    opts = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if key not in _OPTIONS or not eq or not value:
            raise BuildError(
                f"unknown or malformed option {word!r} in target {target!r}; "
                f"expected {', '.join(o + '=...' for o in _OPTIONS)}"
            )
        if key in opts:
            raise BuildError(f"option {key} given twice in target {target!r}")
        opts[key] = value

    host = _host()
    triple = opts.get("-mtriple", host["triple"])
    cpu = opts.get("-mcpu", host["cpu"])
    if cpu == "native":
        cpu = host["cpu"]
    if triple.startswith(("x86_64", "i386", "i686")) and cpu not in CPU_FEATURES and cpu != host["cpu"]:
        raise BuildError(
            f"unknown cpu {cpu!r} in target {target!r}; use an LLVM x86 cpu name such as "
            f"znver2, skylake, haswell, skylake-avx512 or x86-64-v3 (this host is {host['cpu']!r})"
        )
    attrs = opts.get("-mattr", "")
    attr_list = [a for a in attrs.split(",") if a]
    for a in attr_list:
        if a[0] not in "+-" or len(a) < 2:
            raise BuildError(f"feature {a!r} in target {target!r} must look like +avx2 or -avx512f")
    attrs = ",".join(dict.fromkeys(attr_list))
    if cpu == host["cpu"] and triple == host["triple"]:
        features = ",".join(x for x in (host["features"], attrs) if x)
    else:
        features = attrs
    try:
        cores = int(opts.get("-num-cores", host["cores"]))
    except ValueError:
        raise BuildError(f"-num-cores must be a positive integer in target {target!r}") from None
    if cores < 1:
        raise BuildError(f"-num-cores must be a positive integer in target {target!r}")
    return LLVMTarget(cpu=cpu, features=features, triple=triple, num_cores=cores, explicit_attrs=attrs)


def enabled_features(target: LLVMTarget) -> frozenset:
    """The vector-relevant features the target has: those its cpu implies, then +/- from the
    feature string applied in order."""
    feats = set(CPU_FEATURES.get(target.cpu, ()))
    for item in target.features.split(","):
        if len(item) > 1 and item[0] in "+-":
            (feats.add if item[0] == "+" else feats.discard)(item[1:])
    if "avx512f" in feats:
        feats |= {"avx2", "avx", "fma"}
    if "avx2" in feats:
        feats.add("avx")
    return frozenset(feats)


def simd_width(target, dtype: str) -> int:
    """Vector lanes of `dtype` in one register: float32 gives 16 with avx512f, 8 with AVX2
    (AVX for floats), 4 with SSE only."""
    target = parse_cpu_target(target)
    feats = enabled_features(target)
    if "avx512f" in feats:
        bits = 512
    elif "avx2" in feats or ("avx" in feats and dtypes.is_float(dtype)):
        bits = 256
    else:
        bits = 128
    return max(1, bits // max(8, dtypes.bits(dtype)))
