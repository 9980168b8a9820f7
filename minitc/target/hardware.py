"""The hardware description templates derive their choices from: measured on the host, taken
from the table of cpu names (cpus.py) only for a target that is not the host.

    hw = parse_target("llvm").hardware
    hw.source                  # "measured" (host: facts + calibration) or "table"
    hw.fma_latency, hw.fma_per_cycle, hw.fma_chains   # of the widest vectors; chains = latency x rate
    hw.full_rate_512           # 512-bit FMAs at the 256-bit instruction rate
    hw.preferred_vector_bits   # the width memory-bound kernels use: the faster stream
    hw.cache(2)                # Cache(size, ways, line, shared_cpus)
    hw.read_bytes_per_cycle    # {"l1d", "l2", "l3"}: what one core reads per cycle from each
    hw.l2_latency_cycles       # load-to-use latency of the L2 (0: not measured, a table target)
    hw.to_dict()               # for `python -m minitc.target`, records and reports

Every derived fact comes from one measurement, so the description cannot contradict itself:
full-rate 512-bit FMAs and the preferred width are both read from the calibration.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from minitc.target import cpus
from minitc.target.host import Cache, HostFacts

WIDER_STREAM = 1.15  # 512-bit vectors pay for memory-bound code from this stream speed-up on
FULL_RATE = 0.75  # 512-bit FMAs per cycle over 256-bit ones from which the wide unit is full-rate


@dataclass(frozen=True)
class Hardware:
    core: str  # the LLVM cpu name of the core
    source: str  # "measured" or "table"
    vector_bits: int
    vector_registers: int
    fma_latency: float  # cycles, widest vectors
    fma_per_cycle: float  # widest-vector FMAs issued per cycle
    full_rate_512: bool
    preferred_vector_bits: int
    loads_per_cycle: float  # widest vectors from L1
    broadcasts_per_cycle: float
    caches: tuple  # Cache per level
    read_bytes_per_cycle: dict  # {"l1d", "l2", "l3"}
    memory_gbps: float  # one core
    ghz: float
    load_latency_cycles: dict = field(default_factory=dict)  # {"l1d", "l2", "l3"}; {} where not measured

    @property
    def l2_latency_cycles(self) -> float:
        return self.load_latency_cycles.get("l2", 0.0)

    @property
    def fma_chains(self) -> int:
        """Independent accumulators that keep every FMA pipe busy: latency x issue rate."""
        return max(1, math.ceil(self.fma_latency * self.fma_per_cycle - 0.25))

    def cache(self, level: int) -> Cache | None:
        return next((c for c in self.caches if c.level == level), None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["caches"] = [asdict(c) for c in self.caches]
        d["fma_chains"] = self.fma_chains
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Hardware:
        d = {k: v for k, v in d.items() if k != "fma_chains"}
        return cls(**{**d, "caches": tuple(Cache(**c) for c in d["caches"])})


def from_calibration(core: str, facts: HostFacts, calibration: dict, vector_bits: int, registers: int) -> Hardware:
    """The description of a host from its facts and its calibration (calibrate.py)."""
    wide, narrow = str(vector_bits), str(min(vector_bits, 256))
    fma = calibration["fma"]
    full_rate = vector_bits == 512 and fma[wide]["per_cycle"] >= FULL_RATE * fma[narrow]["per_cycle"]
    stream = calibration.get("stream_bytes_per_cycle", {})
    faster = stream.get(wide, 0) >= WIDER_STREAM * stream.get(narrow, 1)
    table = cpus.known_caches(core)
    caches = list(facts.caches) or [Cache(i + 1, table[k]) for i, k in enumerate(cpus.LEVELS) if table[k]]
    return Hardware(
        core=core,
        source="measured",
        vector_bits=vector_bits,
        vector_registers=registers,
        fma_latency=fma[wide]["latency"],
        fma_per_cycle=fma[wide]["per_cycle"],
        full_rate_512=full_rate,
        preferred_vector_bits=vector_bits if (vector_bits != 512 or (full_rate and faster)) else 256,
        loads_per_cycle=calibration["loads_per_cycle"][wide],
        broadcasts_per_cycle=calibration["broadcasts_per_cycle"][wide],
        caches=tuple(caches),
        read_bytes_per_cycle=dict(calibration["read_bytes_per_cycle"]),
        memory_gbps=calibration["memory_gbps"],
        ghz=calibration["ghz"],
        load_latency_cycles=dict(calibration.get("load_latency_cycles", {})),
    )


def from_table(core: str, vector_bits: int, registers: int) -> Hardware:
    """The description of a named cpu that is not the host (cross-compiling): cpus.py's table."""
    full_rate = vector_bits == 512 and cpus.full_rate_512(core)
    split = vector_bits == 512 and not full_rate
    sizes = cpus.known_caches(core)
    ways = cpus.CACHE_WAYS.get(core, cpus.DEFAULT_WAYS)
    caches = tuple(Cache(i + 1, sizes[k], ways[i]) for i, k in enumerate(cpus.LEVELS) if sizes[k])
    loads = cpus.LOADS_PER_CYCLE
    return Hardware(
        core=core,
        source="table",
        vector_bits=vector_bits,
        vector_registers=registers,
        fma_latency=cpus.FMA_LATENCY.get(core, cpus.DEFAULT_FMA_LATENCY),
        fma_per_cycle=1.0 if split else 2.0,
        full_rate_512=full_rate,
        preferred_vector_bits=vector_bits if vector_bits != 512 or full_rate else 256,
        loads_per_cycle=1.0 if split else loads,
        broadcasts_per_cycle=loads,
        caches=caches,
        read_bytes_per_cycle={
            "l1d": loads * vector_bits / 8 / (2 if split else 1),
            "l2": cpus.L2_BYTES_PER_CYCLE.get(core, cpus.DEFAULT_L2_BYTES_PER_CYCLE),
        },
        memory_gbps=cpus.DEFAULT_MEMORY_GBPS,
        ghz=cpus.DEFAULT_GHZ,
    )


def from_record(record: dict) -> Hardware:
    """The description of a recorded machine (`python -m minitc.target --record`: its cpuinfo,
    sysfs caches, LLVM's name for it and its calibration), as the host would describe itself."""
    from minitc.target.host import facts_from, trusted_cpu_name

    caches = tuple(Cache(**c) for c in record["caches"])
    facts = facts_from(record["cpuinfo"], caches)
    wide = "avx512f" in facts.flags
    core = trusted_cpu_name(record["llvm_cpu"], facts)
    return from_calibration(core, facts, record["calibration"], 512 if wide else 256, 32 if wide else 16)
