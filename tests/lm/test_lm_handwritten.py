"""The decisions of every program the design space offers for an operator written by hand (the
handwritten suite, issue 52: the GEMM template found by its structure, or the generic rules
with their analytical defaults) print as a sentence of the tensor language, parse back, and
replay to the same program; stored as a tuning record, the program is what `tc.build` then
builds."""

from __future__ import annotations

import numpy as np
import pytest
from lm_helpers import check_round_trip, draw

import minitc as tc
from minitc.autotune.database import Database, Record
from minitc.autotune.space import Space
from minitc.autotune.tuner import encode_trace
from minitc.autotune.workload import Workload
from minitc.benchmarks.handwritten import HANDWRITTEN
from minitc.target import hardware_fingerprint

SAMPLES = 6


@pytest.mark.parametrize("w", HANDWRITTEN, ids=lambda w: w.name)
def test_handwritten_decisions_round_trip_and_replay_from_records(w, hw, tmp_path):
    out = w.make_minitc()
    space = Space(out, "llvm")
    first = space.first_program()
    candidates = [first, *draw(space, np.random.default_rng(0), SAMPLES)]
    for c in candidates:
        check_round_trip(space, c, hw)
    workload = Workload(out)
    target = space.target
    with Database(tmp_path / "r.db") as db:
        db.add_workload(workload.key, workload.description, workload.form)
        for n, c in enumerate(candidates):  # the last drawn is the fastest record
            ms = float(len(candidates) - n)
            db.add(Record(workload.key, target.string, hardware_fingerprint(target), encode_trace(c), (ms,), ms))
        built = str(tc.lower(out, target="llvm", db=db))
    assert built == str(tc.lower(candidates[-1].schedule))
