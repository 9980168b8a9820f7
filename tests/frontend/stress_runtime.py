"""Stress the CPU runtime in one process (issue 55): many compiled models called in a random
interleaving, garbage collected between calls, deleted and compiled again while others stay in
use, optionally from two Python threads at once. Every call's output must equal, bit for bit,
that model's first output (which matched PyTorch eager); a crash kills this process, so run it
in a subprocess (tests/frontend/test_stress.py does):

    MINITC_NUM_THREADS=2 python tests/frontend/stress_runtime.py --calls 3000 --zoo 6
    MINITC_NUM_THREADS=2 python tests/frontend/stress_runtime.py --calls 20000 --zoo all --python-threads 2

Prints one line `stress ok: ...` and exits 0, or names the model whose output changed and
exits 1.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import threading
import time
import warnings

import numpy as np
import torch
from torch import nn

import minitc as tc
from minitc.backends.llvm.runtime import get_num_threads
from minitc.benchmarks.models_systems import compare
from minitc.benchmarks.models_zoo import MODELS, ZOO


class Mlp(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(64, width), nn.GELU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
        )

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class SmallCnn(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, channels, 3, padding=1, groups=channels),
            nn.Conv2d(channels, 2 * channels, 1),
            nn.ReLU(),
        )
        self.head = nn.Linear(2 * channels, 5)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))


class Attention(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.qkv, self.out, self.norm = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), nn.LayerNorm(dim)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return x + self.out(weights @ v)


def _plain(name: str, module: nn.Module, *shape: int):
    def make():
        torch.manual_seed(len(name))
        return module.eval(), (torch.randn(*shape),)

    return make


PLAIN = {
    "mlp-32": _plain("mlp-32", Mlp(32), 4, 64),
    "mlp-256": _plain("mlp-256", Mlp(256), 16, 64),
    "cnn-8": _plain("cnn-8", SmallCnn(8), 1, 3, 24, 24),
    "cnn-32": _plain("cnn-32", SmallCnn(32), 2, 3, 32, 32),
    "attention-64": _plain("attention-64", Attention(64), 1, 32, 64),
}


_COMPILING = threading.Lock()  # the stress is on calls: torch.export is not meant to run in two threads


class Entry:
    """A compiled model, its inputs and the output every call must give."""

    def __init__(self, name: str):
        make = PLAIN.get(name) or MODELS[name].make
        with _COMPILING, warnings.catch_warnings():
            module, self.inputs = make()
            warnings.simplefilter("ignore")
            self.compiled = tc.compile(module, self.inputs, db=False)
        with torch.no_grad():
            eager = module(*self.inputs)
        self.name = name
        self.expected = self.compiled(*self.inputs).numpy().copy()
        _, wrong = compare(self.expected, eager.detach().numpy())
        if wrong is not None:
            fail(f"{name}: first call against eager: {wrong}")

    def call(self) -> None:
        out = self.compiled(*self.inputs).numpy()
        if not np.array_equal(out, self.expected, equal_nan=True):
            diff = int(np.sum(out != self.expected))
            fail(f"{self.name}: output changed between calls ({diff} of {out.size} elements differ)")


def fail(message: str) -> None:
    print(f"stress FAILED: {message}", flush=True)
    sys.stdout.flush()
    import os

    os._exit(1)  # from any thread


def churn(names: list, calls: int, seed: int, counts: dict) -> None:
    """`calls` calls spread at random over models of `names` (four alive at once), garbage
    collected between calls, a model dropped and another compiled every 150 calls."""
    try:
        _churn(names, calls, seed, counts)
    except Exception:  # a thread's exception would otherwise end only that thread
        import traceback

        fail(traceback.format_exc())


def _churn(names: list, calls: int, seed: int, counts: dict) -> None:
    rng = random.Random(seed)
    alive = [Entry(n) for n in rng.sample(names, min(4, len(names)))]
    for k in range(calls):
        rng.choice(alive).call()
        gc.collect(0)
        if k % 10 == 9:
            gc.collect()  # cheap after gc.freeze(): only what was made since
        if k % 150 == 149:
            del alive[rng.randrange(len(alive))]  # dropped while the others stay in use
            gc.collect()
            alive.append(Entry(rng.choice(names)))
            counts["compiled"] += 1
        if k % 400 == 399:  # compiled, called once and dropped at once
            Entry(rng.choice(names)).call()
            counts["compiled"] += 1
        counts["calls"] += 1


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per Python thread")
    parser.add_argument("--zoo", default="6", help="how many zoo models take part (a number or 'all')")
    parser.add_argument("--python-threads", type=int, default=1, help="Python threads calling models at once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    zoo = [n for n in ZOO if MODELS[n].needs is None or _importable(MODELS[n].needs)]
    if args.zoo != "all":
        zoo = rng.sample(zoo, min(int(args.zoo), len(zoo)))
    names = sorted(PLAIN) + zoo
    rng.shuffle(names)
    # each Python thread has models of its own (a compiled model runs one call at a time)
    shares = [names[t :: args.python_threads] for t in range(args.python_threads)]
    counts = {"calls": 0, "compiled": 0}
    gc.freeze()  # torch and the rest stay: a full collection then costs ~15 ms, not ~200
    start = time.perf_counter()
    workers = [
        threading.Thread(target=churn, args=(share, args.calls, args.seed + t, counts), daemon=True)
        for t, share in enumerate(shares)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    threads = get_num_threads()
    print(
        f"stress ok: {counts['calls']} calls of {len(names)} models ({counts['compiled']} compiled again), "
        f"{args.python_threads} Python thread(s), {threads} pool thread(s), {time.perf_counter() - start:.1f} s",
        flush=True,
    )


def _importable(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


if __name__ == "__main__":
    main()
