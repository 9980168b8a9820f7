"""Tuning records: round trip, best-of queries, workload keys, corrupt or foreign files, and a
writer killed with SIGKILL mid-run."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import minitc as tc
from minitc.autotune.database import Database, DatabaseError, Record
from minitc.autotune.workload_key import describe, workload_key


def test_records_round_trip_and_best(tmp_path):
    with Database(tmp_path / "r.db") as db:
        db.add_workload("w1", "matmul", ["x"])
        db.add(Record("w1", "llvm", "hw", '[{"kind": "split"}]', (2.0, 2.2, 2.1), 2.1))
        db.add(Record("w1", "llvm", "hw", "[]", (1.0, 1.1), 1.05))
        db.add(Record("w1", "llvm", "hw", '[{"kind": "fuse"}]', (), None, "crash: SIGSEGV"))
        db.add(Record("w1", "llvm -mcpu=znver1", "hw", "[]", (0.5,), 0.5))
        assert len(db) == 4
        best = db.best("w1", "llvm")
        assert [r.median_ms for r in best] == [1.05]
        assert [r.median_ms for r in db.best("w1", "llvm", k=5)] == [1.05, 2.1]
        errors = [r for r in db.records("w1", "llvm") if not r.ok]
        assert errors[0].error == "crash: SIGSEGV"
        assert db.records("w1", "llvm")[0].latencies_ms == (2.0, 2.2, 2.1)
    with Database(tmp_path / "r.db") as db:  # reopening keeps everything
        assert len(db) == 4 and db.workloads() == [("w1", "matmul")]


def test_a_later_measurement_of_the_same_trace_supersedes_the_first(tmp_path):
    with Database(tmp_path / "r.db") as db:
        db.add(Record("w1", "llvm", "hw", "[1]", (1.0,), 1.0))  # a lucky first timing
        db.add(Record("w1", "llvm", "hw", "[2]", (1.5,), 1.5))
        db.add(Record("w1", "llvm", "hw", "[1]", (2.0,), 2.0))  # the re-measure
        assert [r.trace for r in db.best("w1", "llvm", k=5)] == ["[2]", "[1]"]
        db.add(Record("w1", "llvm", "hw", "[2]", (), None, "crash: SIGSEGV"))
        assert [r.trace for r in db.best("w1", "llvm", k=5)] == ["[1]"]
        assert len(db.records("w1")) == 4  # nothing is overwritten


def test_default_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITC_DB", str(tmp_path / "env.db"))
    with Database() as db:
        assert db.path == tmp_path / "env.db"


def test_corrupt_and_foreign_files(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(DatabaseError, match="is not a usable minitc records database"):
        Database(bad)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="another application"):
        Database(foreign)


WRITER = """
import sys
from minitc.autotune.database import Database, Record
db = Database(sys.argv[1])
db.add_workload("w", "d", [])
n = 0
while True:
    db.add(Record("w", "llvm", "hw", "[]", (1.0,), 1.0 + n))
    n += 1
    print(n, flush=True)
"""


def test_sigkill_mid_run_keeps_committed_records(tmp_path):
    path = tmp_path / "kill.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = 0
    deadline = time.time() + 30
    while committed < 200 and time.time() < deadline:
        committed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Database(path) as db:
        assert len(db) >= committed >= 200


def test_workload_key_is_structural():
    def matmul(m, n, names=("A", "B")):
        A = tc.placeholder((m, 8), name=names[0])
        B = tc.placeholder((8, n), name=names[1])
        return tc.ops.matmul(A, B, name="mm")

    assert workload_key(matmul(4, 6)) == workload_key(matmul(4, 6, ("X", "Y")))
    assert workload_key(matmul(4, 6)) != workload_key(matmul(4, 7))
    A = tc.placeholder((4, 8), name="A")
    B = tc.placeholder((8, 6), name="B")
    assert workload_key(tc.ops.matmul(A, B)) != workload_key(tc.ops.add(tc.ops.matmul(A, B), 1.0))
    assert describe(matmul(4, 6)) == "matmul float32[4, 8]x[8, 6]->[4, 6]"
