"""The handwritten suite's operators (benchmarks/handwritten.py, issue 52): each, written with
tc.compute at the suite's sizes, builds as a scheduled program (a template found by its
structure, or the generic default; never the naive nest) whose result matches numpy within the
suite's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.default_schedule import default_schedule
from minitc.benchmarks.handwritten import HANDWRITTEN
from minitc.benchmarks.runner import mismatch


def test_the_suite_has_what_the_issue_asks_for():
    names = {w.name for w in HANDWRITTEN}
    assert len(names) == len(HANDWRITTEN) >= 12
    assert {"gemm-ab", "gemm-atb", "gemm-abt", "heads-scores", "heads-values", "contract-3d", "conv-nhwc"} <= names
    assert {"conv-grouped", "conv-depthwise", "matmul-bias-gelu", "gemm-tall", "gemm-tiny", "variance"} <= names


@pytest.mark.parametrize("w", HANDWRITTEN, ids=lambda w: w.name)
def test_each_default_build_is_scheduled_and_matches_numpy(w):
    out = w.make_minitc()
    assert default_schedule(out, "llvm").trace.steps, "the naive nest"
    inputs = w.make_inputs(np.random.default_rng(0))
    got = tc.build(out, "llvm")(*inputs)
    assert mismatch(got, np.asarray(w.make_numpy()(*inputs), dtype=np.float32), w) is None
