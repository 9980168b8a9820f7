"""Differential fuzzer: random schedules of every operator, built for the CPU, against numpy.

Each case draws an operator (cycling through all of tc.ops), random small inputs and a random
sequence of primitives (split with non-divisible factors and nparts, reorder, fuse, unroll,
parallel, vectorize, compute_at, reverse_compute_at, compute_inline, cache_write, cache_read).
A schedule either raises ScheduleError (primitive or lowering) or builds a kernel that must
match numpy. Every fifth case also runs the reference interpreter on the same IR. A share of the
cases (MINITC_FUZZ_SPECIALS, default 0.35) feeds NaN, +-inf, +-0 and denormals among the inputs:
the kernel must give numpy's special values in the same places.

MINITC_FUZZ_CASES sets the number of cases (default 320); MINITC_FUZZ_SEED the seed. A campaign:
    MINITC_FUZZ_CASES=4000 MINITC_FUZZ_SPECIALS=1 python -m pytest -q -s tests/schedule/test_fuzz.py
"""

import os

import numpy as np
import pytest
from fuzz_schedules import random_schedule, with_special_values

import minitc as tc
from minitc.interp import interpret

CASES = int(os.environ.get("MINITC_FUZZ_CASES", "320"))
SEED = int(os.environ.get("MINITC_FUZZ_SEED", "20261122"))
SPECIALS = float(os.environ.get("MINITC_FUZZ_SPECIALS", "0.35"))
CHUNKS = 8
OPS = sorted(tc.ops.OPS)
stats = {"built": 0, "illegal": 0, "special": 0}
done_chunks: set = set()  # chunks this process ran: the outcome check runs the others itself


def run_case(case: int):
    rng = np.random.default_rng([SEED, case])
    name = OPS[case % len(OPS)]
    size = "tiny" if case % 3 else "small"
    inst = tc.ops.OPS[name].instantiate(size, rng)
    s, _ = random_schedule(inst.output, rng)
    special = rng.random() < SPECIALS
    arrays = with_special_values(inst.arrays, rng) if special else inst.arrays
    args = list(inst.placeholders) + [inst.output]
    try:
        f = tc.build(s, args=args)
    except tc.ScheduleError:
        stats["illegal"] += 1
        return
    with np.errstate(all="ignore"):
        expected = inst.reference(*arrays, **inst.params)
    tol = dict(rtol=1e-3, atol=1e-3) if name in ("gelu", "layer_norm", "softmax") else dict(rtol=2e-4, atol=2e-4)
    context = f"case {case} ({name}{', special values' if special else ''}), trace: {s.trace.to_json()}"
    np.testing.assert_allclose(f(*arrays), expected, err_msg=context, **tol)
    if case % 5 == 0 and size == "tiny":
        out = np.zeros(expected.shape, expected.dtype)
        with np.errstate(all="ignore"):
            interpret(f.kernel, list(arrays) + [out])
        np.testing.assert_allclose(out, expected, err_msg=context, **tol)
    stats["built"] += 1
    stats["special"] += special


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_schedules_match_numpy(chunk):
    run_chunk(chunk)


def run_chunk(chunk: int) -> None:
    for case in range(chunk, CASES, CHUNKS):
        run_case(case)
    done_chunks.add(chunk)


def test_fuzzer_exercised_both_outcomes():
    """The fuzzer must really build kernels and really hit illegal schedules (not all skipped).
    Run alone (-k) or in another process than the cases (xdist), it runs the cases itself."""
    for chunk in sorted(set(range(CHUNKS)) - done_chunks):
        run_chunk(chunk)
    print(
        f"\nfuzz: {CASES} cases, {stats['built']} built and matched numpy ({stats['special']} of them with special"
        f" values), {stats['illegal']} raised ScheduleError"
    )
    assert stats["built"] > CASES // 2
    assert stats["illegal"] > 0
    assert stats["special"] > 0 or SPECIALS == 0
