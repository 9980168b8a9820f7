"""The measurement dataset: every measured program kept in the repository, to train, retrain and
audit the language model (the TenSet idea on a small scale).

    entries = load()                                   # every shard under lm/data, checked
    entries = load(hardware=["znver3-2c-5b998170"])    # one hardware description
    train, test = split_by_hardware(entries, "znver3-2c-5b998170")   # leave one hardware out
    DatasetWriter(DATA_DIR).append([entry, ...])       # a new shard; existing ones are never touched

Shards are gzip-compressed JSON lines, `lm/data/<hardware fingerprint>-<UTC time>-<random>.jsonl.gz`.
A writer only ever creates new shards and appends gzip members to the ones it created, so a
committed shard never changes: git sees added files only, and history never stores a rewritten
binary. One line is one measured program (schema 1):

    {"schema": 1,
     "workload": {"key": "acc489bf...", "name": "matmul-1024", "description": "matmul float32[...]..."},
     "target": "llvm -mcpu=znver3 -num-cores=2",
     "hardware": {"fingerprint": "znver3-2c-5b998170", "tokens": "hardware llvm znver3 cores 2 ..."},
     "sentence": "workload\\n  stage ...\\n=>\\nsketch = template ; ...",
     "latencies_ms": [14.4, 13.5, ...], "median_ms": 13.5, "error": null,
     "date": "2026-11-25T06:23:11Z", "minitc": "0.1.0+g7223574", "source": "minitc lm measure"}

`workload.name` is the `minitc lm workloads` name that rebuilds the workload (null for another
workload), `hardware.tokens` the sentence's own hardware line, `error` "<kind>: <reason>" for a
program that failed (then `median_ms` is null), and `minitc` null where the version that measured
it is unknown (records exported from an older records database).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import secrets
import subprocess
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from minitc.errors import BuildError, MinitcError
from minitc.lm.language import SentenceError, parse
from minitc.target import target_kind

SCHEMA = 1
DATA_DIR = Path(__file__).with_name("data")
SUFFIX = ".jsonl.gz"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
FIELDS = {"schema", "workload", "target", "hardware", "sentence", "latencies_ms", "median_ms", "error", "date"}
FIELDS |= {"minitc", "source"}


class DatasetError(MinitcError):
    """A dataset shard that cannot be read, a malformed or duplicate entry, or a filter that
    matches nothing."""


@dataclass(frozen=True)
class Entry:
    """One measured program of the dataset; `where` is its `shard:line`."""

    workload: str  # the structural workload key (minitc.autotune.workload_key)
    name: str | None  # its `minitc lm workloads` name, if it is one of those
    description: str
    target: str
    fingerprint: str  # minitc.target.hardware_fingerprint of the target measured on
    hardware: str  # the language model's hardware line (the sentence's own)
    sentence: str
    latencies_ms: tuple
    median_ms: float | None
    error: str | None
    date: str
    minitc: str | None
    source: str
    where: str = field(default="", compare=False)
    parsed: object = field(default=None, compare=False, repr=False)  # the Sentence, once checked

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def identity(self) -> tuple:
        """What makes two entries the same measurement: program, workload, target and machine."""
        return (self.workload, self.target, self.fingerprint, self.sentence)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "workload": {"key": self.workload, "name": self.name, "description": self.description},
            "target": self.target,
            "hardware": {"fingerprint": self.fingerprint, "tokens": self.hardware},
            "sentence": self.sentence,
            "latencies_ms": list(self.latencies_ms),
            "median_ms": self.median_ms,
            "error": self.error,
            "date": self.date,
            "minitc": self.minitc,
            "source": self.source,
        }


def iso_date(timestamp: float) -> str:
    """A Unix time as the dataset writes dates: `2026-11-25T06:23:11Z` (UTC)."""
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime(DATE_FORMAT)


def minitc_version() -> str:
    """The installed minitc version, with `+g<commit>` (and `.dirty` for uncommitted changes)
    when it runs from a git checkout: the version number alone does not say which code
    generator measured a program."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("minitc")
    except PackageNotFoundError:
        text = "unknown"
    root = Path(__file__).resolve().parent.parent
    if (root / ".git").exists():
        try:
            commit = subprocess.run(
                ["git", "-C", str(root), "describe", "--always", "--exclude=*", "--dirty=.dirty", "--abbrev=7"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        if commit:
            text += f"+g{commit}"
    return text


def trace_sentence(text: str) -> str | None:
    """The tensor-language sentence a record's trace text holds, if any (lm/plugin.py adds it
    to every record the tuner writes)."""
    data = json.loads(text)
    return data.get("sentence") if isinstance(data, dict) else None


# -- checking -------------------------------------------------------------------------------


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _text(obj: dict, name: str, where: str, nullable: bool = False):
    value = obj.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value:
        kind = "a non-empty string or null" if nullable else "a non-empty string"
        raise DatasetError(f"{where}: field {name!r} must be {kind}, got {value!r}")
    return value


def _object(obj: dict, name: str, keys: set, where: str) -> dict:
    value = obj.get(name)
    if not isinstance(value, dict) or set(value) != keys:
        raise DatasetError(f"{where}: field {name!r} must be an object with keys {sorted(keys)}, got {value!r}")
    return value


def _latencies(obj: dict, where: str) -> tuple:
    lat, median, error = obj.get("latencies_ms"), obj.get("median_ms"), obj.get("error")
    if not isinstance(lat, list) or not all(_is_number(x) and math.isfinite(x) and x > 0 for x in lat):
        raise DatasetError(f"{where}: 'latencies_ms' must be a list of positive finite numbers, got {lat!r}")
    if error is None:
        if not lat:
            raise DatasetError(f"{where}: a program without an error needs its latencies; 'latencies_ms' is empty")
        if not (_is_number(median) and math.isfinite(median) and median > 0):
            raise DatasetError(f"{where}: 'median_ms' must be a positive finite number, got {median!r}")
    elif median is not None:
        raise DatasetError(f"{where}: a failed program (error {error!r}) has no 'median_ms', got {median!r}")
    return tuple(float(x) for x in lat)


def _sentence_hardware(text: str, tokens: str, where: str):
    try:
        sentence = parse(text)
    except SentenceError as e:
        raise DatasetError(f"{where}: 'sentence' does not parse: {e}") from None
    if str(sentence.hardware) != tokens:
        raise DatasetError(
            f"{where}: 'hardware.tokens' {tokens!r} is not the sentence's hardware line {str(sentence.hardware)!r}"
        )
    return sentence


def check_entry(obj, where: str, sentences: bool = True) -> Entry:
    """The Entry of one decoded JSON line, or a DatasetError naming `where` and the field at
    fault. With `sentences`, the sentence must parse and carry the entry's hardware line."""
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: an entry is a JSON object, got {type(obj).__name__}")
    if obj.get("schema") != SCHEMA:
        raise DatasetError(
            f"{where}: schema version {obj.get('schema')!r} is not one this minitc reads ({SCHEMA}); "
            "update minitc, or fix the entry's 'schema'"
        )
    missing, unknown = FIELDS - set(obj), set(obj) - FIELDS
    if missing or unknown:
        raise DatasetError(f"{where}: missing fields {sorted(missing)}, unknown fields {sorted(unknown)}")
    workload = _object(obj, "workload", {"key", "name", "description"}, where)
    hardware = _object(obj, "hardware", {"fingerprint", "tokens"}, where)
    target = _text(obj, "target", where)
    try:
        target_kind(target)
    except BuildError as e:
        raise DatasetError(f"{where}: 'target': {e}") from None
    tokens = _text(hardware, "tokens", where)
    if not tokens.startswith("hardware "):
        raise DatasetError(f"{where}: 'hardware.tokens' must be a hardware line ('hardware llvm ...'), got {tokens!r}")
    date = _text(obj, "date", where)
    try:
        datetime.strptime(date, DATE_FORMAT)
    except ValueError:
        raise DatasetError(f"{where}: 'date' must read like 2026-11-25T06:23:11Z (UTC), got {date!r}") from None
    sentence = _text(obj, "sentence", where)
    parsed = _sentence_hardware(sentence, tokens, where) if sentences else None
    return Entry(
        workload=_text(workload, "key", where),
        name=_text(workload, "name", where, nullable=True),
        description=_text(workload, "description", where),
        target=target,
        fingerprint=_text(hardware, "fingerprint", where),
        hardware=tokens,
        sentence=sentence,
        latencies_ms=_latencies(obj, where),
        median_ms=None if obj["median_ms"] is None else float(obj["median_ms"]),
        error=_text(obj, "error", where, nullable=True),
        date=date,
        minitc=_text(obj, "minitc", where, nullable=True),
        source=_text(obj, "source", where),
        where=where,
        parsed=parsed,
    )


# -- reading --------------------------------------------------------------------------------


def shards(path=None) -> list:
    """The shard files of a dataset folder (sorted by name), or `[path]` for one shard."""
    path = Path(path) if path is not None else DATA_DIR
    if path.is_dir():
        return sorted(path.glob("*" + SUFFIX))
    if path.is_file():
        return [path]
    raise DatasetError(f"no dataset at {path}: name a folder of *{SUFFIX} shards or one shard")


def read_shard(path, sentences: bool = True) -> list:
    """The entries of one shard, each checked (check_entry)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise DatasetError(
            f"{path}: not a complete gzip file of UTF-8 text ({e}); a write to it was interrupted or it is "
            f"damaged: restore it with `git checkout -- {path}`, or delete it if it was never committed"
        ) from None
    out = []
    for lineno, line in enumerate(lines, 1):
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise DatasetError(f"{where}: not a JSON line ({e})") from None
        out.append(check_entry(obj, where, sentences))
    return out


def load(path=None, hardware=None, workloads=None, sentences: bool = True) -> list:
    """Every entry of the dataset at `path` (default: the package's lm/data), checked, in shard
    and line order; a second entry of the same measurement (Entry.identity) is a DatasetError
    naming both places. `hardware` keeps the given fingerprints, `workloads` the given names
    or keys; a filter that matches nothing is an error listing what there is. With
    `sentences=False` sentences are not parsed (3 ms each), for a quick summary; with a filter,
    only the sentences of the entries it keeps are (the whole dataset's took 6.2 s on the Intel
    Xeon, a filtered load for one machine's workloads a fraction of that)."""
    entries, seen = [], {}
    for shard in shards(path):
        for e in read_shard(shard, sentences=False):
            first = seen.setdefault(e.identity, e.where)
            if first != e.where:
                raise DatasetError(
                    f"{e.where}: duplicate of {first} (same workload, target, hardware and sentence); "
                    "delete one of them"
                )
            entries.append(e)
    if hardware:
        entries = _keep(entries, set(hardware), lambda e: {e.fingerprint}, "hardware")
    if workloads:
        entries = _keep(entries, set(workloads), lambda e: {e.workload, e.name}, "workloads")
    if sentences:
        entries = [replace(e, parsed=_sentence_hardware(e.sentence, e.hardware, e.where)) for e in entries]
    return entries


def _keep(entries: list, wanted: set, names, what: str) -> list:
    kept = [e for e in entries if names(e) & wanted]
    known = set().union(*(names(e) for e in entries)) - {None} if entries else set()
    if wanted - known:
        raise DatasetError(
            f"no entries of {what} {sorted(wanted - known)} in the dataset; "
            f"it has: {', '.join(sorted(known)) or 'none'}"
        )
    return kept


def split_by_hardware(entries: list, held_out: str) -> tuple:
    """(train, test): the entries of every hardware description but `held_out` (a fingerprint),
    and those of `held_out`, for training on some machines and evaluating on an unseen one."""
    test = [e for e in entries if e.fingerprint == held_out]
    if not test:
        known = sorted({e.fingerprint for e in entries})
        raise DatasetError(f"no entries of hardware {held_out!r} to hold out; the dataset has: {', '.join(known)}")
    return [e for e in entries if e.fingerprint != held_out], test


def leave_one_hardware_out(entries: list) -> list:
    """(held-out fingerprint, train, test) for each hardware description of `entries`."""
    return [(hw, *split_by_hardware(entries, hw)) for hw in sorted({e.fingerprint for e in entries})]


# -- summary --------------------------------------------------------------------------------


def summary(folder, entries: list, files: list) -> str:
    """A readable summary of a dataset's entries: programs per hardware description and per
    workload, failures, dates, and the shards `files` with their sizes."""
    size = sum(f.stat().st_size for f in files)
    dates = sorted(e.date for e in entries)
    span = f", measured {dates[0]} to {dates[-1]}" if dates else ""
    lines = [
        f"{folder}: {len(files)} shards, {size / 1024:.1f} KiB; {len(entries)} programs "
        f"({sum(not e.ok for e in entries)} failed){span}"
    ]
    lines += _table(entries, "hardware", lambda e: e.fingerprint, "workloads", lambda e: e.workload, "hardware line")
    lines += _table(entries, "workload", lambda e: e.name or e.workload[:12], "hardware", lambda e: e.fingerprint)
    lines += ["", "shards"]
    per_shard = Counter(e.where.rpartition(":")[0] for e in entries)
    for f in files:
        lines.append(f"  {f.name:56s} {per_shard[str(f)]:6d} programs {f.stat().st_size / 1024:8.1f} KiB")
    return "\n".join(lines)


def _table(entries: list, title: str, group, other: str, other_key, last: str = "description") -> list:
    """Rows of programs, failures and distinct `other` per group; the last column describes it."""
    groups: dict = {}
    for e in entries:
        groups.setdefault(group(e), []).append(e)
    rows = ["", f"{title:28s} {'programs':>8s} {'failed':>6s} {other:>9s}  {last}"]
    for name, members in sorted(groups.items()):
        first = members[0]
        about = first.hardware.split(" gflops ")[0] if last == "hardware line" else first.description
        distinct = len({other_key(e) for e in members})
        failed = sum(not e.ok for e in members)
        rows.append(f"{name:28s} {len(members):8d} {failed:6d} {distinct:9d}  {about}")
    return rows


# -- writing --------------------------------------------------------------------------------


class DatasetWriter:
    """Appends entries to new shards of a dataset folder, one per hardware fingerprint, that
    this writer creates; it never opens a shard it did not create."""

    def __init__(self, directory=None):
        self.directory = Path(directory) if directory is not None else DATA_DIR
        self.created: dict = {}  # fingerprint -> the shard this writer made for it

    def append(self, entries: list) -> list:
        """Write `entries` (Entry objects), each hardware's as one gzip member of its shard;
        returns the shards written to."""
        groups: dict = {}
        for e in entries:
            groups.setdefault(e.fingerprint, []).append(e)
        for fingerprint, group in groups.items():
            text = "".join(json.dumps(e.to_json(), separators=(",", ":")) + "\n" for e in group)
            # One write of a whole member: an interrupted run leaves whole members behind.
            data = gzip.compress(text.encode("utf-8"), mtime=0)
            with open(self._shard(fingerprint), "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        return [self.created[fp] for fp in groups]

    def _shard(self, fingerprint: str) -> Path:
        if fingerprint not in self.created:
            self.directory.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            name = re.sub(r"[^A-Za-z0-9._-]", "-", fingerprint)
            path = self.directory / f"{name}-{stamp}-{secrets.token_hex(3)}{SUFFIX}"
            path.open("xb").close()  # exclusive: never an existing shard
            self.created[fingerprint] = path
        return self.created[fingerprint]
