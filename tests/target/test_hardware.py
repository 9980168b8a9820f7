"""The hardware description from recorded machines (tests/fixtures/hosts: cpuinfo, sysfs caches,
LLVM's name and a calibration), the analytical GEMM blocking derived from it, and the
calibration cache. Nothing here depends on the host's cpu."""

from __future__ import annotations

import json
import math

import pytest
from helpers import host_record

from minitc.target import calibrate, hardware, host
from minitc.templates import gemm_blocking

_record = host_record


def _described(name: str):
    return hardware.from_record(_record(name))


# fixture -> (core, vector bits, registers, full-rate 512, preferred bits, FMA chains)
EXPECTED = {
    # the hypervisor's model 167 made LLVM say rocketlake; AMX and avx512_fp16 say otherwise
    "intel-sapphirerapids-kvm.json": ("sapphirerapids", 512, 32, True, 512, 8),
    "amd-zen4.json": ("znver4", 512, 32, False, 256, 4),  # 512-bit FMAs split: one per cycle
    "amd-zen5-kvm.json": ("znver5", 512, 32, True, 256, 8),  # full-rate, but 512-bit streams no faster
    "intel-haswell-avx2.json": ("haswell", 256, 16, False, 256, 10),  # latency 5 x 2 pipes
}


@pytest.mark.parametrize("name", EXPECTED)
def test_description_from_a_recorded_machine(name):
    hw = _described(name)
    core, bits, registers, full_rate, preferred, chains = EXPECTED[name]
    assert (hw.core, hw.vector_bits, hw.vector_registers) == (core, bits, registers)
    assert (hw.full_rate_512, hw.preferred_vector_bits, hw.fma_chains) == (full_rate, preferred, chains)
    assert hw.source == "measured"
    assert not (hw.preferred_vector_bits == 512 and not hw.full_rate_512)  # never self-contradictory
    rec = _record(name)
    assert [c.size for c in hw.caches] == [c["size"] for c in rec["caches"]]
    assert hardware.Hardware.from_dict(json.loads(json.dumps(hw.to_dict()))) == hw


def test_a_hypervisors_model_number_does_not_rename_the_core():
    rec = _record("intel-sapphirerapids-kvm.json")
    facts = host.facts_from(rec["cpuinfo"], ())
    assert (facts.vendor, facts.family, facts.model, facts.cpus) == ("GenuineIntel", 6, 167, 2)
    assert host.core_class(facts) == "sapphirerapids"
    assert host.trusted_cpu_name("rocketlake", facts) == "sapphirerapids"
    assert host.trusted_cpu_name("emeraldrapids", facts) == "emeraldrapids"  # a right name stays
    zen4 = host.facts_from(_record("amd-zen4.json")["cpuinfo"], ())
    assert host.trusted_cpu_name("znver4", zen4) == "znver4" and host.core_class(zen4) == "znver4"


# fixture -> the 128 x 3072 x 768 dense (BERT's FFN): (mr, nr, kc)
DENSE_TILES = {
    "intel-sapphirerapids-kvm.json": (8, 48, 0),  # 8 x 3 zmm; B's stream 16 B/cycle <= half of L2's 36
    "amd-zen4.json": (8, 48, 384),  # A's 8 x 768 sliver (24 KiB) exceeds half the 32 KiB L1: 2 blocks
    "amd-zen5-kvm.json": (8, 48, 0),
    # 4 x 3 ymm (12 accumulators, 16 registers); B's stream 16 B/cycle > half of L2's 28: BLIS,
    # kc from an 8-way L1: C_A = floor(7 / (1 + 24 / 4)) = 1 way, 64 x 64 / (4 x 4) = 256
    "intel-haswell-avx2.json": (4, 24, 256),
}


class _Target:
    """What pick_tiles reads of a target, for a recorded machine."""

    def __init__(self, hw, cores=2):
        self.hardware, self.num_cores = hw, cores

    def lanes(self, dtype):
        return self.hardware.vector_bits // 32

    def cache_bytes(self, level):
        return self.hardware.cache(("l1d", "l2", "l3").index(level) + 1).size


