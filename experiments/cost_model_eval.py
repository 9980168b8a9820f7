"""Evaluate the TLP cost model the way TLP does: top-k scores on held-out workloads.

    python experiments/cost_model_eval.py          # ~10 min on a 2-core machine (8 measuring)
    python experiments/cost_model_eval.py --loo    # + leave-one-workload-out (~2 min more)
    python experiments/cost_model_eval.py --candidates 40 --epochs 20     # a quicker look

1. Dataset: for each training and held-out workload (small/medium `tc.ops` shapes; the held-out
   ones have shapes, and in part operators or epilogues, the training ones do not), sample
   `--candidates` distinct random candidates of its design space (`Space.sample`), measure them
   (`LocalBuilder(workers=2)`, `LocalRunner(repeats=3, min_repeat_ms=5)`) and store them in a
   records database (`--db`). Running again reuses the records already there.
2. Pretrain a `TLPModel` on the training workloads' records.
3. Report top-1 / top-5 on the held-out workloads, zero-shot and after online `fit` on a random
   quarter of each held-out workload's records (scored on the other three quarters), against
   `RandomModel` (its expectation, averaged over many draws).
4. Save the model (`--out`) and, with `--json`, the numbers.

top-k score of a workload = (best latency of all its candidates) / (best latency among the
model's k highest-scored candidates); failed candidates count as infinitely slow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import minitc as tc
from minitc.autotune.database import Database, Record
from minitc.autotune.workload_key import canonical, describe, workload_key
from minitc.errors import ScheduleError

TARGET = "llvm"


def _p(shape, name):
    return tc.placeholder(shape, "float32", name=name)


TRAIN = {
    "matmul_128x256x128": lambda: tc.ops.matmul(_p((128, 256), "A"), _p((256, 128), "B")),
    "dense_64x256x512_relu": lambda: tc.ops.dense(
        _p((64, 256), "X"), _p((512, 256), "W"), _p((512,), "b"), activation="relu"
    ),
    "conv2d_16x32x32_k32_3x3": lambda: tc.ops.conv2d(_p((1, 16, 32, 32), "X"), _p((32, 16, 3, 3), "W"), padding=1),
    "batch_matmul_8x64x32x64": lambda: tc.ops.batch_matmul(_p((8, 64, 32), "A"), _p((8, 32, 64), "B")),
    "softmax_64x1024": lambda: tc.ops.softmax(_p((64, 1024), "X")),
    "layer_norm_128x512": lambda: tc.ops.layer_norm(_p((128, 512), "X"), _p((512,), "g"), _p((512,), "b")),
    "depthwise_32x28x28_3x3": lambda: tc.ops.depthwise_conv2d(
        _p((1, 32, 28, 28), "X"), _p((32, 1, 3, 3), "W"), padding=1
    ),
    "max_pool2d_32x32x32_2": lambda: tc.ops.max_pool2d(_p((1, 32, 32, 32), "X"), 2),
}
HELD_OUT = {
    "dense_96x384x192_gelu": lambda: tc.ops.dense(
        _p((96, 384), "X"), _p((192, 384), "W"), _p((192,), "b"), activation="gelu"
    ),
    "conv2d_32x16x16_k48_3x3": lambda: tc.ops.conv2d(_p((1, 32, 16, 16), "X"), _p((48, 32, 3, 3), "W"), padding=1),
    "layer_norm_256x256": lambda: tc.ops.layer_norm(_p((256, 256), "X"), _p((256,), "g"), _p((256,), "b")),
}


def hardware() -> str:
    """The machine fingerprint records are keyed by (CPU model, cores, feature hash)."""
    from minitc.target import parse_target

    t = parse_target(TARGET)
    return f"{t.cpu}-{t.num_cores}c-{hashlib.sha256(t.features.encode()).hexdigest()[:8]}"


# ---------------------------------------------------------------------------------------------
# 1. dataset


def sample_traces(out, n: int, rng, exclude: set) -> list:
    """Up to n distinct random candidate traces not in `exclude`."""
    from minitc.autotune.space import Space

    space, traces, tries = Space(out, TARGET), [], 0
    while len(traces) < n and tries < 20 * n:
        tries += 1
        try:
            trace = space.sample(rng).trace
        except ScheduleError:
            continue
        if trace not in exclude:
            exclude.add(trace)
            traces.append(trace)
    return traces


def generate(db: Database, workloads: dict, n: int, seed: int, log=print) -> None:
    """Measure up to n distinct random candidates of each workload (resuming what is there)."""
    from minitc.autotune.runner import LocalBuilder, LocalRunner, Task

    hw = hardware()
    builder = runner = None
    try:
        for w, (name, make) in enumerate(workloads.items()):
            out = make()
            key = workload_key(out)
            db.add_workload(key, describe(out), canonical(out, attrs=True))
            have = {r.trace for r in db.records(key, TARGET, hw)}
            traces = sample_traces(out, n - len(have), np.random.default_rng([seed, w, len(have)]), set(have))
            if not traces:
                continue
            builder = builder or LocalBuilder(workers=2)
            runner = runner or LocalRunner(repeats=3, min_repeat_ms=5)
            task, start, errors = Task.from_outputs(out, TARGET), time.perf_counter(), 0
            for chunk in range(0, len(traces), 16):
                batch = traces[chunk : chunk + 16]
                for res in runner.run(task, builder.build(task, batch)):
                    db.add(Record(key, TARGET, hw, res.trace, res.latencies_ms, res.median_ms, res.error))
                    errors += res.error is not None
            log(
                f"  measured {len(traces):4d} candidates of {name} ({errors} errors) "
                f"in {time.perf_counter() - start:.0f} s"
            )
    finally:
        if builder is not None:
            builder.close()
        if runner is not None:
            runner.close()


def load(db: Database, workloads: dict) -> dict:
    """name -> (key, outputs, traces, latencies ms with inf for errors)."""
    hw, data = hardware(), {}
    for name, make in workloads.items():
        out = make()
        key = workload_key(out)
        recs = db.records(key, TARGET, hw)
        lat = np.array([r.median_ms if r.ok else math.inf for r in recs], float)
        data[name] = (key, out, [r.trace for r in recs], lat)
    return data


# ---------------------------------------------------------------------------------------------
# 3. metric


def top_k_score(scores: np.ndarray, latencies: np.ndarray, k: int) -> float:
    """best latency / best latency among the k highest-scored candidates (0 if all failed)."""
    best = latencies.min()
    if not math.isfinite(best):
        return float("nan")
    picked = np.argsort(-np.asarray(scores), kind="stable")[:k]
    return float(best / latencies[picked].min())


def random_top_k(latencies: np.ndarray, k: int, draws: int = 2000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([top_k_score(rng.random(len(latencies)), latencies, k) for _ in range(draws)]))


def evaluate(model, data: dict, ks=(1, 5), fit_fraction: float = 0.0, seed: int = 0) -> dict:
    """Per held-out workload: the model's and random's top-k. With fit_fraction > 0, the model
    is first `fit` on that fraction of the workload's records and scored on the rest."""
    import copy

    out = {}
    for w, (name, (key, outputs, traces, lat)) in enumerate(data.items()):
        idx = np.random.default_rng([seed, w]).permutation(len(traces))
        n_fit = int(round(fit_fraction * len(traces)))
        fit_idx, test_idx = idx[:n_fit], idx[n_fit:]
        m = copy.deepcopy(model) if n_fit else model
        m.register(key, outputs)
        if n_fit:
            m.fit(key, [traces[i] for i in fit_idx], list(lat[fit_idx]))
        test_traces, test_lat = [traces[i] for i in test_idx], lat[test_idx]
        start = time.perf_counter()
        scores = m.predict(key, test_traces)
        predict_s = time.perf_counter() - start
        row = {"candidates": len(test_idx), "errors": int(np.sum(~np.isfinite(test_lat))), "predict_s": predict_s}
        for k in ks:
            row[f"top{k}"] = top_k_score(scores, test_lat, k)
            row[f"random_top{k}"] = random_top_k(test_lat, k, seed=seed)
        out[name] = row
    return out


