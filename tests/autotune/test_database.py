"""Tuning records: round trip, best-of queries, workload keys, corrupt or foreign files, paths
that cannot hold a database, the trials counted per tuning run, and a writer killed with
SIGKILL mid-run."""

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


def test_damaged_pages(tmp_path):
    path = tmp_path / "damaged.db"
    with Database(path) as db:
        db.add_workload("w", "d", [])
        for n in range(300):
            db.add(Record("w", "llvm", "hw", "t" * 200 + str(n), (1.0,), 1.0))
    with open(path, "r+b") as f:
        for page in (2, 3, 5, 10):  # b-tree page headers
            f.seek(4096 * page)
            f.write(b"\x0d" + b"\xff" * 7)
    with pytest.raises(DatabaseError, match="damaged.db is (not a usable minitc records database|damaged)"):
        Database(path)


def test_paths_that_cannot_hold_a_database(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(DatabaseError, match="cannot create the folder of the records database .*pass a path"):
        Database(a_file / "r.db")
    with pytest.raises(DatabaseError, match="cannot create the folder"):
        Database("/proc/nope/r.db")
    with pytest.raises(DatabaseError, match="is a directory, not a records file"):
        Database(tmp_path)


def test_trials_are_counted_per_run(tmp_path):
    with Database(tmp_path / "r.db") as db:
        db.add_workload("w", "d", [])
        assert db.run_trials("run-a") == 0
        for n in range(3):
            db.add(Record("w", "llvm", "hw", f"[{n}]", (1.0,), 1.0), run="run-a")
        db.add(Record("w", "llvm", "hw", "[9]", (), None, "crash: SIGSEGV"), run="run-b")  # errors count too
        db.add(Record("w", "llvm", "hw", "[0]", (1.1,), 1.1))  # a re-measure belongs to no run
        assert (db.run_trials("run-a"), db.run_trials("run-b"), len(db)) == (3, 1, 5)
    with Database(tmp_path / "r.db") as db:  # kept across processes
        assert db.run_trials("run-a") == 3


def test_a_failed_insert_does_not_count(tmp_path):
    with Database(tmp_path / "r.db") as db:
        with pytest.raises(sqlite3.IntegrityError):
            db.add(Record("w", "llvm", "hw", None, (1.0,), 1.0), run="run-a")  # trace NOT NULL
        assert db.run_trials("run-a") == 0 and len(db) == 0
        db.add(Record("w", "llvm", "hw", "[]", (1.0,), 1.0), run="run-a")  # the connection still works
        assert db.run_trials("run-a") == 1


def test_files_without_the_runs_table_get_it(tmp_path):
    path = tmp_path / "old.db"
    with Database(path) as db:
        db.add_workload("w", "d", [])
        db.add(Record("w", "llvm", "hw", "[]", (1.0,), 1.0))
        db.conn.execute("DROP TABLE runs")  # as an older minitc wrote it
    with Database(path) as db:
        assert db.run_trials("any") == 0 and len(db) == 1


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
