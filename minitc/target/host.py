"""What the host CPU is, read from the operating system rather than from its name.

    facts = read_host_facts()        # /proc/cpuinfo and sysfs, once per process
    facts.flags                      # {"avx512f", "amx_tile", ...}: the kernel's feature flags
    facts.cache(2)                   # Cache(level=2, size=2 MiB, ways=16, line=64, shared_cpus=1)
    facts.fingerprint()              # keys the calibration cache: another machine, another key
    core_class(facts)                # "sapphirerapids": the core these features imply

A hypervisor may report a model number that is not the real one (an Emerald Rapids guest that
says model 167, which LLVM names `rocketlake`, a client part), but it passes the feature flags
through: AMX and avx512_fp16 exist only on Sapphire Rapids-class server cores. `core_class`
reads the class from the flags; `trusted_cpu_name` keeps LLVM's name unless the flags
contradict it.

`HostFacts.from_dict(HostFacts.to_dict())` round-trips, so a machine's facts can be recorded
(`python -m minitc.target --record FILE`) and replayed in tests without that machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

CPUINFO = "/proc/cpuinfo"
SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


@dataclass(frozen=True)
class Cache:
    """One data (or unified) cache level as cpu 0 sees it."""

    level: int
    size: int  # bytes
    ways: int = 0  # associativity (0: unknown)
    line: int = 64  # bytes
    shared_cpus: int = 1  # logical cpus sharing it

    @property
    def sets(self) -> int:
        return self.size // (self.ways * self.line) if self.ways and self.line else 0


@dataclass(frozen=True)
class HostFacts:
    vendor: str  # GenuineIntel, AuthenticAMD, ...
    family: int
    model: int  # as reported: a hypervisor may change it
    model_name: str
    flags: frozenset
    caches: tuple = ()  # Cache per level, ascending
    cpus: int = 1

    def cache(self, level: int) -> Cache | None:
        return next((c for c in self.caches if c.level == level), None)

    def fingerprint(self) -> str:
        """A short hash of everything the calibration depends on."""
        data = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:12]

    def to_dict(self) -> dict:
        return {
            "vendor": self.vendor,
            "family": self.family,
            "model": self.model,
            "model_name": self.model_name,
            "flags": sorted(self.flags),
            "caches": [asdict(c) for c in self.caches],
            "cpus": self.cpus,
        }

    @classmethod
    def from_dict(cls, d: dict) -> HostFacts:
        return cls(
            vendor=d["vendor"],
            family=int(d["family"]),
            model=int(d["model"]),
            model_name=d["model_name"],
            flags=frozenset(d["flags"]),
            caches=tuple(Cache(**c) for c in d["caches"]),
            cpus=int(d["cpus"]),
        )


def parse_cpuinfo(text: str) -> dict:
    """The fields of the first processor block of /proc/cpuinfo text, and the count of blocks."""
    fields, cpus = {}, 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        if key == "processor":
            cpus += 1
        if cpus <= 1:
            fields.setdefault(key, value.strip())
    fields["cpus"] = max(cpus, 1)
    return fields


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size such as `32K`, `1024K` or `2M` (ValueError otherwise)."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        raise ValueError(f"not a cache size: {text!r}")
    return int(digits) * scale


def _cpu_count(cpu_list: str) -> int:
    """Cpus in a sysfs list such as `0-3,8-11` (1 if unreadable)."""
    n = 0
    for part in cpu_list.strip().split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            n += int(hi) - int(lo) + 1 if hi.isdigit() else 1
    return max(n, 1)


def read_caches(root: str = SYSFS_CACHE) -> tuple:
    """The data and unified caches of cpu 0 under sysfs `root`, ascending by level; entries that
    cannot be read are skipped (a container without sysfs gives none)."""
    found = {}
    for index in sorted(Path(root).glob("index*")):

        def read(name, default=""):
            try:
                return (index / name).read_text().strip()
            except OSError:
                return default

        try:
            level = int(read("level"))
            size = parse_size(read("size"))
        except ValueError:
            continue
        if read("type") == "Instruction" or size <= 0:
            continue
        ways = read("ways_of_associativity", "0")
        line = read("coherency_line_size", "64")
        found[level] = Cache(
            level=level,
            size=size,
            ways=int(ways) if ways.isdigit() else 0,
            line=int(line) if line.isdigit() and int(line) > 0 else 64,
            shared_cpus=_cpu_count(read("shared_cpu_list", "0")),
        )
    return tuple(found[level] for level in sorted(found))


def facts_from(cpuinfo_text: str, caches: tuple) -> HostFacts:
    info = parse_cpuinfo(cpuinfo_text)

    def number(key):
        try:
            return int(info.get(key, "0"), 0)
        except ValueError:
            return 0

    return HostFacts(
        vendor=info.get("vendor_id", ""),
        family=number("cpu family"),
        model=number("model"),
        model_name=info.get("model name", ""),
        flags=frozenset(info.get("flags", "").split()),
        caches=caches,
        cpus=int(info["cpus"]),
    )


@functools.lru_cache(maxsize=None)
def read_host_facts(cpuinfo: str = CPUINFO, sysfs: str = SYSFS_CACHE) -> HostFacts:
    """The host's facts (empty ones where /proc/cpuinfo is missing: not Linux)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        text = ""
    facts = facts_from(text, read_caches(sysfs))
    if not text:
        facts = HostFacts(facts.vendor, 0, 0, "", frozenset(), facts.caches, os.cpu_count() or 1)
    return facts


