"""Benchmark the conv2d template (`tc.build(Y)`) against torch (oneDNN) and numpy (im2col +
matmul) on the `conv-resnet` workload: N=1, C=64, 56x56, K=64, 3x3, stride 1, pad 1, float32.

    python examples/bench_conv.py                         # default schedule, 1 and 2 threads
    python examples/bench_conv.py --params kb=4,ohb=3     # template with some sizes overridden
    python examples/bench_conv.py --rounds 15 --threads 2

All contenders run interleaved in the same process, round after round (who goes first
rotates); each round times every contender `--calls` times after 0.5 s of untimed calls and
keeps the median; the report is the median over rounds, and the ratio best-of(torch, numpy) /
minitc per thread count. `python -m benchmarks --workloads conv-resnet` (the benchmark runner)
times the same default schedule, with a shorter settling time.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import threadpoolctl
import torch

import minitc as tc
from minitc.target import parse_target
from minitc.templates import TEMPLATES, load_templates

SHAPE = dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1)


def im2col_conv(x, w, pad):
    """numpy reference: pad, gather the 3x3 windows (im2col), one BLAS matmul."""
    K, C, R, S = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (R, S), axis=(2, 3))  # N C OH OW R S
    n, _, oh, ow = win.shape[:4]
    cols = win[0].transpose(0, 3, 4, 1, 2).reshape(C * R * S, oh * ow)
    return (w.reshape(K, -1) @ cols).reshape(1, K, oh, ow)


def median_ms(fn, calls, settle_s=0.5):
    """Median of `calls` timed calls, after `settle_s` of untimed ones: the previous library's
    worker threads keep spinning on the other core after its last call (OpenBLAS for about
    130 ms, torch's OpenMP about 20 ms on this machine, sometimes longer), and minitc's
    second thread runs at half speed until they stop."""
    start = time.perf_counter()
    while time.perf_counter() - start < settle_s:
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def parse_params(text):
    params = {}
    for item in filter(None, (text or "").split(",")):
        key, value = item.split("=")
        flags = {"True": True, "False": False}
        params[key] = int(value) if value.lstrip("-").isdigit() else flags.get(value, value)
    return params


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="", help="template sizes, e.g. kb=4,ohb=3 (others: defaults)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()

    p = SHAPE
    X = tc.placeholder((p["N"], p["C"], p["H"], p["W"]), name="X")
    W = tc.placeholder((p["K"], p["C"], p["R"], p["S"]), name="W")
    Y = tc.ops.conv2d(X, W, stride=p["stride"], padding=p["pad"])
    if args.params:
        from minitc.templates import DEFAULTS

        load_templates()
        target = parse_target("llvm")
        s = tc.Schedule(Y)
        params = dict(DEFAULTS["conv2d"](s, "conv2d", target), **parse_params(args.params))
        TEMPLATES["conv2d"](s, "conv2d", target, **params)
        f = tc.build(s)
    else:
        f = tc.build(Y)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((p["N"], p["C"], p["H"], p["W"])).astype("float32")
    w = rng.standard_normal((p["K"], p["C"], p["R"], p["S"])).astype("float32")
    y = f(x, w)
    np.testing.assert_allclose(y, im2col_conv(x, w, p["pad"]), rtol=1e-3, atol=1e-3)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    flops = 2 * p["N"] * p["K"] * y.shape[2] * y.shape[3] * p["C"] * p["R"] * p["S"]
    contenders = {
        "minitc": lambda: f(x, w, out=y),
        "torch": lambda: torch.nn.functional.conv2d(tx, tw, stride=p["stride"], padding=p["pad"]),
        "numpy": lambda: im2col_conv(x, w, p["pad"]),
    }
    print(f"conv-resnet {p}, float32; median over {args.rounds} rounds of the median of {args.calls} calls")
    for nt in map(int, args.threads.split(",")):
        tc.set_num_threads(nt)
        torch.set_num_threads(nt)
        with threadpoolctl.threadpool_limits(nt):
            samples = {name: [] for name in contenders}
            names = list(contenders)
            for r in range(args.rounds):
                for name in names[r % 3 :] + names[: r % 3]:
                    samples[name].append(median_ms(contenders[name], args.calls))
        ms = {name: float(np.median(v)) for name, v in samples.items()}
        best = min(ms["torch"], ms["numpy"])
        cells = "  ".join(f"{n} {m:6.3f} ms ({flops / m / 1e6:5.1f} GFLOP/s)" for n, m in ms.items())
        print(f"threads={nt}: {cells}  ratio best(torch,numpy)/minitc = {best / ms['minitc']:.2f}")


if __name__ == "__main__":
    main()
