"""Probe the GPU templates with cross-thread reductions (minitc/templates/gpu/reduce.py) on a
real GPU against torch. Needs CuPy and torch with CUDA; well under 60 s on an H100.

    python experiments/gpu_reductions_probe.py [--quick]

1. softmax 49152x512, layer_norm 4096x768 and 49152x512, row sum 4096x4096 with the default
   templates (one launch each): checked against float64 torch, then timed against torch with
   CUDA events (medians, L2 flushed; minitc/timing.Timer), with the GB/s of one read
   of the input and one write of the output.
2. softmax 49152x512 with other (threads, rows) template parameters, to see which pay.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import minitc as tc
from minitc.schedule import Schedule
from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, load_gpu_templates
from minitc.timing import Timer

SOFTMAX_VARIANTS = [(32, 4), (32, 8), (64, 2), (64, 4), (128, 1), (128, 2), (256, 1), (512, 1)]


def workloads(torch, F):
    """name -> (minitc output tensor, torch function, input shapes)."""
    out = {}
    X = tc.placeholder((49152, 512), name="X")
    out["softmax 49152x512"] = (tc.ops.softmax(X), lambda x: torch.softmax(x, -1), [(49152, 512)])
    for rows, d in ((4096, 768), (49152, 512)):
        X, g, b = tc.placeholder((rows, d), name="X"), tc.placeholder((d,), name="g"), tc.placeholder((d,), name="b")
        out[f"layer_norm {rows}x{d}"] = (
            tc.ops.layer_norm(X, g, b),
            lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, 1e-5),
            [(rows, d), (d,), (d,)],
        )
    X = tc.placeholder((4096, 4096), name="X")
    out["row sum 4096x4096"] = (tc.ops.sum(X, axis=1), lambda x: x.sum(1), [(4096, 4096)])
    return out


def max_rel_err(y, ref) -> float:
    y, ref = y.double(), ref.double()
    return float((y - ref).abs().max() / max(1.0, float(ref.abs().max())))


def variant(out, tag: str, **params):
    load_gpu_templates()
    s = Schedule(out)
    GPU_TEMPLATES[tag](s, s.state.outputs[0], None, **params)
    bind_unbound(s)
    return tc.build(s, target="cuda", db=False)


def main(quick: bool = False) -> None:
    import torch
    import torch.nn.functional as F

    t0 = time.perf_counter()
    print(f"device: {torch.cuda.get_device_name()}")
    timer = Timer(torch)
    budget = 0.3 if quick else 1.0
    rng = np.random.default_rng(0)
    print(f"\n{'workload':<22} {'minitc ms':>10} {'torch ms':>9} {'vs torch':>8} {'GB/s':>7} {'rel err':>9}  launches")
    for name, (out, torch_fn, shapes) in workloads(torch, F).items():
        args = [torch.from_numpy(rng.standard_normal(s).astype("float32")).cuda() for s in shapes]
        f = tc.build(out, target="cuda", db=False)
        y = f(*args)
        err = max_rel_err(y, torch_fn(*(a.double() for a in args)))
        fns = {"minitc": lambda: f(*args, out=y), "torch": lambda: torch_fn(*args)}
        t = timer.measure(fns, repeats=50, budget_s=budget)
        ms, tms = t["minitc"].median, t["torch"].median
        gbytes = (args[0].numel() + y.numel()) * 4 / 1e9
        flag = "" if err < 1e-4 else "  WRONG"
        print(
            f"{name:<22} {ms:>10.4f} {tms:>9.4f} {tms / ms:>7.2f}x {gbytes / ms * 1e3:>7.0f} {err:>9.1e}  "
            f"{len(f.program.launches)}{flag}"
        )

    print("\nsoftmax 49152x512, template parameters:")
    print(f"{'threads x rows':<16} {'ms':>8} {'GB/s':>7}")
    x = torch.randn(49152, 512, device="cuda")
    ref = torch.softmax(x.double(), -1)
    out = tc.ops.softmax(tc.placeholder((49152, 512), name="X"))
    for threads, rows in SOFTMAX_VARIANTS[:3] if quick else SOFTMAX_VARIANTS:
        try:
            f = variant(out, "softmax", threads=threads, rows=rows)
            y = f(x)
            err = max_rel_err(y, ref)
            ms = timer.measure({"v": lambda: f(x, out=y)}, repeats=30, budget_s=0.3)["v"].median
            flag = "" if err < 1e-4 else "  WRONG"
            print(f"{f'{threads} x {rows}':<16} {ms:>8.4f} {2 * x.numel() * 4 / 1e6 / ms:>7.0f}{flag}")
        except Exception as e:  # a variant that fails is a row, not the end of the probe
            print(f"{f'{threads} x {rows}':<16} {type(e).__name__}: {str(e)[:80]}")
    print(f"\nprobe took {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
