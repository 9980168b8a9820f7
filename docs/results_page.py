"""docs/results.md, written from the stored results in experiments/results/ (issue 43): the
headline tables cannot drift from the data, and every row names its machine and command.

    python docs/results_page.py            # rewrite docs/results.md
    python docs/results_page.py --check    # exit 1 if docs/results.md is stale

To show a new result, store its JSON in experiments/results/ and add it to a table below.
tests/benchmarks/test_results_page.py checks that the page matches the data.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
PAGE = ROOT / "docs" / "results.md"

# cpu-core: (host label, target label, files whose 2-thread ratios are combined by median)
CPU_CORE = [
    ("AMD EPYC Zen 5", "native", [f"cpu-core-znver5-native-20261129{s}.json" for s in ("c", "d")]),
    ("AMD EPYC Zen 5", "native", ["cpu-core-znver5-native-20261129.json"]),
    ("AMD EPYC Zen 5", "AVX2", ["cpu-core-znver5-target-x86-64-v3-20261129.json"]),
    ("AMD EPYC Zen 5", "native", ["cpu-core-znver5-native-20261128.json"]),
    ("AMD EPYC Zen 5", "AVX2", [f"cpu-core-znver5-target-x86-64-v3-20261128{s}.json" for s in ("", "b")]),
    ("AMD EPYC Zen 5", "native", ["cpu-core-znver5-native-20261127.json", "cpu-core-znver5-native-20261127b.json"]),
    ("AMD EPYC Zen 5", "AVX2", ["cpu-core-znver5-target-x86-64-v3-20261127.json"]),
    ("AMD EPYC Zen 4", "native", [f"cpu-core-znver4-native-20261127{s}.json" for s in ("", "b", "c")]),
    ("AMD EPYC Zen 4", "AVX2", [f"cpu-core-znver4-target-x86-64-v3-20261127{s}.json" for s in ("", "b", "c")]),
    ("AMD EPYC Zen 3", "native", ["cpu-core-znver3.json"]),
    ("AMD EPYC Zen 3", "AVX2", ["cpu-core-znver3-target-x86-64-v3.json"]),
    ("AMD EPYC Zen 2", "native", ["cpu-core-znver2.json"]),
    # issue 41's host 1 (../shared/measurements/intel-xeon-2026-11-28), with the code of that day
    ("Intel Xeon, KVM (Sapphire Rapids class)", "native", ["cpu-core-intel-xeon-kvm-native-20261128.json"]),
]
CPU_WORKLOADS = ("matmul-512", "matmul-1024", "bmm-bert", "conv-resnet", "dense-bert-ffn", "softmax-bert",
                 "eltwise-4m", "rowsum-4k")  # fmt: skip
MODELS = [
    ("AMD EPYC Zen 5", "models-znver5-mbv2-padded-20261129.json"),
    ("AMD EPYC Zen 5", "models-znver5-mbv2-padded-20261129b.json"),
    ("AMD EPYC Zen 5", "models-znver5-tuned-20261129.json"),
    ("AMD EPYC Zen 5", "models-znver5-mbv2-tuned-1500-20261129.json"),
    ("AMD EPYC Zen 5", "models-znver5-20261128.json"),
    ("AMD EPYC Zen 5", "models-znver5-all-winograd.json"),
    ("Intel Xeon, KVM (Sapphire Rapids class)", "models-intel-xeon-kvm-20261128.json"),  # issue 41's host 1
    ("Intel Xeon, KVM (Sapphire Rapids class)", "models-realsize-intel-xeon-kvm-20261207.json"),  # issue 53
    ("Intel Xeon, KVM (Sapphire Rapids class)", "models-realsize-intel-xeon-kvm-20261208.json"),  # softmax flush
]
TLM_EVAL = [  # (machine, what was evaluated, file)
    ("AMD EPYC Zen 5", "the model of six CPUs (shipped since 2026-11-29)", "tlm-eval-znver5-cross6-20261129.json"),
    ("AMD EPYC Zen 5 (left out)", "the five other CPUs' model", "tlm-eval-znver5-left-out-with-intel-20261129.json"),
    ("AMD EPYC Zen 5 (left out)", "after `minitc lm adapt`", "tlm-eval-znver5-left-out-adapted-20261129.json"),
    ("AMD EPYC Zen 5", "the shipped model and cost model", "tlm-eval-znver5-shipped-default-cost-model.json"),
    ("AMD EPYC Zen 4 (never seen)", "the shipped model", "tlm-eval-znver4-shipped.json"),
    ("AMD EPYC Zen 4 (never seen)", "after `minitc lm adapt`", "tlm-eval-znver4-adapted.json"),
    ("AMD EPYC Zen 3", "the Zen 2 model (shipped until 2026-11-26)", "tlm-eval-znver3-shipped.json"),
]
GPU_CORE = [
    ("NVIDIA H200", "gpu-core-h200-templates-20261127.json"),
    ("NVIDIA H100", "gpu-core-h100-templates-20261127.json"),
]
TUNED = [  # (host, file of `minitc tune --json`): a workload no table names, tuned
    ("AMD EPYC Zen 5", "tune-evo256-matmul-1000-znver5-20261128.json"),
]
TVM_PEER = [("AMD EPYC Zen 2", "tvm-peer-znver2.json")]
DYNAMIC = [("AMD EPYC Zen 5", "dynamic-bert-base-znver5-20261128.json")]
GENERATE = [("AMD EPYC Zen 5", "generate-znver5-20261128.json")]
COST_MODEL = ["mtl-eval-rocketlake-2c-43bb2171-on-znver5.json", "mtl-eval-znver4-2c-31f64895-on-znver5.json"]


def load(name: str):
    return json.loads((RESULTS / name).read_text())


def fmt(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def geomean(values: list) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def command(data) -> str:
    """A run's command without its output paths (--json, --plot, where --evo-from came from)."""
    run = data[0].get("run", data[0]) if isinstance(data, list) else data.get("run", data)
    text = re.sub(r" --(json|plot|evo-from|tvm-work|db) \S+", "", run["command"])
    return text.replace("python -m benchmarks", "python -m minitc.benchmarks")


