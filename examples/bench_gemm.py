"""Benchmark the GEMM-family default schedules (minitc/schedules/gemm.py) against numpy and
torch, in one process, interleaved.

    python examples/bench_gemm.py               # 1 and 2 threads (one subprocess each)
    python examples/bench_gemm.py --threads 2 --rounds 9 --only matmul-512

Each library runs in blocks of `--per` timed calls, after a pause (`--pause`, so that the
previous library's idle threads, which busy-wait for up to ~100 ms after a call in OpenBLAS,
OpenMP and MKL, have gone to sleep and do not compete for the cores) and one untimed call; the
figure is the median over `--rounds` blocks.
ratio = min(numpy, torch) ms / minitc ms. The machine may be shared: each block also measures
the CPU time other processes used meanwhile (/proc/stat minus this process) and a block with
more than --max-foreign cores of it is measured again (up to 5 times); "other load" is the
worst value among the blocks kept. The dense baseline is the unfused ops: x @ w.T, + b,
relu (numpy) and torch.nn.functional.linear + relu.
"""
import argparse
import os
import subprocess
import sys
import time

WORKLOADS = ("matmul-512", "matmul-1024", "batch_matmul-12x128x128x64", "dense-128x768x3072-bias-relu")


def child(args):
    n = args.threads
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(n)
    import numpy as np
    import torch

    import minitc as tc

    torch.set_num_threads(n)
    tc.set_num_threads(n)
    rng = np.random.default_rng(0)

    def rand(*shape):
        return rng.standard_normal(shape).astype("float32")

    def busy_jiffies():
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return sum(v) - v[3] - v[4]  # all but idle and iowait

    def block(fn):
        """Median seconds of `--per` calls (at least `--min-block` s in all), and the CPU load
        of other processes meanwhile (cores)."""
        time.sleep(args.pause)
        fn()
        ts, start, busy0, own0 = [], time.perf_counter(), busy_jiffies(), os.times()
        while len(ts) < args.per or time.perf_counter() - start < args.min_block:
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        wall, own1 = time.perf_counter() - start, os.times()
        own = (own1.user + own1.system) - (own0.user + own0.system)
        foreign = max(0.0, (busy_jiffies() - busy0) / os.sysconf("SC_CLK_TCK") - own) / wall
        return float(np.median(ts)), foreign

    def bench(fns):
        """Interleaved blocks; a block during which other processes kept more than
        --max-foreign cores busy is measured again (up to 5 times)."""
        res = {k: [] for k in fns}
        worst = 0.0
        for _ in range(args.rounds):
            for k, fn in fns.items():
                for _ in range(5):
                    sec, foreign = block(fn)
                    if foreign <= args.max_foreign:
                        break
                worst = max(worst, foreign)
                res[k].append(sec * 1e3)
        return {k: float(np.median(v)) for k, v in res.items()}, worst

    for w in args.only or WORKLOADS:
        if w.startswith("matmul"):
            n_ = int(w.split("-")[1])
            A, B = tc.placeholder((n_, n_), name="A"), tc.placeholder((n_, n_), name="B")
            out, ins, flops = tc.ops.matmul(A, B), (rand(n_, n_), rand(n_, n_)), 2 * n_**3
            c = np.empty((n_, n_), "float32")
            tin = [torch.from_numpy(x) for x in ins]
            tout = torch.empty(n_, n_)
            libs = {"numpy": lambda: np.matmul(*ins, out=c), "torch": lambda: torch.matmul(*tin, out=tout)}
        elif w.startswith("batch_matmul"):
            b, m, nn, k = 12, 128, 128, 64
            A, B = tc.placeholder((b, m, k), name="A"), tc.placeholder((b, k, nn), name="B")
            out, ins, flops = tc.ops.batch_matmul(A, B), (rand(b, m, k), rand(b, k, nn)), 2 * b * m * nn * k
            c = np.empty((b, m, nn), "float32")
            tin = [torch.from_numpy(x) for x in ins]
            tout = torch.empty(b, m, nn)
            libs = {"numpy": lambda: np.matmul(*ins, out=c), "torch": lambda: torch.bmm(*tin, out=tout)}
        else:
            m, k, nn = 128, 768, 3072
            X, W, bias = tc.placeholder((m, k), name="X"), tc.placeholder((nn, k), name="W"), tc.placeholder((nn,), name="b")
            out, ins, flops = tc.ops.dense(X, W, bias, activation="relu"), (rand(m, k), rand(nn, k), rand(nn)), 2 * m * nn * k
            x, wt, bb = ins
            tin = [torch.from_numpy(v) for v in ins]
            libs = {
                "numpy": lambda: np.maximum(x @ wt.T + bb, 0),
                "torch": lambda: torch.relu(torch.nn.functional.linear(*tin)),
            }
        f = tc.build(out)
        ref = list(libs.values())[0]()
        got = f(*ins)
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
        res = np.empty_like(got)
        r, foreign = bench({"minitc": lambda: f(*ins, out=res), **libs})
        best = min(r["numpy"], r["torch"])
        print(
            f"| {w} | {n} | {r['minitc']:.3f} | {r['numpy']:.3f} | {r['torch']:.3f} | "
            f"{best / r['minitc']:.2f} | {flops / r['minitc'] / 1e6:.0f} | {foreign:.2f} |",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--per", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.3)
    ap.add_argument("--min-block", type=float, default=0.1)
    ap.add_argument("--max-foreign", type=float, default=0.1)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    if args.threads is not None:
        return child(args)
    print("| workload | threads | minitc ms | numpy ms | torch ms | ratio | minitc GFLOP/s | other load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for n in (1, 2):
        cmd = [sys.executable, __file__, "--threads", str(n), "--rounds", str(args.rounds), "--per", str(args.per),
               "--pause", str(args.pause), "--min-block", str(args.min_block), "--max-foreign", str(args.max_foreign)]
        if args.only:
            cmd += ["--only", *args.only]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
