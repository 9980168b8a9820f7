"""Templates and code for several x86 CPUs, whatever the host: LLVM renders and compiles for any
`-mcpu`, so every target's loop nest and assembly are checked here; kernels run only on the
targets this host can execute (an AVX-512 host runs AVX2 code too). Then the target
description (vector facts, registers, caches) and the template choices derived from it, for
several cpus, without running anything."""

import re

import numpy as np
import pytest
from helpers import table_target

import minitc as tc
from minitc.backends.llvm import jit
from minitc.backends.llvm.codegen import render
from minitc.errors import BuildError
from minitc.schedule.recorder import Schedule
from minitc.target import cpus, host, parse_target, simd_width
from minitc.templates import DEFAULTS, conv, gemm_blocking, load_templates, template_schedule
from minitc.templates.elementwise import default_vector

load_templates()

CPUS = ["haswell", "znver2", "znver3", "skylake-avx512", "znver4", "sapphirerapids"]


def _workloads():
    """name -> (output tensor, numpy reference of the inputs)."""
    ref = tc.ops.reference
    A, B = tc.placeholder((96, 80), name="A"), tc.placeholder((80, 112), name="B")
    W = tc.placeholder((112, 80), name="W")
    X, K = tc.placeholder((1, 16, 14, 14), name="X"), tc.placeholder((32, 16, 3, 3), name="K")
    S = tc.placeholder((48, 128), name="S")
    return {
        "matmul": (tc.ops.matmul(A, B), ref.matmul),
        "dense": (tc.ops.dense(A, W, activation="relu"), lambda a, w: ref.dense(a, w, activation="relu")),
        "conv2d": (tc.ops.conv2d(X, K, padding=1), lambda x, k: ref.conv2d(x, k, padding=1)),
        "softmax": (tc.ops.softmax(S), ref.softmax),
        "relu": (tc.ops.relu(S), ref.relu),
        "sum": (tc.ops.sum(S, axis=-1), lambda s: ref.sum(s, axis=-1)),
    }


def _assembly(kernel, target):
    name = "k"
    module, machine = jit.optimized_module(render(kernel, target, name=name), name, target)
    return machine.emit_assembly(module)


@pytest.mark.parametrize("cpu", CPUS)
def test_templates_follow_the_target(cpu):
    """Vector loops are whole vectors of the target: of its full width for GEMM, of its preferred
    width for memory-bound kernels (256 bits where 512-bit ops are split), at most one for conv2d;
    the assembly uses the target's registers: zmm for AVX-512, ymm and never zmm for AVX2."""
    target = table_target(cpu)
    lanes = simd_width(target, "float32")
    assert lanes == (16 if cpu in ("skylake-avx512", "znver4", "sapphirerapids") else 8)
    for name, (out, _) in _workloads().items():
        kernel = tc.lower(template_schedule(out, target))
        widths = [int(w) for w in re.findall(r"vectorized\((\d+)\)", str(kernel))]
        whole = lanes if name in ("matmul", "dense") else target.preferred_lanes("float32")
        if name == "conv2d":
            assert widths and all(w <= lanes for w in widths), (name, cpu, widths)
        else:
            assert widths and all(w % whole == 0 for w in widths), (name, cpu, widths)
        asm = _assembly(kernel, target)
        if lanes == 16:
            assert "%zmm" in asm, (name, cpu)
        if lanes == 8:
            assert "%zmm" not in asm and "%ymm" in asm, (name, cpu)


@pytest.mark.parametrize("cpu", CPUS + ["x86-64-v3"])
def test_the_jit_generates_the_targets_code_not_the_hosts(cpu):
    """The JIT's machine is the host's: only the kernel's function attributes make it generate
    the target's code. A target without -mattr must still name its (no extra) features, else
    the host's feature list applies and an AVX-512 host runs zmm code for an AVX2 target."""
    target = parse_target(f"llvm -mcpu={cpu} -num-cores=2")
    kernel = tc.lower(template_schedule(_workloads()["softmax"][0], target))
    module, machine = jit.optimized_module(render(kernel, target, name="k"), "k", target)
    host_machine = jit._target_machine(parse_target("llvm"))
    host, own = _instructions(host_machine.emit_assembly(module)), _instructions(machine.emit_assembly(module))
    assert host == own, sorted(host ^ own)


