"""Worst-case error of the vector math (backends/llvm/vecmath.py) over a dense sweep:

    python examples/vecmath_accuracy.py            # ~1 minute, ~3 GB of memory

float32: every 61st bit pattern of the finite floats, both signs (70M inputs); float64: 9M
random inputs over the whole range plus [-5, 5] and near 0. References: float64 numpy (and
torch.special.erf) for float32 data, long double numpy for float64 data. Errors are in ulps of
the correctly rounded result (erf: also absolute); non-finite results must match exactly.
"""

import numpy as np
import torch

import minitc as tc
from minitc.expr import call


def kernel(name, n, dtype):
    X = tc.placeholder((n,), dtype, name="X")
    Y = tc.compute((n,), lambda i: call(name, X[i]), name="Y")
    s = tc.Schedule(Y)
    (i,) = s.loops(Y)
    s.vectorize(s.split(i, factor=8)[1])
    return tc.build(s)


def reference(name, x):
    with np.errstate(all="ignore"):
        if name == "erf":
            return torch.special.erf(torch.from_numpy(x.astype(np.float64))).numpy()
        w = x.astype(np.float64 if x.dtype == np.float32 else np.longdouble)
        return {"exp": np.exp, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh}[name](w)


def main():
    pos = np.arange(0, 0x7F800000, 61, dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(1)
    inputs = {
        "float32": np.concatenate([pos, -pos]),
        "float64": np.concatenate(
            [rng.uniform(-750, 750, 4_000_000), rng.uniform(-5, 5, 4_000_000), rng.standard_normal(1_000_000) * 1e-3]
        ),
    }
    for dtype, x in inputs.items():
        for name in ("exp", "sigmoid", "tanh", "erf"):
            if name == "erf" and dtype == "float64":
                continue  # libm erf
            y = kernel(name, len(x), dtype)(x)
            ref = reference(name, x)
            with np.errstate(all="ignore"):
                rounded = ref.astype(dtype)
                ok = np.isfinite(rounded)
                spacing = np.spacing(np.abs(rounded[ok])).astype(np.float64)
                spacing[spacing == 0] = np.finfo(dtype).smallest_subnormal
                err = np.abs(y[ok].astype(np.float64) - ref[ok].astype(np.float64))
                ulp = err / spacing
            bad = ~ok & ~((y == rounded) | (np.isnan(y) & np.isnan(rounded)))
            w = int(np.argmax(ulp))
            print(
                f"{dtype} {name:8s} {len(x):9d} inputs: max {ulp[w]:.3f} ulp (x = {x[ok][w]!r}), "
                f"max abs error {err[np.abs(ref[ok]) <= 1].max():.3g} where |f| <= 1, "
                f"non-finite mismatches {int(bad.sum())}"
            )


if __name__ == "__main__":
    main()
