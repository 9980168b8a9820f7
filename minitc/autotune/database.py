"""Tuning records in an embedded SQLite database (write-ahead log, one commit per record).

Records are keyed by workload (a structural key, see workload.py), target string and hardware
fingerprint, and hold the trace, the measured latencies, an error (if the candidate failed) and
a timestamp. Each record is committed on its own, so killing a tuning run at any moment loses
nothing already recorded, and running the same command again resumes from the records.

Location: `Database(path)`, else the `MINITC_DB` environment variable, else
`$XDG_CACHE_HOME/minitc/records.db` (`~/.cache/minitc/records.db`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from minitc.errors import MinitcError

APPLICATION_ID = 0x6D746331  # "mtc1": marks the file as a minitc records database
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS workloads (
    key TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    canonical TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload TEXT NOT NULL REFERENCES workloads(key),
    target TEXT NOT NULL,
    hardware TEXT NOT NULL,
    trace TEXT NOT NULL,
    latencies_ms TEXT NOT NULL,
    median_ms REAL,
    error TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_best ON records(workload, target, hardware, median_ms);
"""

# Trials measured per tuning run (a run: one workload, target, machine and search setting; see
# tuner.run_key), so that rerunning an interrupted run measures only what is missing. Created
# in files of either age: older minitc versions ignore the table.
RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    trials INTEGER NOT NULL,
    updated REAL NOT NULL
);
"""


class DatabaseError(MinitcError):
    """The records file is corrupt, foreign, or from an incompatible minitc."""


@dataclass(frozen=True)
class Record:
    workload: str
    target: str
    hardware: str
    trace: str  # the trace as text (JSON now; a tensor-language sentence later)
    latencies_ms: tuple = ()
    median_ms: float | None = None  # None when the candidate failed
    error: str | None = None  # "<kind>: <reason>" when it failed
    created: float = field(default_factory=time.time)
    id: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.median_ms is not None


def default_path() -> Path:
    """The user's records database: $MINITC_DB, else ~/.cache/minitc/records.db. `tc.tune` and
    the command line write there by default; builds read it only when asked (`records`)."""
    env = os.environ.get("MINITC_DB")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "minitc" / "records.db"


_APPLIED: contextvars.ContextVar = contextvars.ContextVar("minitc_records", default=None)


@contextlib.contextmanager
def records(db=None):
    """`with tc.records(DB):` builds of output tensors inside the block (tc.build, tc.lower,
    tc.codegen, tc.compile) use the best program of the records database `db` (default: the
    user's, default_path()) where it has one for the workload on this machine. Outside such a
    block, and without `db=`, a build is the template's: the same code on every machine,
    whatever was tuned there (TVM's ApplyHistoryBest)."""
    token = _APPLIED.set(db if isinstance(db, RecordsDatabase) else Path(db) if db is not None else default_path())
    try:
        yield _APPLIED.get()
    finally:
        _APPLIED.reset(token)


def applied_records(db=None):
    """The records database a build reads: `db` when given (a path or a RecordsDatabase;
    False: none), else that of the innermost `records` block, else None."""
    if db is False:
        return None
    if db is not None:
        return db if isinstance(db, RecordsDatabase) else Path(db)
    return _APPLIED.get()


class RecordsDatabase:
    """Where tuning records live: the tuner's plug point for storage (MetaSchedule's Database).

    The contract: `add_workload(key, description, form)` once per workload; `add(record,
    run=None)` appends a Record (with `run`, it also counts one trial of that run, atomically)
    and returns its id; `records(workload, target=None, hardware=None)` lists a workload's
    records oldest first; `run_trials(run)`, `workloads()` [(key, description)], `canonical(key)`
    (the stored form, or None) and `len()`. From these the base class derives `programs` (each
    distinct trace's latest record) and `best` (the k fastest that succeeded); a subclass may
    answer them faster. `close()` ends it; it is a context manager. `Database` keeps records in
    an SQLite file, `MemoryDatabase` in the process. `tc.tune(C, db=...)` and
    `tc.build(C, db=...)` take any subclass."""

    def add_workload(self, key: str, description: str, canonical) -> None:
        raise NotImplementedError

    def add(self, record: Record, run: str | None = None) -> int:
        raise NotImplementedError

    def records(self, workload: str, target: str | None = None, hardware: str | None = None) -> list:
        raise NotImplementedError

    def run_trials(self, run: str) -> int:
        raise NotImplementedError

    def workloads(self) -> list:
        raise NotImplementedError

    def canonical(self, workload: str):
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def programs(self, workload: str, target: str | None = None, hardware: str | None = None) -> list:
        """The latest record of every distinct program (trace) of a workload, oldest first: a
        trace measured again (the tuner re-measures its finalists) counts with its latest."""
        latest = {}
        for r in self.records(workload, target, hardware):
            latest[(r.target, r.hardware, r.trace)] = r
        return sorted(latest.values(), key=lambda r: r.id if r.id is not None else r.created)

    def best(self, workload: str, target: str, hardware: str | None = None, k: int = 1) -> list:
        """The k fastest programs whose latest measurement succeeded, fastest first."""
        ok = [r for r in self.programs(workload, target, hardware) if r.median_ms is not None and r.error is None]
        return sorted(ok, key=lambda r: r.median_ms)[:k]

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MemoryDatabase(RecordsDatabase):
    """Records kept in this process only: for experiments and tests that should leave no file."""

    def __init__(self):
        self._records: list = []
        self._workloads: dict = {}
        self._runs: dict = {}

    def add_workload(self, key: str, description: str, canonical) -> None:
        self._workloads.setdefault(key, (description, canonical))

    def add(self, record: Record, run: str | None = None) -> int:
        rid = len(self._records) + 1
        self._records.append(replace(record, id=rid))
        if run is not None:
            self._runs[run] = self._runs.get(run, 0) + 1
        return rid

    def records(self, workload: str, target: str | None = None, hardware: str | None = None) -> list:
        return [
            r
            for r in self._records
            if r.workload == workload and target in (None, r.target) and hardware in (None, r.hardware)
        ]

    def run_trials(self, run: str) -> int:
        return self._runs.get(run, 0)

    def workloads(self) -> list:
        return [(k, d) for k, (d, _) in self._workloads.items()]

    def canonical(self, workload: str):
        entry = self._workloads.get(workload)
        return entry[1] if entry else None

    def __len__(self) -> int:
        return len(self._records)


class Database(RecordsDatabase):
    """A tuning-records database in an SQLite file; safe to use from several processes at once."""

    def __init__(self, path=None):
        self.path = Path(path) if path is not None else default_path()
        if self.path.is_dir():
            raise DatabaseError(f"{self.path} is a directory, not a records file; name a file in it instead")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DatabaseError(
                f"cannot create the folder of the records database {self.path} ({e.strerror}); "
                "pass a path in a writable folder"
            ) from None
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self._check_and_init()
        except sqlite3.OperationalError as e:
            raise DatabaseError(
                f"cannot open the records database {self.path} ({e}); check that the file and its folder are "
                "writable, or pass another path"
            ) from None
        except sqlite3.DatabaseError as e:
            raise DatabaseError(
                f"{self.path} is not a usable minitc records database ({e}); move it away or pass another path"
            ) from None

    def _check_and_init(self) -> None:
        c = self.conn
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id != APPLICATION_ID and tables:
            raise DatabaseError(
                f"{self.path} is an SQLite file of another application (tables: {', '.join(sorted(tables))}), "
                "not minitc records"
            )
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if tables and version != SCHEMA_VERSION:
            raise DatabaseError(
                f"{self.path} has records schema version {version}; this minitc reads version {SCHEMA_VERSION}"
            )
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")  # durable against a killed process in WAL mode
        if not tables:
            c.executescript(
                f"BEGIN; PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={SCHEMA_VERSION};{SCHEMA} COMMIT;"
            )
        c.executescript(RUNS)
        check = c.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise DatabaseError(f"{self.path} is damaged (SQLite: {check}); move it away or pass another path")

    # -- writing -----------------------------------------------------------------------------
    def add_workload(self, key: str, description: str, canonical) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
            (key, description, json.dumps(canonical), time.time()),
        )

    def add(self, record: Record, run: str | None = None) -> int:
        """Commit one record; returns its id. With `run` (a run key), the record counts as one
        trial of that run, in the same transaction, so the count never disagrees with the records."""
        row = (
            record.workload,
            record.target,
            record.hardware,
            record.trace,
            json.dumps(list(record.latencies_ms)),
            record.median_ms,
            record.error,
            record.created,
        )
        insert = (
            "INSERT INTO records (workload, target, hardware, trace, latencies_ms, median_ms, error, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        )
        if run is None:
            return self.conn.execute(insert, row).lastrowid
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            rid = self.conn.execute(insert, row).lastrowid
            self.conn.execute(
                "INSERT INTO runs VALUES (?, 1, ?) ON CONFLICT(key) DO UPDATE SET trials = trials + 1, updated = ?",
                (run, time.time(), time.time()),
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return rid

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def _where(workload: str, target: str | None, hardware: str | None) -> tuple:
        where, args = "workload = ?", [workload]
        if target is not None:
            where, args = where + " AND target = ?", args + [target]
        if hardware is not None:
            where, args = where + " AND hardware = ?", args + [hardware]
        return where, args

    def records(self, workload: str, target: str | None = None, hardware: str | None = None) -> list:
        """All records of a workload (optionally for one target / hardware), oldest first."""
        where, args = self._where(workload, target, hardware)
        return [self._record(r) for r in self.conn.execute(f"SELECT * FROM records WHERE {where} ORDER BY id", args)]

    # A trace measured more than once (the tuner re-measures its finalists) counts with its
    # latest measurement only: the rows below are each program's latest record.
    _LATEST = (
        "SELECT * FROM records WHERE id IN (SELECT MAX(id) FROM records WHERE {} GROUP BY target, hardware, trace)"
    )

    def programs(self, workload: str, target: str | None = None, hardware: str | None = None) -> list:
        """The latest record of every distinct program (trace) of a workload, oldest first."""
        where, args = self._where(workload, target, hardware)
        return [self._record(r) for r in self.conn.execute(self._LATEST.format(where) + " ORDER BY id", args)]

    def best(self, workload: str, target: str, hardware: str | None = None, k: int = 1) -> list:
        """The k fastest programs whose latest measurement succeeded, fastest first."""
        where, args = self._where(workload, target, hardware)
        sql = self._LATEST.format(where) + " AND median_ms IS NOT NULL AND error IS NULL ORDER BY median_ms LIMIT ?"
        return [self._record(r) for r in self.conn.execute(sql, args + [k])]

    def run_trials(self, run: str) -> int:
        """Trials recorded so far under a run key (0 for a run never started)."""
        row = self.conn.execute("SELECT trials FROM runs WHERE key = ?", (run,)).fetchone()
        return row[0] if row else 0

    def workloads(self) -> list:
        return [(k, d) for k, d in self.conn.execute("SELECT key, description FROM workloads ORDER BY created")]

    def canonical(self, workload: str):
        """The canonical form stored for a workload key (workload_key.canonical, with attrs since
        workloads were stored with them), or None for a key the database does not hold;
        workload_decode.decode turns it back into tensors."""
        row = self.conn.execute("SELECT canonical FROM workloads WHERE key = ?", (workload,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as e:
            raise DatabaseError(f"{self.path}: the canonical form of workload {workload} is not JSON: {e}") from None

    def __len__(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    @staticmethod
    def _record(row) -> Record:
        rid, workload, target, hardware, trace, lat, median, error, created = row
        return Record(workload, target, hardware, trace, tuple(json.loads(lat)), median, error, created, rid)

    def close(self) -> None:
        self.conn.close()