def _instructions(asm: str) -> set:
    """The vector instruction kinds of an assembly listing: each mnemonic with the register
    classes (zmm, ymm, xmm, mask, general) of its operands, for the instructions that touch a
    vector or mask register. Which ISA the code uses shows there, not which registers, offsets,
    unroll counts or scalar moves the host's and the target's tuning happened to pick."""
    kinds = set()
    for line in asm.splitlines():
        line = line.strip()
        if not line or line.startswith((".", "#")) or line.endswith(":"):
            continue
        mnemonic, _, operands = line.partition("\t")
        classes = sorted(
            set(re.findall(r"%([xyz]mm|k)\d+", operands)) | ({"gpr"} if re.search(r"%[re]", operands) else set())
        )
        if set(classes) - {"gpr"}:
            kinds.add((mnemonic, tuple(classes)))
    return kinds


@pytest.mark.parametrize("cpu", CPUS)
def test_kernels_run_where_the_host_can(cpu):
    target = parse_target(f"llvm -mcpu={cpu} -num-cores=2")
    if not target.is_host_compatible:
        pytest.skip(f"this host cannot run {cpu} code")
    rng = np.random.default_rng(0)
    for name, (out, reference) in _workloads().items():
        f = tc.build(template_schedule(out, target), target=target.string)
        inputs = [rng.standard_normal(b.shape).astype("float32") for b in f.kernel.inputs]
        np.testing.assert_allclose(f(*inputs), reference(*inputs), rtol=2e-4, atol=2e-4, err_msg=name)


# -- the target description and the choices templates derive from it (nothing runs) ------------

# cpu -> (vector bits, vector registers, full-rate 512-bit ops, preferred vector bits)
DESCRIPTIONS = {
    "nehalem": (128, 16, False, 128),
    "haswell": (256, 16, False, 256),
    "znver2": (256, 16, False, 256),
    "x86-64-v3": (256, 16, False, 256),
    "skylake-avx512": (512, 32, True, 512),
    "sapphirerapids": (512, 32, True, 512),
    "icelake-client": (512, 32, False, 256),
    "znver4": (512, 32, False, 256),
    "znver5": (512, 32, False, 256),
    "x86-64-v4": (512, 32, False, 256),
}


def _target(cpu: str, extra: str = ""):
    return table_target(cpu, extra)


@pytest.mark.parametrize("cpu", DESCRIPTIONS)
def test_target_description(cpu):
    t = _target(cpu)
    bits, registers, full_rate, preferred = DESCRIPTIONS[cpu]
    assert (t.vector_bits, t.vector_registers, t.full_rate_512, t.preferred_vector_bits) == (
        bits,
        registers,
        full_rate,
        preferred,
    )
    assert t.lanes("float32") == bits // 32 and t.lanes("float64") == bits // 64
    assert t.preferred_lanes("float32") == preferred // 32
    d = t.describe()
    assert (d["vector_bits"], d["vector_registers"], d["preferred_vector_bits"]) == (bits, registers, preferred)
    assert d["num_cores"] == 2 and set(d["caches"]) == {"l1d", "l2", "l3"}
    assert d["caches"] == cpus.known_caches(cpu)


@pytest.mark.skipif(parse_target("llvm").vector_bits != 512, reason="the host has no AVX-512")
def test_the_host_512_bit_rate_is_measured():
    """Two FMA pipes of 512 bits issue about as many 512-bit FMAs per cycle as 256-bit ones,
    split ones about half; nothing in between. The description follows the measurement."""
    host_target = parse_target("llvm")
    fma = host_target.hardware
    assert host_target.hardware.source == "measured"
    from minitc.target.calibrate import calibration

    measured = calibration(host_target.cpu, host_target.features, host.read_host_facts())["fma"]
    ratio = measured["512"]["per_cycle"] / measured["256"]["per_cycle"]
    assert 0.35 < ratio < 0.65 or 0.85 < ratio < 1.15, ratio
    assert fma.full_rate_512 == (ratio > 0.75)
    assert host_target.preferred_vector_bits in ((512, 256) if fma.full_rate_512 else (256,))


