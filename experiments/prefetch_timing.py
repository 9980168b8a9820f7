"""The GEMM templates with B's prefetch off against the analytical distance (and twice and four
times it), and with A packed in k-major panels (gemm_schedule's a_panels) without and with the
prefetch, side by side in one process (issue 41; minitc/templates/gemm_prefetch.py).

    python experiments/prefetch_timing.py --rounds 11 [--target "llvm"] [--threads 2] [--json out.json]
    python experiments/prefetch_timing.py --mca intel-sapphirerapids-kvm.json   # llvm-mca, no timing

Each workload is the cpu-core suite's: matmul 1024^3, the BERT FFN dense 128x768->3072 + bias +
relu, the BERT batch matmul 12 x 128x64x128. Every program is the template's default for the
target with only `l2` (and `a_panels`) changed, checked against numpy, then timed with minitc.timing.measure
(interleaved rounds, medians). With --mca, nothing runs: the same programs for a recorded host
(tests/fixtures/hosts) go through llvm-mca's Skylake-server model as in mca_microkernel.py.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import minitc as tc
from minitc.target import parse_target
from minitc.templates import DEFAULTS, gemm, template_tag
from minitc.templates import gemm_prefetch as prefetch
from minitc.timing import measure, thread_limit

ph = tc.placeholder


def workloads() -> dict:
    return {
        "matmul-1024": lambda: tc.ops.matmul(ph((1024, 1024), name="A"), ph((1024, 1024), name="B")),
        "dense-bert-ffn": lambda: tc.ops.dense(
            ph((128, 768), name="X"), ph((3072, 768), name="W"), ph((3072,), name="b"), activation="relu"
        ),
        "bmm-bert": lambda: tc.ops.batch_matmul(ph((12, 128, 64), name="A"), ph((12, 64, 128), name="B")),
    }


def _numpy(name: str, arrays: list):
    if name == "dense-bert-ffn":
        x, w, b = arrays
        return np.maximum(x @ w.T + b, 0)
    return arrays[0] @ arrays[1]


def schedule(out, target, params: dict, l2: int, a_panels: bool):
    """The template's program (gemm.py's matmul / batch_matmul / dense_epilogue) with B's
    prefetch `l2` steps ahead and, with a_panels, A packed in panels."""
    s = tc.Schedule(out)
    stage = s.state.outputs[0]
    tiles = {k: v for k, v in params.items() if k != "l2"}
    extra = {"prefetch_b": l2, "a_panels": a_panels}
    if template_tag(s, stage) == "dense_epilogue":
        product = gemm.gemm_producer(s, stage)
        gemm.inline_epilogue(s, stage, product)
        gemm.gemm_schedule(s, stage, product, target, **tiles, **extra)
    else:
        gemm._matmul_like(s, stage, target, **tiles, **extra)
    return s


def programs(name: str, make, target) -> tuple:
    """({label: zero-argument callable}, {label: l2}, the default parameters) for off, d, 2d,
    4d, A panels and A panels with d."""
    out = make()
    s = tc.Schedule(out)
    stage = s.state.outputs[0]
    tag = template_tag(s, stage)
    params = DEFAULTS[tag](s, stage, target)
    vec = target.lanes("float32")
    d = prefetch.distance(target.hardware, params["mr"], params["nr"] // vec)
    rng = np.random.default_rng(0)
    inputs, _ = s.arguments()
    arrays = [rng.standard_normal(s.state.stage(n).shape).astype("float32") for n in inputs]
    want = _numpy(name, arrays)
    fns, distances = {}, {}
    variants = (("off", 0, False), ("d", d, False), ("2d", 2 * d, False), ("4d", 4 * d, False))
    for label, l2, a_panels in variants + (("A", 0, True), ("A+d", d, True)):
        f = tc.build(schedule(out, target, params, l2, a_panels), target)
        result = np.zeros(out.shape, "float32")
        f(*arrays, result)
        np.testing.assert_allclose(result, want, rtol=1e-3, atol=1e-3)
        fns[label] = lambda f=f, result=result: f(*arrays, result)
        distances[label] = l2
    return fns, distances, params


def mca_table(fixture: str) -> None:
    """The fraction of the FMA peak llvm-mca (LLVM 14, skylake-avx512) predicts for each
    variant's micro-kernel on the recorded host `fixture`."""
    import importlib.util
    from pathlib import Path

    from minitc.backends import lower_schedule
    from minitc.backends.llvm import jit
    from minitc.backends.llvm.codegen import render

    spec = importlib.util.spec_from_file_location("mca", Path(__file__).with_name("mca_microkernel.py"))
    mca = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mca)
    target = mca.described_target(fixture, None)
    tool = mca.mca_tools()[14]
    for name in ("matmul-1024", "dense-bert-ffn-gelu", "bmm-bert"):
        out = mca.workload(name, target.lanes("float32"))
        s = tc.Schedule(out)
        stage = s.state.outputs[0]
        params = DEFAULTS[template_tag(s, stage)](s, stage, target)
        d = prefetch.distance(target.hardware, params["mr"], params["nr"] // target.lanes("float32"))
        cells = []
        for l2, a_panels in ((0, False), (d, False), (0, True), (d, True)):
            ir = render(lower_schedule(schedule(out, target, params, l2, a_panels), target), target, name="kernel")
            with jit._LOCK:
                module, machine = jit.optimized_module(ir, "kernel", target)
                body = mca.fma_loops(machine.emit_assembly(module))[0]
            m = mca.run_mca(tool, "skylake-avx512", body, iterations=50)
            peak = mca.loop_counts(body)["fmas"] / mca.model_fma_per_cycle(tool, "skylake-avx512", 512)
            cells.append(f"l2={l2}{' A' if a_panels else ''} {peak / (m['total_cycles'] / m['iterations']):.1%}")
        print(f"{name:20s} {params['mr']} x {params['nr']}  " + "  ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--json")
    ap.add_argument("--mca", metavar="FIXTURE", help="llvm-mca of a recorded host's programs instead of timing")
    args = ap.parse_args()
    if args.mca:
        return mca_table(args.mca)
    target = parse_target(args.target)
    rows = {}
    with thread_limit(args.threads):
        for name, make in workloads().items():
            fns, distances, params = programs(name, make, target)
            timings = measure(fns, repeats=args.rounds, min_repeats=args.rounds, budget_s=60.0)
            off = timings["off"].median
            rows[name] = {
                "tile": f"{params['mr']} x {params['nr']}",
                "ms": {k: t.median * 1e3 for k, t in timings.items()},
                "l2": distances,
                "speedup": {k: off / t.median for k, t in timings.items()},
                "rounds": {k: len(t.samples) for k, t in timings.items()},
            }
            cells = "  ".join(
                f"{k}={distances[k]} {t.median * 1e3:.3f} ms x{off / t.median:.3f}" for k, t in timings.items()
            )
            print(f"{name:15s} {rows[name]['tile']:7s} {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": target.string, "threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