def commands(files: list) -> str:
    return "; ".join(f"`{c}`" for c in sorted({command(load(f)) for f in files}))


def cpu_core_section() -> list:
    out = [
        "## CPU kernels, templates only (`cpu-core`, 2 threads)",
        "",
        "Speed against the faster of numpy and torch in the same run (> 1: minitc is faster); the",
        "median over the runs listed. AVX2: the target `llvm -mcpu=x86-64-v3` on the same host.",
        "",
        "| host | target | " + " | ".join(CPU_WORKLOADS) + " | date | runs |",
        "|---" * (len(CPU_WORKLOADS) + 4) + "|",
    ]
    for host, target, files in CPU_CORE:
        ratios = {w: [] for w in CPU_WORKLOADS}
        for f in files:
            for r in load(f):
                if r.get("threads") == 2 and r["workload"] in ratios and r.get("ratio"):
                    ratios[r["workload"]].append(r["ratio"])
        cells = [fmt(statistics.median(v)) if v else "–" for v in ratios.values()]
        date = load(files[0])[0]["run"]["date"][:10]
        out.append(f"| {host} | {target} | " + " | ".join(cells) + f" | {date} | {len(files)} |")
    out += ["", "Commands: " + commands([f for _, _, files in CPU_CORE for f in files]), ""]
    return out