def test_disabled_avx512_describes_an_avx2_machine():
    t = _target("znver4", " -mattr=-avx512f")
    assert (t.vector_bits, t.vector_registers, t.full_rate_512, t.preferred_vector_bits) == (256, 16, False, 256)


def test_row_streams_by_the_cpu_that_runs_the_code():
    """Four rows side by side on Zen 5 (measured faster there), one elsewhere (measured faster
    on Zen 4); a generic ISA level runs on the host, so it takes the host's."""
    assert (_target("znver5").row_streams, _target("znver4").row_streams, _target("haswell").row_streams) == (4, 1, 1)
    assert _target("x86-64-v3").row_streams == cpus.row_streams(parse_target("llvm").cpu)
    assert _target("znver5").describe()["row_streams"] == 4


def test_cache_table_and_defaults():
    assert cpus.known_caches("znver4") == {"l1d": 32 * 1024, "l2": 1024 * 1024, "l3": 32 * 1024 * 1024}
    assert cpus.known_caches("haswell")["l2"] == 256 * 1024
    assert cpus.known_caches("sapphirerapids")["l1d"] == 48 * 1024
    assert cpus.known_caches("x86-64-v3") == cpus.DEFAULT_CACHES  # a generic cpu: the defaults
    with pytest.raises(BuildError, match="unknown cache level 'l4'"):
        _target("znver2").cache_bytes("l4")


def test_host_caches_from_sysfs(tmp_path):
    """A sysfs cache tree: data and unified caches count, instruction caches and unreadable
    entries do not; ways, line size and sharing are read where present."""
    for index, (level, kind, size) in enumerate(
        [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "32M")]
    ):
        d = tmp_path / f"index{index}"
        d.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size + "\n")):
            (d / name).write_text(value)
    (tmp_path / "index0" / "ways_of_associativity").write_text("12\n")
    (tmp_path / "index3" / "shared_cpu_list").write_text("0-3,8-11\n")
    (tmp_path / "index4").mkdir()  # no files: skipped
    caches = host.read_caches(str(tmp_path))
    assert [(c.level, c.size) for c in caches] == [(1, 48 * 1024), (2, 2048 * 1024), (3, 32 * 1024 * 1024)]
    assert (caches[0].ways, caches[0].sets, caches[1].ways, caches[2].shared_cpus) == (12, 64, 0, 8)
    assert host.read_caches(str(tmp_path / "missing")) == ()
    assert host.parse_size("512") == 512
    with pytest.raises(ValueError):
        host.parse_size("lots")


def test_host_target_uses_the_host_caches():
    t = parse_target("llvm")
    assert t.is_host
    for cache in host.read_host_facts().caches:
        assert t.cache_bytes(("l1d", "l2", "l3")[cache.level - 1]) == cache.size
    assert t.cache_bytes("l1d") > 0 and t.cache_bytes("l2") > 0


@pytest.mark.parametrize(
    "cpu, mr, nr",
    [("haswell", 6, 16), ("znver2", 6, 16), ("skylake-avx512", 6, 64), ("znver4", 6, 64), ("sapphirerapids", 6, 64)],
)
def test_gemm_tiles_follow_registers_lanes_and_l2(cpu, mr, nr):
    """512^3 matmul: the 6 x 4-vector tile needs 29 registers, so only AVX-512 gets it (24
    accumulators, 512 columns divide); AVX2 takes 6 x 2 vectors (12 accumulators, BLIS's
    Haswell tile). Without k blocks the packed panel takes at most a quarter of the L2, as wide
    as that allows while every core still gets two panels."""
    t = _target(cpu)
    p = gemm_blocking.pick_tiles(512, 512, 512, t)
    assert (p["mr"], p["nr"]) == (mr, nr)
    for rows, vecs in gemm_blocking.register_tiles(t.hardware):
        assert rows * vecs + vecs + 1 <= t.vector_registers
    assert ((6, 4) in gemm_blocking.register_tiles(t.hardware)) == (t.vector_registers == 32)
    if not p["kc"]:
        share = t.cache_bytes("l2") // 4
        assert 512 * p["nc"] * 4 <= share
        assert 512 * 2 * p["nc"] * 4 > share or 512 // (2 * p["nc"]) < 2 * t.num_cores