@pytest.mark.parametrize("name", DENSE_TILES)
def test_analytical_tiles_of_each_recorded_machine(name):
    from minitc.templates.gemm_blocking import pick_tiles

    hw = _described(name)
    lanes = hw.vector_bits // 32
    p = pick_tiles(128, 3072, 768, _Target(hw))
    assert (p["mr"], p["nr"], p["kc"]) == DENSE_TILES[name]
    for rows, vecs in gemm_blocking.register_tiles(hw):  # every candidate fits and hides the latency
        assert rows * vecs + vecs + 1 <= hw.vector_registers
    assert p["mr"] * (p["nr"] // lanes) >= hw.fma_chains
    # a square matmul of a size no table names: long enough rows that k is blocked
    q = pick_tiles(1000, 1000, 4000, _Target(hw))
    assert 0 < q["kc"] < 4000 and q["mr"] * q["kc"] * 4 <= hw.cache(1).size
    if gemm_blocking.b_stream_too_fast(hw, q["mr"], lanes, 4):  # BLIS: B's micro-panel in L1
        assert q["kc"] * q["nr"] * 4 <= hw.cache(1).size


def test_blis_kc_from_the_l1s_ways():
    """kc = C_A x sets x line / (mr x 4) with C_A = floor((W - 1) / (1 + nr / mr)): 48 KiB
    12-way L1 (64 sets), 6 x 64 tile: C_A = floor(11 / (1 + 64 / 6)) = 0 -> 1 way, kc = 170."""
    hw = _described("intel-sapphirerapids-kvm.json")
    assert gemm_blocking.kc_from_l1(hw, 6, 64, 4) == 170
    assert gemm_blocking.kc_from_l1(hw, 8, 16, 4) == 384  # C_A = floor(11 / 3) = 3 ways: 3 x 64 x 64 / 32


def test_calibration_cache_is_kept_per_machine(tmp_path, monkeypatch):
    """Measured once per machine; another machine's facts (here: another L2) or a corrupt or
    outdated file measure again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def fake_measure(cpu, features, facts):
        calls.append(facts.fingerprint())
        return {"version": calibrate.VERSION, "ghz": 1.0 + len(calls)}

    monkeypatch.setattr(calibrate, "measure", fake_measure)
    rec = _record("amd-zen5-kvm.json")
    caches = tuple(host.Cache(**c) for c in rec["caches"])
    facts = host.facts_from(rec["cpuinfo"], caches)
    calibrate.calibration.cache_clear()
    try:
        first = calibrate.calibration("znver5", "+avx2", facts)
        calibrate.calibration.cache_clear()  # a new process
        assert calibrate.calibration("znver5", "+avx2", facts) == first and len(calls) == 1
        bigger_l2 = host.facts_from(rec["cpuinfo"], (caches[0], host.Cache(2, 2 << 20, 16), caches[2]))
        assert bigger_l2.fingerprint() != facts.fingerprint()
        assert calibrate.calibration("znver5", "+avx2", bigger_l2)["ghz"] == 3.0 and len(calls) == 2
        (path,) = [p for p in (tmp_path / "minitc" / "hardware").iterdir() if facts.fingerprint() in p.name]
        path.write_text("{not json")
        calibrate.calibration.cache_clear()
        assert calibrate.calibration("znver5", "+avx2", facts)["ghz"] == 4.0 and len(calls) == 3
        stored = json.loads(path.read_text())
        stored["version"] = calibrate.VERSION - 1
        path.write_text(json.dumps(stored))
        calibrate.calibration.cache_clear()
        calibrate.calibration("znver5", "+avx2", facts)
        assert len(calls) == 4
        monkeypatch.setenv("MINITC_CALIBRATION", "off")
        calibrate.calibration.cache_clear()
        assert calibrate.calibration("znver5", "+avx2", facts) is None and len(calls) == 4
    finally:
        calibrate.calibration.cache_clear()


def test_calibration_measures_this_host():
    """The real calibration (cached per machine): rates in the ranges any x86 core has."""
    from minitc.target import parse_target

    t = parse_target("llvm")
    cal = calibrate.calibration(t.cpu, t.features, host.read_host_facts())
    assert 0.5 < cal["ghz"] < 7
    for rate in cal["fma"].values():
        assert 2 <= rate["latency"] <= 8 and 0.3 <= rate["per_cycle"] <= 4.5
    assert cal["read_bytes_per_cycle"]["l1d"] >= cal["read_bytes_per_cycle"].get("l2", 0) > 0
    assert cal["memory_gbps"] > 0.5
    latency = cal["load_latency_cycles"]
    assert 2 <= latency["l1d"] <= 8 and latency["l1d"] < latency.get("l2", 99)  # every x86 L1 answers in 3-6


def test_the_pointer_chain_visits_every_line_once():
    words, start = calibrate.pointer_chain(64 << 10, seed=3)
    base, lines, seen, address = words.ctypes.data, words.size // 8, set(), start
    for _ in range(lines):
        assert address % 64 == 0 and address not in seen
        seen.add(address)
        address = int(words[(address - base) // 8])
    assert address == start and len(seen) == lines == 1024


def test_the_prefetch_distance_follows_the_measured_l2_latency():
    """A recorded host without the latency (measured before it was) takes the constant; one
    whose L2 answers twice as late prefetches twice as far ahead."""
    from dataclasses import replace

    from minitc.templates import gemm_prefetch

    hw = _described("intel-sapphirerapids-kvm.json")
    assert hw.l2_latency_cycles == 0 and gemm_prefetch.l2_latency(hw) == gemm_prefetch.L2_LATENCY_CYCLES
    late = 2.0 * gemm_prefetch.L2_LATENCY_CYCLES  # cycles; a k step of 6 x 4 FMAs takes 24 / F
    slow = replace(hw, load_latency_cycles={"l1d": 5.0, "l2": late})
    ahead = gemm_prefetch.distance(slow, 6, 4)
    assert ahead == math.ceil(late * hw.fma_per_cycle / 24) > gemm_prefetch.distance(hw, 6, 4)
    assert hardware.Hardware.from_dict(slow.to_dict()) == slow


@pytest.fixture
def simulate_host(monkeypatch):
    """`simulate_host(fixture)`: this process takes the recorded machine for its host (its
    cpuinfo, caches, LLVM's name for it and its calibration), as target/cpu.py reads a host."""
    from minitc.target import cpu

    def simulate(name: str) -> dict:
        rec = _record(name)
        facts = host.facts_from(rec["cpuinfo"], tuple(host.Cache(**c) for c in rec["caches"]))
        triple = cpu._host()["triple"]
        fake = {"cpu": host.trusted_cpu_name(rec["llvm_cpu"], facts), "features": "", "triple": triple, "cores": 2}
        monkeypatch.setattr(cpu, "_host", lambda: fake)
        monkeypatch.setattr(cpu, "host_facts", lambda: facts)
        monkeypatch.setattr(calibrate, "calibration", lambda name, features, facts: rec["calibration"])
        return rec

    return simulate


@pytest.mark.parametrize("name", EXPECTED)
def test_each_recorded_machine_as_the_host(name, simulate_host):
    """The host target of a recorded machine: its trusted core, its measured description (the
    same one tests pin with hardware.from_record), and the tiles the GEMM template derives from
    it; a named cpu of the table that is not this host keeps the table's description."""
    from helpers import table_target

    from minitc.target import parse_target

    simulate_host(name)
    t = parse_target("llvm -num-cores=2")
    core, bits, registers, full_rate, preferred, _ = EXPECTED[name]
    assert t.is_host and t.cpu == core and t.string == f"llvm -mcpu={core} -num-cores=2"
    assert t.hardware == _described(name) and t.describe()["source"] == "measured"
    assert (t.vector_bits, t.vector_registers, t.full_rate_512, t.preferred_vector_bits) == (
        bits,
        registers,
        full_rate,
        preferred,
    )
    tiles = gemm_blocking.pick_tiles(128, 3072, 768, t)
    assert (tiles["mr"], tiles["nr"], tiles["kc"]) == DENSE_TILES[name]
    other = "haswell" if core != "haswell" else "znver4"
    assert not parse_target(f"llvm -mcpu={other}").is_host
    assert parse_target(f"llvm -mcpu={other}").hardware == table_target(other).hardware
