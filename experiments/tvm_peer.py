"""The outside peer: Apache TVM 0.27 MetaSchedule against minitc's `tlm` strategy on matmul
512³, both tuned on this machine and their kernels timed side by side with numpy's in one
process.

TVM is not a dependency of minitc. Install it in an environment of its own (same Python) and
put its packages on the path:

    python -m venv /tmp/tvmenv
    /tmp/tvmenv/bin/pip install apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 xgboost psutil cloudpickle
    TVM_NUM_THREADS=2 PYTHONPATH=/tmp/tvmenv/lib/python3.11/site-packages \\
        python experiments/tvm_peer.py --json experiments/results/tvm-peer-znver2.json

(newer apache-tvm-ffi releases segfault in `save_json`; xgboost, psutil and cloudpickle are
MetaSchedule's undeclared dependencies). TVM tunes 256 trials, about 5 minutes on 2 cores;
`--tvm-work DIR --tvm-seconds S` reuses an earlier tuning database instead. minitc tunes with
its defaults except `template_first=False` (TVM has no hand template), once per budget.

Timing: rounds in rotated order; before each system's samples the script sleeps 0.3 s,
because TVM's and OpenBLAS's worker threads spin for a while after a call and slow whatever
runs next (without the pause, numpy measured 1.87 ms instead of 1.42).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

N = 512


def tune_tvm(trials: int, work: str | None, seconds: float | None):
    """(callable on numpy arrays, tuning seconds) of MetaSchedule's best matmul."""
    import tvm
    import tvm.s_tir.meta_schedule as ms
    from tvm import te

    A, B = te.placeholder((N, N), name="A"), te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver2", "num-cores": os.cpu_count()})
    start = time.perf_counter()
    if work:
        db = ms.database.JSONDatabase(work_dir=work)
    else:
        work = tempfile.mkdtemp(prefix="tvm-ms-")
        # the default 30 s build timeout fails every candidate: each builder process first spends
        # about a minute importing tensor intrinsics
        db = ms.tune_tir(
            func,
            target,
            work,
            max_trials_global=trials,
            num_trials_per_iter=64,
            builder=ms.builder.LocalBuilder(timeout_sec=600),
            seed=0,
        )
        seconds = time.perf_counter() - start
        print(f"TVM: {trials} trials in {seconds:.0f} s (database in {work})", flush=True)
    kernel = tvm.compile(ms.tir_integration.compile_tir(db, func, target).mod, target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((N, N), np.float32), dev)

    def call(a, b):
        kernel(a, b, out)
        return out

    return call, lambda x: tvm.runtime.tensor(x, dev), seconds


def tune_minitc(trials: int):
    """(kernel, tuning seconds) of `tc.tune` with the tlm strategy and `trials` programs."""
    import minitc as tc

    A, B = tc.placeholder((N, N), name="A"), tc.placeholder((N, N), name="B")
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        r = tc.tune(tc.ops.matmul(A, B), trials=trials, db=os.path.join(d, "r.db"), template_first=False, seed=0)
        seconds = time.perf_counter() - start
    print(f"minitc TLM: {trials} programs in {seconds:.1f} s", flush=True)
    return r.kernel, seconds


def side_by_side(calls: dict, rounds: int = 15, number: int = 20) -> dict:
    """Median ms per call of each entry of {name: zero-argument callable}."""
    samples = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(0.3)  # other systems' spinning threads go idle
            for _ in range(3):
                calls[name]()
            start = time.perf_counter()
            for _ in range(number):
                calls[name]()
            samples[name].append((time.perf_counter() - start) / number * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=256, help="TVM's trials")
    ap.add_argument("--tlm", default="10,64", help="minitc's budgets (programs measured)")
    ap.add_argument("--tvm-work", help="reuse this MetaSchedule work directory instead of tuning")
    ap.add_argument("--tvm-seconds", type=float, help="the tuning time of --tvm-work's run")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.tvm_work and args.tvm_seconds is None:
        ap.error("--tvm-work needs --tvm-seconds (its tuning time)")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((N, N), dtype=np.float32) for _ in range(2))
    expected = a @ b
    tvm_call, to_tvm, tvm_s = tune_tvm(args.trials, args.tvm_work, args.tvm_seconds)
    ta, tb = to_tvm(a), to_tvm(b)
    np.testing.assert_allclose(tvm_call(ta, tb).numpy(), expected, rtol=1e-3, atol=1e-2)
    calls, seconds = (
        {"numpy": lambda: np.matmul(a, b), f"TVM@{args.trials}": lambda: tvm_call(ta, tb)},
        {f"TVM@{args.trials}": tvm_s},
    )
    for trials in (int(t) for t in args.tlm.split(",")):
        kernel, s = tune_minitc(trials)
        np.testing.assert_allclose(kernel(a, b), expected, rtol=1e-3, atol=1e-2)
        calls[f"TLM@{trials}"], seconds[f"TLM@{trials}"] = (lambda k=kernel: k(a, b)), s
    ms = side_by_side(calls)
    peer = ms[f"TVM@{args.trials}"]
    for name, t in ms.items():
        gflops = 2 * N**3 / t / 1e6
        tuned = f", tuned in {seconds[name]:.1f} s" if name in seconds else ""
        print(f"{name:9s} {t:.3f} ms  {gflops:6.1f} GFLOP/s  {peer / t:.2f}x TVM{tuned}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": "python experiments/tvm_peer.py " + " ".join(sys.argv[1:]),
                    "date": time.strftime("%Y-%m-%d"),
                    "median_ms": ms,
                    "tuning_s": seconds,
                    "threads": os.cpu_count(),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