@pytest.mark.parametrize("cpu, mr, nr", [("znver2", 4, 24), ("znver4", 8, 48), ("sapphirerapids", 8, 48)])
def test_gemm_tiles_that_tie_take_the_most_accumulators(cpu, mr, nr):
    """BERT's dense product, 128 x 3072 x 768: 4 x 3 and 8 x 3 vectors both divide it; a
    32-register target takes 8 x 3 (24 accumulators, 11 loads per 24 FMAs)."""
    p = gemm_blocking.pick_tiles(128, 3072, 768, _target(cpu))
    assert (p["mr"], p["nr"]) == (mr, nr)


def _conv_defaults(target, shape=(1, 64, 56, 56), weights=(64, 64, 3, 3)):
    X, W = tc.placeholder(shape, name="X"), tc.placeholder(weights, name="W")
    s = Schedule(tc.ops.conv2d(X, W, padding=1))
    return DEFAULTS["conv2d"](s, s.state.outputs[0], target)


@pytest.mark.parametrize(
    "cpu, lanes",
    [("znver2", 8), ("haswell", 8), ("skylake-avx512", 14), ("sapphirerapids", 14), ("znver4", 8)],
)
def test_conv_lanes_and_accumulators_follow_the_target(cpu, lanes):
    """ResNet's 56-wide rows: 8-lane vectors on AVX2 and where 512-bit ops are split (7 whole
    ymm vectors), 14 lanes of a zmm where they are full-rate (4 vectors at 7/8 of the lanes);
    the accumulators fill the register file but four."""
    t = _target(cpu)
    p = _conv_defaults(t)
    assert p["lanes"] == lanes
    accumulators = p["kb"] * p["ohb"] * p["owv"]
    assert t.hardware.fma_chains <= accumulators <= conv.acc_registers(t) == t.vector_registers - 4
    # the input rows of one output tile (its columns and the halo) and the weights of one
    # reduction block stay within half the L1d, and twice the block would not
    in_rows, in_cols = (p["ohb"] - 1) + 3, p["owv"] * p["lanes"] + 2
    per_channel = 4 * (in_rows * in_cols + p["kb"] * 9)
    assert p["rcb"] * per_channel <= t.cache_bytes("l1d") // 2
    assert p["rcb"] == 64 or 2 * p["rcb"] * per_channel > t.cache_bytes("l1d") // 2


def test_conv_rows_that_divide_a_zmm_use_it():
    """112-wide rows divide into 16-lane vectors: every AVX-512 target uses them."""
    for cpu in ("skylake-avx512", "znver4"):
        assert _conv_defaults(_target(cpu), (1, 64, 112, 112))["lanes"] == 16


@pytest.mark.parametrize(
    "cpu, vector", [("nehalem", 16), ("znver2", 32), ("znver4", 32), ("skylake-avx512", 64), ("sapphirerapids", 64)]
)
def test_memory_bound_vectors_use_the_preferred_width(cpu, vector):
    """Four registers of the preferred width: Zen 4 splits 512-bit ops, so it gets AVX2's 32
    float32 lanes; the loop nest of an elementwise op shows them."""
    t = _target(cpu)
    assert default_vector(t, "float32") == vector
    assert default_vector(t, "float64") == vector // 2
    text = str(tc.lower(template_schedule(tc.ops.relu(tc.placeholder((64, 256), name="X")), t)))
    assert f"vectorized({vector})" in text
