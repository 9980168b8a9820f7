"""Measured programs of a records database into the dataset (lm/dataset.py).

    with Database("lm-records.db") as db:
        result = Exporter(DATA_DIR, source="minitc lm export-db lm-records.db").export(db)

`minitc lm export-db` keeps records measured earlier; `minitc lm measure` exports what it has
just measured, workload by workload. Each distinct program's latest record (Database.programs)
becomes one entry, unless the dataset already holds that measurement (Entry.identity): running
an export twice adds nothing the second time. Records without a sentence (written without the
minitc.lm plug-in) cannot train the model and are left out, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minitc.lm.dataset import DatasetError, DatasetWriter, Entry, check_entry, iso_date, load, trace_sentence
from minitc.lm.language import SentenceError, parse

_NAMES: dict = {}


def workload_names() -> dict:
    """{workload key: name} of the `minitc lm workloads` tables (training and held out)."""
    if not _NAMES:
        from minitc.autotune.workload_key import workload_key
        from minitc.lm.training_set import HELD_OUT, TRAINING

        _NAMES.update({workload_key(make()): name for name, make in {**TRAINING, **HELD_OUT}.items()})
    return _NAMES


def entry_from_record(record, description: str, *, version: str | None, source: str) -> Entry | None:
    """The dataset entry of one records-database record, or None if its trace holds no sentence;
    raises SentenceError for a sentence that does not parse."""
    text = trace_sentence(record.trace)
    if not text:
        return None
    sentence = parse(text)
    return Entry(
        workload=record.workload,
        name=workload_names().get(record.workload),
        description=description,
        target=record.target,
        fingerprint=record.hardware,
        hardware=str(sentence.hardware),
        sentence=text,
        latencies_ms=tuple(record.latencies_ms),
        median_ms=record.median_ms if record.error is None else None,
        error=record.error,
        date=iso_date(record.created),
        minitc=version,
        source=source,
        parsed=sentence,
    )


@dataclass
class ExportResult:
    added: list = field(default_factory=list)  # the new entries
    known: int = 0  # programs the dataset already held
    no_sentence: int = 0
    invalid: list = field(default_factory=list)  # "record <id>: <reason>" per program left out
    shards: list = field(default_factory=list)  # the shards written to

    def __str__(self) -> str:
        errors = sum(not e.ok for e in self.added)
        text = f"added {len(self.added)} programs ({errors} failed) to {len(self.shards)} new shard(s)"
        skipped = [(self.known, "already in the dataset"), (self.no_sentence, "without a sentence")]
        skipped.append((len(self.invalid), "invalid" + (f", first: {self.invalid[0]}" if self.invalid else "")))
        left = ", ".join(f"{n} {why}" for n, why in skipped if n)
        return text + (f"; left out {left}" if left else "")


class Exporter:
    """Adds records-database programs to the dataset folder `directory` (new shards only).
    The dataset is loaded and checked first, so it must be valid."""

    def __init__(self, directory=None, *, version: str | None = None, source: str):
        self.writer = DatasetWriter(directory)
        self.version, self.source = version, source
        folder = self.writer.directory
        self.known = {e.identity for e in load(folder, sentences=False)} if folder.exists() else set()

    def export(self, database, workloads=None, after_id: int = 0) -> ExportResult:
        """Export the programs of `database` (of the given workload keys; with `after_id`, only
        programs whose latest record is newer than that record id)."""
        result = ExportResult()
        for key, description in database.workloads():
            if workloads is not None and key not in workloads:
                continue
            for record in database.programs(key):
                if record.id > after_id:
                    self._add(record, description, database.path, result)
        if result.added:
            result.shards = self.writer.append(result.added)
        return result

    def _add(self, record, description: str, path: Path, result: ExportResult) -> None:
        where = f"{path}: record {record.id}"
        try:
            entry = entry_from_record(record, description, version=self.version, source=self.source)
            if entry is not None:
                check_entry(entry.to_json(), where, sentences=False)
        except (SentenceError, DatasetError, ValueError) as e:
            result.invalid.append(str(e) if isinstance(e, DatasetError) else f"{where}: {e}")
            return
        if entry is None:
            result.no_sentence += 1
        elif entry.identity in self.known:
            result.known += 1
        else:
            self.known.add(entry.identity)
            result.added.append(entry)