def models_section() -> list:
    out = [
        "## Whole models (`models`, 2 threads)",
        "",
        'Milliseconds per call; "vs best peer" is minitc against the faster of ONNX Runtime and',
        "Inductor (> 1: minitc is faster), with the operators' templates and, where the run tuned",
        "(`--trials N`: trials over the model's tasks, tuning seconds), with the records chosen",
        "task by task inside the model.",
        "",
        "| host | date | model | minitc | tuned (trials, s) | ONNX Runtime | Inductor | eager | vs best peer "
        "| tuned vs best peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for host, f in MODELS:
        for r in load(f):
            peers = [r.get("onnxruntime_ms"), r.get("inductor_ms")]
            best = min((p for p in peers if p), default=None)
            mine, tuned = r.get("minitc_ms"), r.get("minitc_tuned_ms")
            ratio, tuned_ratio = (best / ms if best and ms else None for ms in (mine, tuned))
            tuning = f"{fmt(tuned, 2)} ({r['trials']}, {r['tuning_s']:.0f})" if tuned else ""
            cells = [fmt(mine, 2), tuning]
            cells += [fmt(r.get(k), 2) for k in ("onnxruntime_ms", "inductor_ms", "eager_ms")]
            cells += [fmt(ratio), fmt(tuned_ratio) if tuned else ""]
            out.append(f"| {host} | {r['run']['date'][:10]} | {r['model']} | " + " | ".join(cells) + " |")
    out += ["", "Command: " + commands([f for _, f in MODELS]), ""]
    return out


def tlm_section() -> list:
    out = [
        "## The language model against evolutionary search (`tlm-eval`)",
        "",
        "Evo@256's kernel time over TLM@k's (> 1: the language model's program is faster), geometric",
        "mean over the held-out workloads, median over the seeds; first-measured / timed side by side",
        "at the end.",
        "",
        "| machine | model | TLM@10 | TLM@64 | workloads | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for machine, what, f in TLM_EVAL:
        data = load(f)
        seeds = [data["rows"], *data.get("more_seeds", {}).values()]
        cells = []
        for k in ("10", "64"):
            first = statistics.median(geomean([r["evo_ms"]["256"] / r["tlm_ms"][k] for r in rows]) for rows in seeds)
            side = statistics.median(
                geomean([r["retimed_ms"]["Evo@256"] / r["retimed_ms"][f"TLM@{k}"] for r in rows]) for rows in seeds
            )
            cells.append(f"{fmt(first)} / {fmt(side)}")
        out.append(f"| {machine} | {what} | " + " | ".join(cells) + f" | {len(data['rows'])} | {len(seeds)} |")
    out += ["", "Commands: " + commands([f for _, _, f in TLM_EVAL]), ""]
    return out


def gpu_section() -> list:
    out = [
        "## GPU kernels, templates only (`gpu-core`, float32 without TF32)",
        "",
        "Speed against torch (cuBLAS/cuDNN) in the same run (> 1: minitc is faster).",
        "",
        "| GPU | workload | vs torch | date |",
        "|---|---|---|---|",
    ]
    for gpu, f in GPU_CORE:
        for r in load(f):
            out.append(f"| {gpu} | {r['workload']} | {fmt(r.get('vs_torch'))} | {r['run']['date'][:10]} |")
    out += ["", "Command: " + commands([f for _, f in GPU_CORE]), ""]
    return out


def cost_model_section() -> list:
    out = [
        "## The cost model on a CPU it was not trained on (MTL-TLP)",
        "",
        "Top-1 / top-5 scores (the TLP paper's metric) on the left-out CPU's workloads, with 0, 100 and",
        "400 of its programs: one backbone with a head per CPU (MTL-TLP), a model of its programs",
        "alone (per machine) and one model of every CPU's programs pooled (all CPUs).",
        "",
        "| left out | run on | programs | MTL-TLP | per machine | all CPUs |",
        "|---|---|---|---|---|---|",
    ]
    for f in COST_MODEL:
        d = load(f)
        for n, m in d["mean"].items():
            cells = [f"{fmt(m[k]['top1'])} / {fmt(m[k]['top5'])}" for k in ("mtl", "per_machine", "all_cpu")]
            out.append(f"| {d['leave_out']} | {d['host']} | {n} | " + " | ".join(cells) + " |")
    out += ["", "Commands: " + commands(COST_MODEL), ""]
    return out


def tuned_section() -> list:
    out = [
        "## Tuned kernels (`minitc tune`, 2 threads)",
        "",
        "The tuned kernel, the template and the libraries timed together after tuning; speed",
        "against the faster of numpy and torch (> 1: minitc is faster).",
        "",
        "| host | workload | strategy | trials | tuned ms | template ms | numpy ms | torch ms | tuned vs library |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for host, f in TUNED:
        d = load(f)
        ms = [d["tuned_ms"], d["default_ms"], d["numpy_ms"], d["torch_ms"]]
        cells = [fmt(v, 3) for v in ms] + [fmt(min(ms[2:]) / ms[0])]
        out.append(f"| {host} | {d['description']} | {d['strategy']} | {d['trials']} | " + " | ".join(cells) + " |")
    out += ["", "Commands: " + commands([f for _, f in TUNED]), ""]
    return out


def dynamic_section() -> list:
    out = [
        "## Dynamic shapes: BERT-base over lengths 16..512 (2 threads)",
        "",
        "One compile with `dynamic_shapes` against a static compile of each length, eager and",
        "Inductor with `dynamic=True`; speed of the dynamic model (> 1: it is faster).",
        "",
        "| host | length | dynamic ms | static ms | eager ms | Inductor ms | vs static | vs Inductor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for host, f in DYNAMIC:
        for row in load(f)["rows"]:
            ms = row["ms"]
            cells = [fmt(ms[k], 1) for k in ("dynamic", "static", "eager", "inductor")]
            cells += [fmt(ms["static"] / ms["dynamic"]), fmt(ms["inductor"] / ms["dynamic"])]
            out.append(f"| {host} | {row['length']} | " + " | ".join(cells) + " |")
    out += ["", "Command: " + commands([f for _, f in DYNAMIC]), ""]
    return out


def generate_section() -> list:
    out = [
        "## Text generation through the backend (greedy, 2 threads)",
        "",
        "`model.forward = torch.compile(model.forward, backend=...)` and Hugging Face `generate()`;",
        "decode milliseconds per token and minitc's speed against each (> 1: minitc is faster).",
        "",
        "| host | model | prompt, new | minitc decode ms/token | eager | Inductor | vs eager | vs Inductor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for host, f in GENERATE:
        for r in load(f):
            ms = {k: v["decode_ms_per_token"] for k, v in r["systems"].items()}
            cells = [fmt(ms["minitc"]), fmt(ms["eager"]), fmt(ms.get("inductor"))]
            cells += [fmt(ms["eager"] / ms["minitc"]), fmt(ms["inductor"] / ms["minitc"] if "inductor" in ms else None)]
            out.append(f"| {host} | {r['description']} | {r['prompt_len']}, {r['new']} | " + " | ".join(cells) + " |")
    out += ["", "Command: " + commands([f for _, f in GENERATE]), ""]
    return out


def tvm_section() -> list:
    out = [
        "## Against Apache TVM 0.27 MetaSchedule",
        "",
        "matmul 512³ at 2 threads, tuned by each; milliseconds of the best program and seconds of tuning.",
        "",
        "| host | system | ms | tuning s |",
        "|---|---|---|---|",
    ]
    for host, f in TVM_PEER:
        d = load(f)
        for system in sorted(d["median_ms"]):
            out.append(
                f"| {host} | {system} | {fmt(d['median_ms'][system], 3)} | {fmt(d['tuning_s'].get(system), 1)} |"
            )
    out += [
        "",
        "Command: " + commands([f for _, f in TVM_PEER]).replace("benchmarks/tvm_peer.py", "experiments/tvm_peer.py"),
        "",
    ]
    return out


def page() -> str:
    lines = [
        "# Results",
        "",
        "Written by `python docs/results_page.py` from the JSON in",
        "[experiments/results/](../experiments/results/); do not edit by hand. Each table names the",
        "machine; the runs' full records (versions, machine measurements, per-task breakdowns) are",
        "in the files. Discussion: [benchmarks.md](benchmarks.md), [models.md](models.md),",
        "[evaluation.md](evaluation.md), [gpu.md](gpu.md), [hardware.md](hardware.md).",
        "",
        "The Intel Xeon rows are the measurements that opened issue 41, with the code of",
        "2026-11-28; no Intel host has been reachable since (docs/hardware.md has what llvm-mca",
        "predicts for the kernels of today's code there).",
        "",
    ]
    sections = (cpu_core_section, tuned_section, models_section, dynamic_section, generate_section, tlm_section)
    sections += (cost_model_section, gpu_section)
    for section in (*sections, tvm_section):
        lines += section()
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/results.md differs from the data")
    args = parser.parse_args()
    text = page()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python docs/results_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
