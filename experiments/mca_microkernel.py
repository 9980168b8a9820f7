"""The GEMM templates' micro-kernels on CPUs we cannot run on, read by llvm-mca (issue 41).

    python experiments/mca_microkernel.py [--json F] [--iterations 100] [--only LABELS]
    python experiments/mca_microkernel.py --only intel-server --models resnet50,bert-base

For each hardware description (a recorded host of tests/fixtures/hosts, a table cpu, this host)
the templates pick their tiles as they would on that machine (the description is given to the
target, nothing runs); each GEMM of the cpu-core suite (matmul 1024^3, the BERT FFN dense
128x768->3072 with packed weights + bias + GELU as the model compiler fuses it, the BERT batch
matmul, ResNet's 3x3 convolutions on NCHW data; with --models every task of those models as
tc.compile builds them for that description) is compiled to assembly for the description's
-mcpu, the innermost loop holding the
FMAs (the micro-kernel) is cut out and given to every llvm-mca on the PATH that knows a model
for the -mcpu. Each row: register tile, FMAs per iteration, llvm-mca's cycles per iteration, the
FMA-bound cycles (FMAs over the FMA rate llvm-mca's model itself gives, probed on a block of
independent FMAs), the predicted fraction of FMA peak and the bottleneck resource.

llvm-mca's scheduling models are not the machines: LLVM 14 models sapphirerapids with the
Skylake-server model (two 512-bit FMA ports, two loads), LLVM 19 with a Golden Cove model of one
512-bit FMA port (the client core's), and znver5 with the Zen 4 model (512-bit FMAs double-pumped);
`model_fma_per_cycle` against the description's `fma_per_cycle` shows where they differ.
It sees no cache, memory, frequency or hypervisor: the loop runs from L1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
from pathlib import Path

import minitc as tc
from minitc.backends import lower_schedule
from minitc.backends.llvm import jit
from minitc.backends.llvm.codegen import render
from minitc.target import hardware, parse_target
from minitc.target.cpu import parse_cpu_target
from minitc.templates import DEFAULTS, template_schedule, template_tag

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hosts"
RESULTS = ROOT / "experiments" / "results"

# (label, fixture or None, -mcpu to compile for or None for the host / the fixture's core,
#  -mcpu names for llvm-mca: the same core, and a model that counts Intel's two 512-bit FMA pipes)
DESCRIPTIONS = (
    ("intel-server", "intel-sapphirerapids-kvm.json", None, ("sapphirerapids", "skylake-avx512")),
    ("zen4", "amd-zen4.json", None, ("znver4",)),
    ("haswell", "intel-haswell-avx2.json", None, ("haswell",)),
    ("x86-64-v3", None, "x86-64-v3", ("x86-64-v3",)),  # the table's AVX2 target
    ("host", None, None, (None,)),
)
WORKLOADS = ("matmul-1024", "dense-bert-ffn-gelu", "bmm-bert", "conv-resnet", "conv-resnet-7x7")
FMA = re.compile(r"^\s*(vfn?m(add|sub)\d{3}p[sd])\s+(.*)$")


# -- the description as a target ---------------------------------------------------------------


def described_target(fixture: str | None, mcpu: str | None, cores: int = 2):
    """An LLVM target for `mcpu` (the fixture's core, else the host) whose hardware description
    is the recorded machine's, so the templates choose as they would there."""
    if fixture is None:
        return parse_cpu_target(f"llvm -mcpu={mcpu} -num-cores={cores}" if mcpu else f"llvm -num-cores={cores}")
    hw = hardware.from_record(json.loads((FIXTURES / fixture).read_text()))
    target = parse_cpu_target(f"llvm -mcpu={mcpu or hw.core} -num-cores={cores}")
    target.__dict__["hardware"] = hw  # LLVMTarget.hardware is a cached_property: set its cache
    return target


def workload(name: str, lanes: int):
    """The output tensor of one GEMM, as the cpu-core suite (or, for the FFN, the model
    compiler: weights packed in blocks of a vector, pack_dense_weights) builds it, or of a
    direct convolution on NCHW data (rows of 56 and 7 columns: vectors of 14 and 7 lanes)."""
    ph = tc.placeholder
    if name == "matmul-1024":
        return tc.ops.matmul(ph((1024, 1024), name="A"), ph((1024, 1024), name="B"))
    if name == "bmm-bert":
        return tc.ops.batch_matmul(ph((12, 128, 64), name="A"), ph((12, 64, 128), name="B"))
    if name == "dense-bert-ffn-gelu":
        X, W, b = ph((128, 768), name="X"), ph((3072 // lanes, 768, lanes), name="W"), ph((3072,), name="b")
        return tc.ops.dense(X, W, b, activation="gelu", weight_block=lanes)
    if name.startswith("conv-resnet"):  # ResNet's 3x3 convolutions of the first and the last stage
        c, hw = (512, 7) if name.endswith("7x7") else (64, 56)
        return tc.ops.conv2d(ph((1, c, hw, hw), name="X"), ph((c, c, 3, 3), name="W"), padding=1)
    raise ValueError(f"unknown workload {name!r}; one of {', '.join(WORKLOADS)}")


def model_workloads(name: str, target) -> list:
    """[(task, output tensor)] of a models-suite model as tc.compile would compile it for `target`
    (its graph passes and layout choices), without running anything."""
    import warnings

    from minitc.benchmarks.models_zoo import select
    from minitc.frontend.compiler import model_tasks

    model, inputs = select([name])[0].make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.export's
        return [(str(task), task.outputs) for task in model_tasks(model, inputs, target)]


def template_params(out, target) -> dict:
    """The template's default parameters for `out` on `target` (what template_schedule applies)."""
    s = tc.Schedule(out)
    stage = s.state.outputs[0]
    tag = template_tag(s, stage)
    return {"template": tag, **DEFAULTS[tag](s, stage, target)}


def assembly(out, target, **params) -> str:
    """The O3 assembly of the template's program for `target` (its defaults updated by
    `params`), without loading or running it."""
    kernel = lower_schedule(template_schedule(out, target, **params), target)
    ir = render(kernel, target, name="kernel")
    with jit._LOCK:
        mod, tm = jit.optimized_module(ir, "kernel", target)
        return tm.emit_assembly(mod)


# -- the micro-kernel in the assembly ----------------------------------------------------------


def _instructions(lines) -> list:
    """Instruction lines only: no labels, directives or comments (llvm-mca 14 reads what a
    newer LLVM writes once these are gone)."""
    out = []
    for line in lines:
        text = line.split("#")[0].strip()
        if text and not text.startswith(".") and not text.endswith(":"):
            out.append(text)
    return out


def fma_loops(asm: str) -> list:
    """Innermost loops (a label to the branch back to it, holding no other loop) with FMAs,
    as lists of instruction lines, most FMAs first."""
    lines = asm.splitlines()
    labels = {m.group(1): n for n, line in enumerate(lines) if (m := re.match(r"^(\.?L\w+):", line))}
    spans = []
    for n, line in enumerate(lines):
        m = re.match(r"^\s*j\w+\s+(\.?L\w+)\s*$", line)
        if m and m.group(1) in labels and labels[m.group(1)] < n:
            spans.append((labels[m.group(1)], n))
    inner = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    loops = [_instructions(lines[a : b + 1]) for a, b in inner]
    loops = [body for body in loops if any(FMA.match(i) for i in body)]
    return sorted(loops, key=lambda body: (-len(accumulators(body)), -sum(bool(FMA.match(i)) for i in body)))


def accumulators(body: list) -> set:
    """Registers only FMAs write in the loop: the tile of C carried from one iteration to the
    next (an epilogue's polynomial, erf's in GELU, writes its FMA registers anew each time)."""
    written = {}
    for instr in body:
        regs = re.findall(r"%([xyz]mm\d+)", instr)
        if regs and "(%rsp)" not in instr:  # a spilled accumulator's reload still counts as one
            written.setdefault(regs[-1], set()).add(bool(FMA.match(instr)))
    return {r for r, kinds in written.items() if kinds == {True}}


def loop_counts(body: list) -> dict:
    """What the loop does per iteration: FMAs, their width, accumulators, loads, broadcasts,
    FMAs with a memory operand, and stack traffic (spills)."""
    fmas = [FMA.match(i) for i in body if FMA.match(i)]
    regs = [re.findall(r"%([xyz]mm\d+)", m.group(3)) for m in fmas]
    width = {"x": 128, "y": 256, "z": 512}[regs[0][-1][0]] if regs else 0
    vec_load = re.compile(r"^v(movups|movaps|movdqu\w*|movdqa\w*)\s+[^%]*\(.*\),\s*%[xyz]mm")
    return {
        "fmas": len(fmas),
        "vector_bits": width,
        "accumulators": len(accumulators(body)),
        "loads": sum(bool(vec_load.match(i)) for i in body),
        "broadcasts": sum(i.startswith(("vbroadcastss", "vbroadcastsd")) for i in body),
        "fma_memory_operands": sum("(" in m.group(3) for m in fmas),
        "stack_accesses": sum("(%rsp)" in i or "(%rbp)" in i for i in body),
        "instructions": len(body),
    }


# -- llvm-mca ----------------------------------------------------------------------------------


def mca_tools() -> dict:
    """{LLVM major version: path} of the llvm-mca binaries on the PATH."""
    found = {}
    names = ["llvm-mca"] + [f"llvm-mca-{v}" for v in range(30, 9, -1)]
    for path in filter(None, map(shutil.which, names)):
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"LLVM version (\d+)", out)
        if m:
            found.setdefault(int(m.group(1)), path)
    return found


def run_mca(tool: str, mcpu: str, body: list, iterations: int = 100) -> dict:
    """llvm-mca's summary, resource pressure and the resources each instruction uses."""
    args = [tool, "-mtriple=x86_64-unknown-linux-gnu", f"-mcpu={mcpu}", f"-iterations={iterations}"]
    r = subprocess.run(args + ["-resource-pressure", "-instruction-info=false"], input="\n".join(body) + "\n",
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    if r.returncode != 0 or "Total Cycles" not in r.stdout:
        raise RuntimeError(f"{tool} -mcpu={mcpu}: {(r.stderr or r.stdout).strip().splitlines()[:2]}")
    text = r.stdout

    def number(key):
        return float(re.search(rf"{key}:\s+([\d.]+)", text).group(1))

    names = re.findall(r"^\[(\d+)\]\s+-\s+(\S+)", text, re.M)
    names = [name for _, name in names]
    rows = text.split("Resource pressure per iteration:")[1].splitlines()
    per_iter = [0.0 if v == "-" else float(v) for v in rows[2].split()]
    by_instr = text.split("Resource pressure by instruction:")[1].splitlines()[2:]
    uses = []
    for row in by_instr:
        cells = row.split(None, len(names))
        if len(cells) <= len(names):
            break
        uses.append(({names[k] for k, v in enumerate(cells[: len(names)]) if v != "-"}, cells[-1]))
    return {
        "iterations": int(number("Iterations")),
        "total_cycles": number("Total Cycles"),
        "uops": number("Total uOps"),
        "dispatch_width": number("Dispatch Width"),
        "block_rthroughput": number("Block RThroughput"),
        "pressure": dict(zip(names, per_iter)),
        "uses": uses,
    }


def model_fma_per_cycle(tool: str, mcpu: str, bits: int) -> float:
    """FMAs per cycle of llvm-mca's model for `mcpu` at `bits`: a block of 24 independent FMAs."""
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[bits]
    count = 24 if bits == 512 else 12
    body = [f"vfmadd231ps %{reg}{count + 1}, %{reg}{count}, %{reg}{k}" for k in range(count)]
    m = run_mca(tool, mcpu, body, iterations=200)
    return round(count * m["iterations"] / m["total_cycles"], 2)


def bottleneck(m: dict, fma_cycles: float, cycles: float) -> str:
    """What bounds the loop: the busiest resource (named with what uses it: FMAs, loads), the
    dispatch width, or, where the loop takes longer than both, dependencies (latency)."""
    top, pressure = max(m["pressure"].items(), key=lambda kv: kv[1])
    dispatch = m["uops"] / m["iterations"] / m["dispatch_width"]
    roles = set()
    for used, instr in m["uses"]:
        if top in used:
            roles.add("FMA" if FMA.match(instr) else "load" if "(" in instr.split(",")[0] else "other")
    role = "+".join(sorted(roles)) or "other"
    if max(pressure, dispatch) < 0.9 * cycles:
        return f"dependencies ({max(pressure, dispatch):.1f} of {cycles:.1f} cycles from resources)"
    if dispatch >= pressure:
        return f"dispatch ({dispatch:.1f} cycles of {m['dispatch_width']:.0f}-wide)"
    if pressure <= 1.02 * fma_cycles and "FMA" in roles:
        return f"FMA ports ({top})"
    return f"{top} ({role}: {pressure:.1f} cycles)"


# -- one row per (description, workload, llvm-mca) ---------------------------------------------


def analyse(label, fixture, mcpu, mca_cpus, tools, iterations=100, models=()) -> list:
    """Rows of one description: each workload's micro-kernel (or, with `models`, each task's of
    those models) under each llvm-mca model."""
    target = described_target(fixture, mcpu)
    hw = target.hardware
    named = [(name, workload(name, target.lanes("float32"))) for name in WORKLOADS] if not models else []
    for model in models:
        named += [(f"{model}: {task}", out) for task, out in model_workloads(model, target)]
    rows = []
    for name, out in named:
        params = template_params(out, target)
        meta = {"description": label, "fixture": fixture, "cpu": target.cpu, "target": target.string,
                "workload": name, **params, "fma_per_cycle": hw.fma_per_cycle, "fma_chains": hw.fma_chains}  # fmt: skip
        rows += loop_rows(assembly(out, target), meta, [c or target.cpu for c in mca_cpus], tools, iterations)
    return rows


def loop_rows(asm: str, meta: dict, mca_cpus, tools: dict, iterations: int = 100) -> list:
    """One row per (llvm-mca, -mcpu that it models) for the micro-kernel of `asm`."""
    loops = fma_loops(asm)
    if not loops:
        return [{**meta, "error": "no loop with FMAs"}]
    body, counts = loops[0], loop_counts(loops[0])
    lanes = counts["vector_bits"] // 32
    tile = f"{meta['mr']}x{meta['nr'] // lanes}" if "mr" in meta else f"{counts['accumulators']} acc"
    meta = {**meta, "tile": tile}
    rows = []
    for mca_cpu in mca_cpus:
        for version, tool in sorted(tools.items()):
            row = {**meta, "mca": f"llvm-mca {version}", "mca_cpu": mca_cpu, **counts}
            try:
                m = run_mca(tool, mca_cpu, body, iterations)
                rate = model_fma_per_cycle(tool, mca_cpu, counts["vector_bits"])
            except RuntimeError as e:
                if "not a recognized processor" not in str(e):  # else: this llvm-mca has no model of the cpu
                    rows.append({**row, "error": str(e)})
                continue
            cycles = m["total_cycles"] / m["iterations"]
            fma_cycles = counts["fmas"] / rate
            rows.append({
                **row, "model_fma_per_cycle": rate, "cycles_per_iteration": round(cycles, 2),
                "block_rthroughput": m["block_rthroughput"], "fma_cycles": round(fma_cycles, 2),
                "fraction_of_fma_peak": round(fma_cycles / cycles, 3), "bottleneck": bottleneck(m, fma_cycles, cycles),
                "pressure": {k: v for k, v in m["pressure"].items() if v},
            })  # fmt: skip
    return rows


def table(rows: list) -> str:
    """A markdown table of the rows; `FMA/c` is the model's FMA rate over the description's."""
    head = ("description", "workload", "mca", "mca_cpu", "tile", "vector_bits", "fmas", "loads", "broadcasts",
            "rates", "cycles_per_iteration", "block_rthroughput", "fma_cycles", "fraction_of_fma_peak",
            "bottleneck")  # fmt: skip
    short = {"vector_bits": "bits", "cycles_per_iteration": "cyc/it", "block_rthroughput": "RThru", "rates": "FMA/c",
             "fma_cycles": "FMA cyc", "fraction_of_fma_peak": "of peak", "broadcasts": "bcasts"}  # fmt: skip
    lines = ["| " + " | ".join(short.get(h, h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        r = {**r, "rates": f"{r.get('model_fma_per_cycle', '?')}/{r.get('fma_per_cycle', '?')}"}
        r.setdefault("bottleneck", r.get("error", ""))
        lines.append("| " + " | ".join(str(r.get(h, "")) for h in head) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="where to write the rows (default experiments/results/mca-microkernel-<date>.json)")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--only", help="comma-separated description labels")
    ap.add_argument("--asm", nargs="*", help="assembly files to read instead (e.g. an older commit's kernels)")
    ap.add_argument("--mca-cpu", default="skylake-avx512", help="llvm-mca's -mcpu for --asm files")
    ap.add_argument("--models", help="comma-separated models-suite models: their tasks instead of the GEMMs")
    args = ap.parse_args(argv)
    tools = mca_tools()
    if not tools:
        raise SystemExit("no llvm-mca on the PATH (Debian: apt-get install llvm-14 or llvm-19)")
    wanted = set(args.only.split(",")) if args.only else None
    models = args.models.split(",") if args.models else ()
    rows = []
    for path in args.asm or ():
        meta = {"description": Path(path).stem, "workload": Path(path).name}
        rows += loop_rows(Path(path).read_text(), meta, [args.mca_cpu], tools, args.iterations)
    for label, fixture, mcpu, mca_cpus in () if args.asm else DESCRIPTIONS:
        if wanted is None or label in wanted:
            rows += analyse(label, fixture, mcpu, mca_cpus, tools, args.iterations, models)
    print(table(rows))
    path = Path(args.json or RESULTS / f"mca-microkernel-{datetime.date.today():%Y%m%d}.json")
    host = parse_target("llvm").cpu
    record = {"host": host, "llvm_mca": {str(v): p for v, p in tools.items()}, "llvmlite_llvm": _llvm(), "rows": rows}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")


def _llvm() -> str:
    import llvmlite.binding as llvm

    return ".".join(map(str, llvm.llvm_version_info))


if __name__ == "__main__":
    main()
