"""MTL-TLP on a hardware description left out: top-1 / top-5 (the seed's metric) with 0, 100 and
400 of its programs, against the per-machine and the all-CPU TLP model.

    python experiments/mtl_eval.py --leave-out rocketlake-2c-43bb2171 --json experiments/results/X.json
    python experiments/mtl_eval.py --leave-out znver4-2c-31f64895 --folds 2 --epochs 10   # quicker

Data: the CPU programs of lm/data (minitc lm data). The left-out machine L's workloads are
split into `--folds` folds; each fold's workloads are the test set once, and its k programs
come from L's other workloads (so no test workload is ever trained on; where L has fewer than
k programs there, all of them are used and the JSON says how many). Per fold and k:

* MTL-TLP: one MTLModel (lm/mtl.py) pretrained on every other CPU's programs (once), then
  `fit_head(L, k programs)`; with k = 0 the shared head ranks.
* per-machine: a TLPModel trained on the k programs only (what `minitc lm adapt` trained
  before, without the other machines);
* all-CPU: a TLPModel trained on every other CPU's programs plus the k programs, pooled.

top-k score of a test workload = its best latency / the best latency among the model's k
highest-scored programs (experiments/cost_model_eval.py); the table is the mean over L's
workloads. One training (seed) each, one torch thread.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from cost_model_eval import random_top_k, top_k_score  # noqa: E402

from minitc.autotune.cost_model import TLPModel  # noqa: E402
from minitc.autotune.mtl_model import MTLModel, machine_of  # noqa: E402
from minitc.lm.cost import cost_records  # noqa: E402
from minitc.lm.dataset import load  # noqa: E402
from minitc.lm.hardware import is_gpu_line  # noqa: E402
from minitc.target import hardware_fingerprint, parse_target  # noqa: E402


class _Workloads:
    """Collects the computation of each group cost_records registers, to register it again
    with every model trained here (replaying the dataset's sentences once)."""

    def __init__(self):
        self.outputs = {}

    def register(self, group, outputs):
        self.outputs[group] = outputs

    def into(self, model):
        for group, outputs in self.outputs.items():
            model.register(group, outputs)
        return model


def score(model, test: dict) -> dict:
    """{group: {top1, top5, random_top1, random_top5, n}} of the model on each test group."""
    out = {}
    for group, (traces, lat) in test.items():
        scores = model.predict(group, traces)
        row = {"n": len(traces)}
        for k in (1, 5):
            row[f"top{k}"] = top_k_score(scores, lat, k)
            row[f"random_top{k}"] = random_top_k(lat, k)
        out[group] = row
    return out


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--leave-out", required=True, help="the hardware fingerprint left out")
    ap.add_argument("--ks", default="0,100,400", help="programs of the left-out machine trained on")
    ap.add_argument("--folds", type=int, default=4, help="folds of the left-out machine's workloads")
    ap.add_argument("--epochs", type=int, default=20, help="pretraining epochs (backbone, all-CPU)")
    ap.add_argument("--small-epochs", type=int, default=60, help="epochs on k programs (head, per-machine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    started = time.monotonic()
    say = lambda msg: print(f"[{time.monotonic() - started:6.0f} s] {msg}", flush=True)  # noqa: E731

    entries = [e for e in load(sentences=False) if not is_gpu_line(e.hardware)]
    if args.leave_out not in {e.fingerprint for e in entries}:
        ap.error(f"{args.leave_out}: no CPU programs of it in lm/data")
    workloads = _Workloads()
    records, skipped = cost_records(entries, workloads)
    left = [r for r in records if machine_of(r[0]) == args.leave_out]
    others = [r for r in records if machine_of(r[0]) != args.leave_out]
    say(f"{len(others)} programs of other CPUs, {len(left)} of {args.leave_out} ({skipped} no longer replay)")

    rng = np.random.default_rng(args.seed)
    groups = sorted({g for g, _, _ in left})
    groups = [groups[i] for i in rng.permutation(len(groups))]
    folds = [groups[i :: args.folds] for i in range(args.folds)]
    ks = [int(k) for k in args.ks.split(",")]

    backbone = workloads.into(MTLModel(seed=args.seed))
    backbone.pretrain(others, epochs=args.epochs)
    say(f"MTL backbone: heads {', '.join(backbone.machines)}")
    pooled0 = workloads.into(TLPModel(seed=args.seed))
    pooled0.pretrain(others, epochs=args.epochs)
    say("all-CPU model without the left-out machine")

    rows = {k: {"mtl": {}, "per_machine": {}, "all_cpu": {}} for k in ks}
    used = {k: [] for k in ks}
    for f, fold in enumerate(folds):
        test = {}
        for g in fold:
            mine = [(t, ms) for w, t, ms in left if w == g]
            test[g] = ([t for t, _ in mine], np.array([np.inf if ms is None else ms for _, ms in mine], float))
        pool = [r for r in left if r[0] not in fold]
        for k in ks:
            sample = [pool[i] for i in sorted(rng.permutation(len(pool))[:k])]
            used[k].append(len(sample))
            if not sample:
                rows[k]["mtl"].update(score(backbone, test))  # no head: the shared head ranks
                rows[k]["all_cpu"].update(score(pooled0, test))
                continue
            mtl = workloads.into(MTLModel.from_blob(backbone.to_blob(), "backbone"))
            mtl.fit_head(args.leave_out, sample, epochs=args.small_epochs)
            rows[k]["mtl"].update(score(mtl, test))
            alone = workloads.into(TLPModel(seed=args.seed))
            alone.pretrain(sample, epochs=args.small_epochs)
            rows[k]["per_machine"].update(score(alone, test))
            pooled = workloads.into(TLPModel(seed=args.seed))
            pooled.pretrain(others + sample, epochs=args.epochs)
            rows[k]["all_cpu"].update(score(pooled, test))
            say(f"fold {f + 1}/{args.folds}, k={k} ({len(sample)} programs): done")

    def mean(per_group: dict, col: str):
        return float(np.nanmean([r[col] for r in per_group.values()])) if per_group else None

    table = {}
    for k in ks:
        any_rows = next(r for r in rows[k].values() if r)
        table[k] = {"programs_used_per_fold": used[k]}
        for model, per_group in rows[k].items():
            table[k][model] = {"top1": mean(per_group, "top1"), "top5": mean(per_group, "top5")}
        table[k]["random"] = {"top1": mean(any_rows, "random_top1"), "top5": mean(any_rows, "random_top5")}
        cells = "  ".join(
            f"{m} {v['top1']:.3f}/{v['top5']:.3f}" if v.get("top1") is not None else f"{m} -"
            for m, v in table[k].items()
            if m != "programs_used_per_fold"
        )
        print(f"k={k:4d} (used {used[k]}): {cells}")
    result = {
        "command": " ".join(["python", "experiments/mtl_eval.py"] + (argv if argv is not None else sys.argv[1:])),
        "cpu": cpu_name(),
        "host": hardware_fingerprint(parse_target("llvm")),  # the machine that trained and ranked
        "leave_out": args.leave_out,
        "programs_other_cpus": len(others),
        "programs_left_out": len(left),
        "workloads_left_out": len(groups),
        "folds": args.folds,
        "epochs": args.epochs,
        "small_epochs": args.small_epochs,
        "seconds": time.monotonic() - started,
        "mean": table,
        "per_workload": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    say("done")
    return result


if __name__ == "__main__":
    main()
