"""A minitc kernel followed by a PyTorch op, inside a compiled model, against the two alone:
the hand-off between minitc's thread pool and torch's OpenMP threads must cost nothing
(docs/models.md, Runtime). Alternating rounds in one process; medians of each round's median.

    python experiments/pool_handoff.py [ROUNDS]

    alone:    the minitc model without the torch op, and the torch op on its own (at torch's
              2 threads, and at the 1 thread a plan gives it)
    together: the compiled model whose plan runs the minitc dense layer, then torch's cumsum
    torch threads: the same plan with the fallback on torch's own thread count (what
    one_torch_thread prevents: its OpenMP workers spin on after the call, onto minitc's cores)
"""

import sys
import time
import warnings

import numpy as np
import torch
from torch import nn

import minitc as tc
from minitc.frontend import runtime


class DenseThen(nn.Module):
    def __init__(self, torch_op: bool):
        super().__init__()
        self.fc, self.torch_op = nn.Linear(512, 512), torch_op

    def forward(self, x):
        y = torch.relu(self.fc(x))
        return torch.cumsum(y, dim=1) if self.torch_op else y  # cumsum: no minitc kernel


def _median_ms(fn, calls=200) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main(rounds: int = 15) -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    x = torch.randn(256, 512)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = tc.compile(DenseThen(True).eval(), (x,))
        alone = tc.compile(DenseThen(False).eval(), (x,))
    y = alone(x)
    keep = runtime.one_torch_thread

    def torch_threads_plan():
        runtime.one_torch_thread = lambda active: keep(False)
        try:
            both(x)
        finally:
            runtime.one_torch_thread = keep

    def one_thread_cumsum():
        torch.set_num_threads(1)
        torch.cumsum(y, dim=1)
        torch.set_num_threads(2)

    cases = {
        "minitc dense alone": lambda: alone(x),
        "torch cumsum alone": lambda: torch.cumsum(y, dim=1),
        "torch cumsum, 1 thread": one_thread_cumsum,
        "together": lambda: both(x),
        "together, torch threads": torch_threads_plan,
    }
    with torch.no_grad():
        samples = {name: [] for name in cases}
        for _ in range(rounds):
            for name, fn in cases.items():
                samples[name].append(_median_ms(fn))
    ms = {name: float(np.median(v)) for name, v in samples.items()}
    for name, value in ms.items():
        print(f"{name:26s} {value:.4f} ms")
    dense = ms["minitc dense alone"]
    print(f"sum of the two alone       {dense + ms['torch cumsum alone']:.4f} ms")
    print(f"the same, torch on 1 thread {dense + ms['torch cumsum, 1 thread']:.4f} ms")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
