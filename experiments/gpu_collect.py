"""Measure GPU programs into the tensor-language dataset within a time budget (run on a GPU).

    python experiments/gpu_collect.py --db OUT/gpu.db --seconds 200 [--per-workload 32] [--start N]
    minitc lm export-db OUT/gpu.db          # back on the development machine: into lm/data

Goes through the training workloads whose GPU design space is settled (GEMMs, convolutions,
depthwise convolutions), interleaving the kinds so that a short budget still covers each, and
measures each with `minitc lm measure`'s code (evolutionary search, so the dataset holds good
programs as well as poor ones). It stops before a workload once the budget is spent; every
finished workload is already in the records database, which comes back as one file (a dataset
shard per workload would be many)."""

from __future__ import annotations

import argparse
import itertools
import time

from minitc.lm.measure import measure
from minitc.lm.training_set import TRAINING, workload

KINDS = ("dense_epilogue", "conv2d", "batch_matmul", "matmul", "depthwise_conv2d")


def interleaved() -> list:
    by_kind = {k: [n for n in TRAINING if workload(n).op.tag == k] for k in KINDS}
    rows = itertools.zip_longest(*by_kind.values())
    return [n for row in rows for n in row if n is not None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--seconds", type=float, default=200)
    p.add_argument("--per-workload", type=int, default=32)
    p.add_argument("--strategy", default="evolutionary")
    p.add_argument("--start", type=int, default=0, help="skip the first N workloads (measured by an earlier run)")
    args = p.parse_args()
    deadline = time.perf_counter() + args.seconds
    for name in interleaved()[args.start :]:
        if time.perf_counter() > deadline:
            print(f"budget spent: stopping before {name}", flush=True)
            break
        measure(args.db, [name], args.per_workload, args.strategy, target="cuda")


if __name__ == "__main__":
    main()
