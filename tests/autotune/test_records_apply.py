"""Tuning records apply when asked (issue 43, item 5): `tc.build(C)` is the template on every
machine; `db=` or a `with tc.records(...)` block asks for a database's best program."""

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.tuner import tuned_schedule
from minitc.templates import template_schedule


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A matmul and a database whose best program is not the template (the template is not
    measured: every candidate is a random draw)."""
    db = str(tmp_path_factory.mktemp("records") / "r.db")
    A, B = tc.placeholder((24, 40), name="A"), tc.placeholder((40, 32), name="B")
    C = tc.ops.matmul(A, B)
    tc.tune(C, trials=4, strategy="random", db=db, template_first=False)
    best = tuned_schedule([C], "llvm", db)
    assert best is not None and best.trace.to_json() != template_schedule(C).trace.to_json()
    return C, db, str(tc.lower(best)), str(tc.lower(template_schedule(C)))


def test_a_build_without_records_is_the_template_even_where_the_users_database_has_some(tuned, monkeypatch):
    C, db, best, template = tuned
    monkeypatch.setenv("MINITC_DB", db)  # the user's database holds a tuned program
    assert str(tc.lower(C, target="llvm")) == template


def test_db_or_a_records_block_asks_for_the_best_program(tuned, monkeypatch):
    C, db, best, template = tuned
    assert str(tc.lower(C, target="llvm", db=db)) == best
    with tc.records(db):
        assert str(tc.lower(C, target="llvm")) == best
        assert str(tc.lower(C, target="llvm", db=False)) == template  # off, even in a block
    assert str(tc.lower(C, target="llvm")) == template  # the block is over
    monkeypatch.setenv("MINITC_DB", db)
    with tc.records():  # the user's database
        f = tc.build(C)
        assert str(f.kernel) == best
    a, b = np.ones((24, 40), "float32"), np.ones((40, 32), "float32")
    np.testing.assert_allclose(f(a, b), a @ b)


def test_a_gpu_probe_switch_turned_off_keys_records_apart(monkeypatch):
    """MINITC_GPU_* switches change the generated code, so the records they make are another
    machine's as far as lookups go; each switch is in one table and documented."""
    from pathlib import Path

    from minitc.lowering.probes import PROBE_SWITCHES, switch_on, switches_off
    from minitc.target import hardware_fingerprint

    plain = hardware_fingerprint("cuda-sim")
    monkeypatch.setenv("MINITC_GPU_UNROLL_K", "0")
    assert switches_off() == ["MINITC_GPU_UNROLL_K"] and not switch_on("MINITC_GPU_UNROLL_K")
    assert hardware_fingerprint("cuda-sim") == plain + "-unroll_k-off"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    assert all(f"`{name}" in docs for name in PROBE_SWITCHES)
    with pytest.raises(KeyError, match="unknown probe switch"):
        switch_on("MINITC_GPU_TYPO")


def test_a_database_of_ones_own_plugs_into_tuning_and_building():
    """Any RecordsDatabase subclass serves tc.tune and tc.build; MemoryDatabase keeps records in
    the process and agrees with the SQLite Database on the best program."""
    from minitc.autotune.database import Database, MemoryDatabase, Record, RecordsDatabase

    A, B = tc.placeholder((16, 24), name="A"), tc.placeholder((24, 32), name="B")
    C = tc.ops.matmul(A, B)
    memory = MemoryDatabase()
    result = tc.tune(C, trials=4, strategy="random", db=memory, template_first=False)
    assert isinstance(memory, RecordsDatabase) and len(memory) >= 4 and memory.workloads()
    built = tc.build(C, db=memory)
    with tc.records(memory):
        assert str(tc.lower(C, target="llvm")) == str(built.kernel)
    a, b = np.ones((16, 24), "float32"), np.ones((24, 32), "float32")
    np.testing.assert_allclose(built(a, b), a @ b)
    assert result.best_trace is not None
    key = next(iter(k for k, _ in memory.workloads()))
    rows = [Record(key, "t", "h", "x", (1.0,), 2.0), Record(key, "t", "h", "y", (1.0,), 1.0)]
    rows.append(Record(key, "t", "h", "x", (0.5,), 0.5))  # re-measured: its latest counts
    with Database(":memory:") as sql:
        for store in (MemoryDatabase(), sql):
            for r in rows:
                store.add(r)
            assert [r.trace for r in store.best(key, "t", "h", k=2)] == ["x", "y"]
            assert [r.median_ms for r in store.programs(key, "t", "h")] == [1.0, 0.5]