def cross_validate(data: dict, epochs: int, seed: int) -> dict:
    """Leave one workload out: pretrain on all the others, score it zero-shot."""
    from minitc.autotune.cost_model import TLPModel

    rows = {}
    for held in data:
        model, records = TLPModel(seed=seed), []
        for name, (key, outputs, traces, lat) in data.items():
            model.register(key, outputs)
            if name != held:
                records += [(key, t, ms) for t, ms in zip(traces, lat)]
        model.pretrain(records, epochs=epochs)
        rows.update(evaluate(model, {held: data[held]}, seed=seed))
    return rows


def _mean(rows: dict, col: str) -> float:
    return float(np.nanmean([r[col] for r in rows.values()]))


def report(title: str, rows: dict, ks=(1, 5), log=print) -> None:
    log(f"\n{title}")
    head = "".join(f"  TLP top-{k}  random top-{k}" for k in ks)
    log(f"  {'workload':28s} {'n':>4s}{head}")
    for name, r in rows.items():
        cols = "".join(f"  {r[f'top{k}']:10.3f}  {r[f'random_top{k}']:13.3f}" for k in ks)
        log(f"  {name:28s} {r['candidates']:4d}{cols}")
    cols = "".join(f"  {_mean(rows, f'top{k}'):10.3f}  {_mean(rows, f'random_top{k}'):13.3f}" for k in ks)
    log(f"  {'mean':28s} {'':4s}{cols}")


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default="build/cost_model_eval/records.db", help="records database (reused if present)")
    ap.add_argument("--out", default="build/cost_model_eval/tlp.pt", help="where to save the pretrained model")
    ap.add_argument("--json", default=None, help="write the numbers here")
    ap.add_argument("--candidates", type=int, default=128, help="candidates measured per workload")
    ap.add_argument("--train", default=",".join(TRAIN), help=f"training workloads, of: {', '.join(TRAIN)}")
    ap.add_argument("--held-out", default=",".join(HELD_OUT), help=f"held-out workloads, of: {', '.join(HELD_OUT)}")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-measure", action="store_true", help="use only the records already in --db")
    ap.add_argument("--loo", action="store_true", help="also leave-one-workload-out over all workloads (slower)")
    args = ap.parse_args(argv)

    from minitc.autotune.cost_model import RandomModel, TLPModel

    train = {n: TRAIN[n] for n in args.train.split(",") if n}
    held = {n: HELD_OUT[n] for n in args.held_out.split(",") if n}
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with Database(args.db) as db:
        if not args.no_measure:
            print(f"measuring into {args.db} ({args.candidates} candidates per workload)")
            generate(db, {**train, **held}, args.candidates, args.seed)
        train_data, held_data = load(db, train), load(db, held)
    measure_s = time.perf_counter() - start

    model = TLPModel(seed=args.seed)
    records = []
    for key, outputs, traces, lat in train_data.values():
        model.register(key, outputs)
        records += [(key, t, ms) for t, ms in zip(traces, lat)]
    print(
        f"\npretraining on {len(records)} records of {len(train_data)} workloads ({model.num_parameters()} parameters)"
    )
    start = time.perf_counter()
    history = model.pretrain(records, epochs=args.epochs)
    pretrain_s = time.perf_counter() - start
    print(f"  {pretrain_s:.1f} s; {history[-1] if history else ''}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)

    zero = evaluate(model, held_data, seed=args.seed)
    report("held-out workloads, zero-shot (pretrained model only)", zero)
    online = evaluate(model, held_data, fit_fraction=0.25, seed=args.seed)
    report("held-out workloads, after fit() on 25% of their records (scored on the other 75%)", online)
    fresh = evaluate(TLPModel(seed=args.seed), held_data, fit_fraction=0.25, seed=args.seed)
    report("same, a fresh (not pretrained) TLPModel", fresh)
    rand = evaluate(RandomModel(seed=args.seed), held_data, seed=args.seed)
    report("RandomModel (one draw, for reference)", rand)

    loo = None
    if args.loo:
        loo = cross_validate({**train_data, **held_data}, args.epochs, args.seed)
        report("leave-one-workload-out over all workloads (zero-shot on the one left out)", loo)

    result = {
        "command": " ".join(
            ["python", "experiments/cost_model_eval.py"] + (argv if argv is not None else sys.argv[1:])
        ),
        "train": list(train),
        "held_out": list(held),
        "records": len(records),
        "parameters": model.num_parameters(),
        "measure_s": measure_s,
        "pretrain_s": pretrain_s,
        "zero_shot": zero,
        "online_25": online,
        "fresh_online_25": fresh,
        "leave_one_out": loo,
        "mean": {
            "zero_shot_top1": _mean(zero, "top1"),
            "zero_shot_top5": _mean(zero, "top5"),
            "online_top1": _mean(online, "top1"),
            "online_top5": _mean(online, "top5"),
            "fresh_online_top1": _mean(fresh, "top1"),
            "fresh_online_top5": _mean(fresh, "top5"),
            "random_top1": _mean(zero, "random_top1"),
            "random_top5": _mean(zero, "random_top5"),
            **(
                {
                    "loo_top1": _mean(loo, "top1"),
                    "loo_top5": _mean(loo, "top5"),
                    "loo_random_top1": _mean(loo, "random_top1"),
                    "loo_random_top5": _mean(loo, "random_top5"),
                }
                if loo
                else {}
            ),
        },
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"\nsaved the model to {args.out}; measuring {measure_s:.0f} s, pretraining {pretrain_s:.0f} s")
    return result


if __name__ == "__main__":
    main()
