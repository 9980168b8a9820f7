"""CPU targets (LLVM): parsing `llvm ...` target strings, and the one description of the CPU
that templates derive their choices from.

    parse_cpu_target("llvm")                                  # the host (cpu, features, triple, cores)
    parse_cpu_target("llvm -mcpu=znver1")                     # a named x86 cpu
    parse_cpu_target("llvm -mcpu=skylake -mattr=+avx2,+fma")  # plus explicit features
    parse_cpu_target("llvm -num-cores=2")                     # the host, with a core count

`LLVMTarget.string` is the normalised form (`llvm -mcpu=znver2 -num-cores=2`): the same machine
always prints the same way, so it can key caches and tuning records.

The description (properties of LLVMTarget; `describe()` gives them all as a dict):

    t.lanes("float32")          # lanes of one vector register: 16 (AVX-512), 8 (AVX2), 4 (SSE)
    t.vector_bits               # the widest vector register: 512, 256 or 128
    t.vector_registers          # 32 with AVX-512 (zmm0-31), else 16
    t.full_rate_512             # 512-bit FMAs at the 256-bit instruction rate (Intel server
                                # cores, Zen 5), not split in halves (Zen 4, Intel client cores)
    t.preferred_vector_bits     # what memory-bound code should use (512 only where it streams faster)
    t.preferred_lanes("float32")  # lanes of a dtype at that width
    t.cache_bytes("l2")         # "l1d", "l2" (per core), "l3" (shared; 0: none), in bytes
    t.num_cores                 # cores the parallel loops are shared among (-num-cores)
    t.row_streams               # rows a memory-bound row reduction reads side by side
    t.hardware                  # all of it and more (FMA latency and rate, loads per cycle,
                                # cache ways, bandwidths): hardware.py
    t.is_host                   # the host's cpu: described by what it is and measures

Vector facts follow the enabled features, so `-mattr=-avx512f` on znver4 describes an AVX2
machine. For the host's cpu the rest is measured, not named: its caches from sysfs, its core
from a calibration of a few seconds cached per machine (host.py, calibrate.py), and its cpu name
is LLVM's unless the feature flags contradict it (a hypervisor's model number can make LLVM
name a Sapphire Rapids guest `rocketlake`). A named cpu that is not the host is described by
the table in cpus.py (a cpu it lacks gets conservative defaults).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

import llvmlite.binding as llvm

from minitc import dtypes
from minitc.errors import BuildError
from minitc.target import calibrate, cpus, hardware
from minitc.target.cpus import CPU_FEATURES, LEVELS
from minitc.target.hardware import Hardware
from minitc.target.host import read_host_facts as host_facts
from minitc.target.host import trusted_cpu_name
from minitc.target.llvm_state import ensure_llvm_initialized

_OPTIONS = ("-mcpu", "-mattr", "-mtriple", "-num-cores")
SPLIT_512_BITS = 256  # the widest vector a core with split 512-bit units runs at full rate


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

    @property
    def is_host(self) -> bool:
        """True if this is the host's cpu (its caches are read from the host)."""
        host = _host()
        return self.cpu == host["cpu"] and self.triple == host["triple"]

    def lanes(self, dtype: str) -> int:
        """Lanes of `dtype` in one vector register (simd_width)."""
        return simd_width(self, dtype)

    @property
    def vector_bits(self) -> int:
        """Width of the widest vector register for floats: 512, 256 or 128."""
        return 32 * simd_width(self, "float32")

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: AVX-512 doubles x86-64's 16 to 32."""
        return 32 if "avx512f" in enabled_features(self) else 16

    @functools.cached_property
    def hardware(self) -> Hardware:
        """The description templates read (hardware.py): measured for the host's cpu, from the
        table of cpu names for any other (or with MINITC_CALIBRATION=off)."""
        registers = self.vector_registers
        if self.is_host:
            host, facts = _host(), host_facts()
            measured = calibrate.calibration(host["cpu"], host["features"], facts)
            if measured is not None:
                return hardware.from_calibration(self.cpu, facts, measured, self.vector_bits, registers)
            table = hardware.from_table(self.cpu, self.vector_bits, registers)
            return dataclasses.replace(table, caches=facts.caches or table.caches)
        return hardware.from_table(self.cpu, self.vector_bits, registers)

    @property
    def full_rate_512(self) -> bool:
        """True if 512-bit vector operations run at full rate (two 512-bit FMA pipes): measured
        on the host (one LLVM name covers both kinds of core), else from the table."""
        return self.hardware.full_rate_512

    @property
    def preferred_vector_bits(self) -> int:
        """The vector width that pays for memory-bound code. On the host: 512 bits only where
        512-bit FMAs are full-rate and a 512-bit stream measured faster than a 256-bit one (on
        AMD's full-rate Zen 5 it does not, and 256-bit elementwise and softmax kernels measured
        faster: docs/benchmarks.md); elsewhere 512 only on the cpus the table lists as full-rate."""
        return self.hardware.preferred_vector_bits

    @property
    def row_streams(self) -> int:
        """Rows a row reduction streaming from memory reads side by side (cpus.ROW_STREAMS), for
        the cpu whose memory system runs the code: the target's, or for a generic ISA level
        (`x86-64-v3`) that this host can run, the host's."""
        cpu = self.cpu
        if cpu.startswith("x86-64") and self.is_host_compatible:
            cpu = _host()["cpu"]
        return cpus.row_streams(cpu)

    def preferred_lanes(self, dtype: str) -> int:
        """Lanes of `dtype` in a vector of preferred_vector_bits."""
        return max(1, min(self.lanes(dtype), self.preferred_vector_bits // max(8, dtypes.bits(dtype))))

    def cache_bytes(self, level: str) -> int:
        """Size in bytes of cache `level`: "l1d" and "l2" per core, "l3" shared (0: none)."""
        if level not in LEVELS:
            raise BuildError(f"unknown cache level {level!r}; use one of {', '.join(LEVELS)}")
        cache = self.hardware.cache(LEVELS.index(level) + 1)
        return cache.size if cache else 0

    def describe(self) -> dict:
        """The description as plain data (for records and reports)."""
        hw = self.hardware
        return {
            "cpu": self.cpu,
            "vector_bits": self.vector_bits,
            "preferred_vector_bits": self.preferred_vector_bits,
            "full_rate_512": self.full_rate_512,
            "vector_registers": self.vector_registers,
            "caches": {level: self.cache_bytes(level) for level in LEVELS},
            "num_cores": self.num_cores,
            "row_streams": self.row_streams,
            "source": hw.source,
            "fma_latency": hw.fma_latency,
            "fma_per_cycle": hw.fma_per_cycle,
            "fma_chains": hw.fma_chains,
            "loads_per_cycle": hw.loads_per_cycle,
            "broadcasts_per_cycle": hw.broadcasts_per_cycle,
            "cache_ways": {level: (c.ways if c else 0) for level, c in zip(LEVELS, map(hw.cache, (1, 2, 3)))},
            "read_bytes_per_cycle": hw.read_bytes_per_cycle,
            "memory_gbps": hw.memory_gbps,
            "ghz": hw.ghz,
        }

    def __str__(self):
        return self.string


@functools.lru_cache(maxsize=None)
def _host() -> dict:
    ensure_llvm_initialized()
    return {
        "cpu": trusted_cpu_name(llvm.get_host_cpu_name(), host_facts()),
        "features": llvm.get_host_cpu_features().flatten(),
        "triple": llvm.get_process_triple(),
        "cores": os.cpu_count() or 1,
    }


def host_cpu_name() -> str:
    """The LLVM cpu name code for the host is built for: LLVM's own name for it, unless the
    host's feature flags contradict that name (host.trusted_cpu_name)."""
    return _host()["cpu"]


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
    return _enabled_features(target.cpu, target.features)


@functools.lru_cache(maxsize=256)  # asked per schedule and per template decision: 0.1 ms each, 11,000 times in a decode
def _enabled_features(cpu: str, features: str) -> frozenset:
    feats = set(CPU_FEATURES.get(cpu, ()))
    for item in features.split(","):
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