# -- the core a set of features implies -----------------------------------------------------------

# (LLVM cpu name, vendor, flags it needs): the first row whose flags the host has names its core.
# Only flags that hypervisors pass through (they are what guest code may use) are used.
CORE_CLASSES = (
    ("graniterapids", "GenuineIntel", {"amx_tile", "amx_fp16"}),
    ("sapphirerapids", "GenuineIntel", {"amx_tile", "avx512_fp16"}),  # and Emerald Rapids
    ("tigerlake", "GenuineIntel", {"avx512_vp2intersect"}),
    ("icelake-server", "GenuineIntel", {"avx512_vbmi2", "avx512_vnni", "pconfig"}),
    ("icelake-client", "GenuineIntel", {"avx512_vbmi2", "avx512_vnni"}),
    ("cooperlake", "GenuineIntel", {"avx512_bf16"}),
    ("cascadelake", "GenuineIntel", {"avx512_vnni"}),
    ("skylake-avx512", "GenuineIntel", {"avx512f"}),
    ("alderlake", "GenuineIntel", {"avx_vnni", "avx2"}),
    ("skylake", "GenuineIntel", {"avx2", "fma", "clflushopt"}),
    ("haswell", "GenuineIntel", {"avx2", "fma"}),
    ("znver5", "AuthenticAMD", {"avx512f", "avx512_vp2intersect"}),
    ("znver4", "AuthenticAMD", {"avx512f"}),
    ("znver3", "AuthenticAMD", {"avx2", "vaes"}),
    ("znver2", "AuthenticAMD", {"avx2", "clwb"}),
    ("znver1", "AuthenticAMD", {"avx2", "fma"}),
)

# Flags only these LLVM cpus have: a host with one of them is not a cpu outside the list,
# whatever its model number says.
DISTINCTIVE_FLAGS = {
    "amx_tile": {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"},
    "avx512_fp16": {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"},
}


def core_class(facts: HostFacts) -> str | None:
    """The LLVM cpu name of the core class the flags imply, or None (an unknown vendor, or too
    few features to tell)."""
    for name, vendor, needs in CORE_CLASSES:
        if facts.vendor == vendor and needs <= facts.flags:
            return name
    return None


def trusted_cpu_name(llvm_name: str, facts: HostFacts) -> str:
    """LLVM's name for the host, unless the host has a flag that no cpu of that name has (a
    hypervisor's model number misled LLVM): then the core class the flags imply."""
    for flag, parts in DISTINCTIVE_FLAGS.items():
        if flag in facts.flags and llvm_name not in parts:
            return core_class(facts) or llvm_name
    return llvm_name
