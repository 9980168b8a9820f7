"""The measurement dataset (lm/dataset.py, lm/export.py): shards written and read back, appends
that never touch an existing shard, one refusal per malformed field and for duplicates (each
naming file and line), filters and the leave-one-hardware-out split, `minitc lm data`,
`minitc lm export-db` from a records database written here, `minitc lm measure` appending what
it measured (real runner), fine-tuning from the dataset, and the dataset the package ships."""

import calendar
import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.database import Database, Record
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.cli import main
from minitc.lm.dataset import (
    DATA_DIR,
    DatasetError,
    DatasetWriter,
    check_entry,
    leave_one_hardware_out,
    load,
    split_by_hardware,
)
from minitc.lm.language import Hardware, SentenceWriter
from minitc.lm.model import ModelConfig, TensorLM, load_checkpoint, save_checkpoint
from minitc.lm.pipeline import finetune
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.training_set import TRAINING
from minitc.target import hardware_fingerprint, parse_target

ROOT = Path(__file__).resolve().parents[2]
TARGET = "llvm -mcpu=znver2 -num-cores=2"
ZEN2 = Hardware("llvm", "znver2", 2, 8, 32, 512, 16384, 210, 33)
ZEN4 = Hardware("llvm", "znver4", 2, 16, 32, 1024, 32768, 380, 30)


def _matmul(n=32):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    return tc.ops.matmul(A, B)


@pytest.fixture(scope="module")
def sentences():
    """Sentences of distinct random programs of a 32x32 matmul, for each of two machines."""
    space = Space(_matmul(), TARGET)
    rng = np.random.default_rng(0)
    cands = {}
    while len(cands) < 6:
        c = space.sample(rng)
        cands.setdefault(c.key, c)
    return {hw: [str(SentenceWriter(space, hw)(c.decisions)) for c in cands.values()] for hw in (ZEN2, ZEN4)}


def _entry(sentence, hw=ZEN2, ms=1.0, **over) -> dict:
    obj = {
        "schema": 1,
        "workload": {"key": workload_key(_matmul()), "name": None, "description": "matmul float32[32, 32]"},
        "target": TARGET,
        "hardware": {"fingerprint": f"{hw.cpu}-2c-0000", "tokens": str(hw)},
        "sentence": sentence,
        "latencies_ms": [ms, ms * 1.1],
        "median_ms": ms,
        "error": None,
        "date": "2026-11-25T06:23:11Z",
        "minitc": "0.1.0",
        "source": "test",
    }
    obj.update(over)
    return obj


def _write(path: Path, lines: list) -> Path:
    with gzip.open(path, "wt") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def _entries(objs) -> list:
    return [check_entry(o, f"made:{n}") for n, o in enumerate(objs, 1)]


def test_round_trip_and_appends_never_rewrite_a_shard(tmp_path, sentences):
    first = _entries(_entry(s, ms=1.0 + n) for n, s in enumerate(sentences[ZEN2][:3]))
    writer = DatasetWriter(tmp_path)
    (shard,) = writer.append(first[:2])
    assert writer.append(first[2:]) == [shard]  # a second gzip member of the writer's own shard
    assert load(tmp_path) == first
    before = shard.read_bytes()

    later = _entries(_entry(s, hw=ZEN4) for s in sentences[ZEN4][:2])
    later.append(check_entry(_entry(sentences[ZEN2][3], error="build: no", latencies_ms=[], median_ms=None), "x:1"))
    written = DatasetWriter(tmp_path).append(later)
    assert len(written) == 2 and shard not in written  # one new shard per machine
    assert shard.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in [shard, *written])
    assert sorted(load(tmp_path), key=str) == sorted(first + later, key=str)
    assert [e.where for e in load(shard)] == [f"{shard}:{n}" for n in (1, 2, 3)]


BAD = [
    (lambda o: [o], "an entry is a JSON object, got list"),
    (lambda o: {**o, "schema": 2}, "schema version 2 is not one this minitc reads (1)"),
    (lambda o: {k: v for k, v in o.items() if k != "date"}, "missing fields ['date']"),
    (lambda o: {**o, "speed": 1}, "unknown fields ['speed']"),
    (lambda o: {**o, "workload": "matmul"}, "field 'workload' must be an object with keys"),
    (lambda o: {**o, "workload": {**o["workload"], "key": ""}}, "field 'key' must be a non-empty string"),
    (lambda o: {**o, "workload": {**o["workload"], "name": 7}}, "field 'name' must be a non-empty string or null"),
    (lambda o: {**o, "workload": {**o["workload"], "description": None}}, "field 'description' must be"),
    (lambda o: {**o, "target": "tpu"}, "'target': unknown target 'tpu'"),
    (lambda o: {**o, "hardware": {**o["hardware"], "fingerprint": 3}}, "field 'fingerprint' must be"),
    (lambda o: {**o, "hardware": {**o["hardware"], "tokens": "znver2"}}, "'hardware.tokens' must be a hardware line"),
    (lambda o: {**o, "hardware": {**o["hardware"], "tokens": str(ZEN4)}}, "is not the sentence's hardware line"),
    (lambda o: {**o, "sentence": "workload\n  stage oops"}, "'sentence' does not parse: malformed sentence"),
    (lambda o: {**o, "sentence": None}, "field 'sentence' must be a non-empty string"),
    (lambda o: {**o, "latencies_ms": [1.0, -2.0]}, "'latencies_ms' must be a list of positive finite numbers"),
    (lambda o: {**o, "latencies_ms": [float("nan")]}, "'latencies_ms' must be a list of positive finite numbers"),
    (lambda o: {**o, "latencies_ms": [float("inf")]}, "'latencies_ms' must be a list of positive finite numbers"),
    (lambda o: {**o, "latencies_ms": ["1.0"]}, "'latencies_ms' must be a list of positive finite numbers"),
    (lambda o: {**o, "latencies_ms": 1.0}, "'latencies_ms' must be a list of positive finite numbers"),
    (lambda o: {**o, "latencies_ms": []}, "a program without an error needs its latencies"),
    (lambda o: {**o, "median_ms": 0}, "'median_ms' must be a positive finite number, got 0"),
    (lambda o: {**o, "median_ms": True}, "'median_ms' must be a positive finite number, got True"),
    (lambda o: {**o, "error": "run: crashed"}, "a failed program (error 'run: crashed') has no 'median_ms'"),
    (lambda o: {**o, "error": 5, "median_ms": None}, "field 'error' must be a non-empty string or null"),
    (lambda o: {**o, "date": "2026-11-25 06:23"}, "'date' must read like 2026-11-25T06:23:11Z (UTC)"),
    (lambda o: {**o, "minitc": 0.1}, "field 'minitc' must be a non-empty string or null"),
    (lambda o: {**o, "source": ""}, "field 'source' must be a non-empty string"),
    (lambda o: "{not json", "not a JSON line"),
]


@pytest.mark.parametrize("spoil, message", BAD, ids=[m for _, m in BAD])
def test_a_malformed_entry_is_refused_naming_file_and_line(tmp_path, sentences, spoil, message):
    good = _entry(sentences[ZEN2][0])
    shard = _write(tmp_path / "a.jsonl.gz", [good, spoil(_entry(sentences[ZEN2][1]))])
    with pytest.raises(DatasetError, match="^" + str(shard) + ":2: ") as e:
        load(tmp_path)
    assert message in str(e.value)


def test_a_damaged_shard_and_a_missing_dataset_are_refused(tmp_path, sentences):
    data = gzip.compress((json.dumps(_entry(sentences[ZEN2][0])) + "\n").encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[:-6])  # as if a write had been interrupted
    with pytest.raises(DatasetError, match="cut.jsonl.gz: not a complete gzip file .*`git checkout -- "):
        load(tmp_path)
    with pytest.raises(DatasetError, match="no dataset at .*nowhere"):
        load(tmp_path / "nowhere")


def test_a_duplicate_names_both_places(tmp_path, sentences):
    a, b = sentences[ZEN2][:2]
    first = _write(tmp_path / "1.jsonl.gz", [_entry(a), _entry(b)])
    second = _write(tmp_path / "2.jsonl.gz", [_entry(b, ms=9.0, date="2026-11-26T00:00:00Z")])
    with pytest.raises(DatasetError, match=f"^{second}:1: duplicate of {first}:2 \\(same workload, target, hardw"):
        load(tmp_path)
    # the same program on another target or machine is another measurement
    second.unlink()
    _write(tmp_path / "3.jsonl.gz", [_entry(b, target="llvm -mcpu=znver2 -num-cores=1")])
    _write(tmp_path / "4.jsonl.gz", [_entry(b, hardware={"fingerprint": "other-2c-1", "tokens": str(ZEN2)})])
    assert len(load(tmp_path)) == 4


def test_filters_and_the_leave_one_hardware_out_split(tmp_path, sentences):
    objs = [_entry(s) for s in sentences[ZEN2][:3]] + [_entry(s, hw=ZEN4) for s in sentences[ZEN4]]
    objs.append(_entry(sentences[ZEN2][0], hardware={"fingerprint": "haswell-1c-9", "tokens": str(ZEN2)}))
    _write(tmp_path / "s.jsonl.gz", objs)
    entries = load(tmp_path)
    assert len(load(tmp_path, hardware=["znver4-2c-0000"])) == 6
    assert len(load(tmp_path, workloads=[workload_key(_matmul())])) == 10
    with pytest.raises(DatasetError, match=r"no entries of hardware \['zen9'\].*it has: haswell-1c-9, znver2-2c-0000"):
        load(tmp_path, hardware=["zen9"])
    with pytest.raises(DatasetError, match=r"no entries of workloads \['matmul-512'\]"):
        load(tmp_path, workloads=["matmul-512"])

    train, test = split_by_hardware(entries, "znver2-2c-0000")
    assert len(test) == 3 and {e.fingerprint for e in test} == {"znver2-2c-0000"}
    assert len(train) == 7 and "znver2-2c-0000" not in {e.fingerprint for e in train}
    folds = leave_one_hardware_out(entries)
    assert [(hw, len(tr), len(te)) for hw, tr, te in folds] == [
        ("haswell-1c-9", 9, 1),
        ("znver2-2c-0000", 7, 3),
        ("znver4-2c-0000", 4, 6),
    ]
    with pytest.raises(DatasetError, match="no entries of hardware 'zen9' to hold out"):
        split_by_hardware(entries, "zen9")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_data_command_summarises_and_checks(tmp_path, sentences):
    failed = _entry(sentences[ZEN2][2], error="build: bad", latencies_ms=[], median_ms=None)
    _write(tmp_path / "a.jsonl.gz", [_entry(sentences[ZEN2][0]), _entry(sentences[ZEN2][1]), failed])
    _write(tmp_path / "b.jsonl.gz", [_entry(s, hw=ZEN4, date="2026-12-01T10:00:00Z") for s in sentences[ZEN4]])
    result = run("lm", "data", tmp_path, "--check")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 shards" in out and "9 programs (1 failed), measured 2026-11-25T06:23:11Z to 2026-12-01T10:00:00Z" in out
    assert "znver2-2c-0000                      3      1         1  hardware llvm znver2 cores 2 simd 8" in out
    assert "znver4-2c-0000                      6      0         1  hardware llvm znver4 cores 2 simd 16" in out
    key = workload_key(_matmul())[:12]
    assert f"{key}                        9      1         2  matmul float32[32, 32]" in out
    assert "a.jsonl.gz" in out and "check: all 9 entries valid" in out

    only = run("lm", "data", tmp_path, "--hardware", "znver4-2c-0000")
    assert "6 programs (0 failed)" in only.output and "check:" not in only.output

    _write(tmp_path / "c.jsonl.gz", [_entry(sentences[ZEN2][0], latencies_ms=[0.0])])
    bad = run("lm", "data", tmp_path)
    assert bad.exit_code == 1 and f"{tmp_path / 'c.jsonl.gz'}:1: 'latencies_ms' must be" in bad.output
    assert "Traceback" not in bad.output


def test_export_db_keeps_a_records_databases_programs_once(tmp_path, sentences):
    db_path = tmp_path / "records.db"
    key, t0 = workload_key(TRAINING["matmul-256"]()), 1795000000.0

    def trace(sentence):
        return json.dumps({"sketch": "generic", "decisions": [], "sentence": sentence})

    with Database(db_path) as db:
        db.add_workload(key, "matmul float32[256, 256]x[256, 256]->[256, 256]", [])
        a, b, c = sentences[ZEN2][:3]
        db.add(Record(key, TARGET, "znver2-2c-abcd", trace(a), (2.0, 2.2), 2.0, None, t0))
        db.add(Record(key, TARGET, "znver2-2c-abcd", trace(a), (1.5, 1.6), 1.5, None, t0 + 60))  # re-measured
        db.add(Record(key, TARGET, "znver2-2c-abcd", trace(b), (), None, "run: crashed", t0 + 120))
        db.add(Record(key, TARGET, "znver2-2c-abcd", json.dumps({"sketch": "generic"}), (1.0,), 1.0, None, t0))
        db.add(Record(key, TARGET, "znver2-2c-abcd", trace("workload oops"), (1.0,), 1.0, None, t0))

    data = tmp_path / "data"
    result = run("lm", "export-db", db_path, "--dataset", data)
    assert result.exit_code == 0, result.output
    assert "added 2 programs (1 failed) to 1 new shard(s)" in result.output
    assert "left out 1 without a sentence, 1 invalid, first: " in result.output
    entries = load(data)
    assert [(e.sentence, e.median_ms, e.latencies_ms, e.error) for e in entries] == [
        (a, 1.5, (1.5, 1.6), None),  # a program's latest measurement
        (b, None, (), "run: crashed"),
    ]
    first = entries[0]
    assert (first.name, first.fingerprint, first.hardware, first.target) == (
        "matmul-256",
        "znver2-2c-abcd",
        str(ZEN2),
        TARGET,
    )
    assert first.date == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + 60)) and first.minitc is None
    assert first.source == "minitc lm export-db records.db"

    shard = next(data.iterdir())
    before = shard.read_bytes()
    again = run("lm", "export-db", db_path, "--dataset", data)
    assert "added 0 programs" in again.output and "2 already in the dataset" in again.output
    assert list(data.iterdir()) == [shard] and shard.read_bytes() == before


def test_measure_appends_what_it_measured_unless_told_not_to(tmp_path):
    db, data, one_core = tmp_path / "r.db", tmp_path / "data", parse_target("llvm -num-cores=1")
    args = ("lm", "measure", "--db", db, "--workloads", "bert-layernorm", "--target", one_core.string)
    result = run(*args, "--per-workload", "1", "--dataset", data)
    assert result.exit_code == 0, result.output
    assert "dataset: added 1 programs" in result.output
    (entry,) = load(data)
    assert entry.name == "bert-layernorm" and entry.target == one_core.string and entry.source == "minitc lm measure"
    assert entry.ok and entry.median_ms > 0 and all(ms > 0 for ms in entry.latencies_ms)
    assert entry.fingerprint == hardware_fingerprint(one_core)
    assert entry.hardware.startswith(f"hardware llvm {one_core.cpu} cores 1 simd ") and entry.minitc.startswith("0.")
    assert 0 <= time.time() - calendar.timegm(time.strptime(entry.date, "%Y-%m-%dT%H:%M:%SZ")) < 3600

    result = run(*args, "--per-workload", "2", "--no-dataset")
    assert result.exit_code == 0 and "dataset" not in result.output, result.output
    with Database(db) as d:
        assert len(d.programs(entry.workload)) == 2
    assert len(load(data)) == 1

    (data / "junk.jsonl.gz").write_bytes(b"not gzip")  # checked before measuring anything
    refused = run(*args, "--per-workload", "3", "--dataset", data)
    assert refused.exit_code == 2 and "junk.jsonl.gz: not a complete gzip file" in refused.output


def test_finetune_from_the_dataset_leaving_one_machine_out(tmp_path, sentences):
    torch.set_num_threads(1)
    tok = Tokenizer.default()
    torch.manual_seed(0)
    ckpt = tmp_path / "tiny.pt"
    model = TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64))
    save_checkpoint(ckpt, model, tok.vocab, {"stage": "test"})
    zen4 = [_entry(s, hw=ZEN4, ms=1.0 + n) for n, s in enumerate(sentences[ZEN4])]
    _write(tmp_path / "d.jsonl.gz", [_entry(s) for s in sentences[ZEN2][:2]] + zen4)

    meta = finetune(ckpt, None, tmp_path / "ft.pt", data=tmp_path, leave_out="znver2-2c-0000", epochs=1)
    assert meta["demonstrations"] == 6 and meta["hardware_lines"] == {str(ZEN4): 6}
    assert meta["hardware"] == str(ZEN4) and load_checkpoint(tmp_path / "ft.pt")[2]["source"] == str(tmp_path)

    result = run("lm", "finetune", ckpt, "--out", tmp_path / "x.pt")
    assert result.exit_code == 2 and "give one of --db RECORDS or --data DATASET" in result.output
    result = run("lm", "finetune", ckpt, "--data", tmp_path, "--hardware", "zen9", "--out", tmp_path / "x.pt")
    assert result.exit_code == 1 and "no entries of hardware ['zen9']" in result.output


@pytest.mark.heavy
def test_the_shipped_dataset_is_valid_and_packaged():
    entries = load(DATA_DIR)
    assert all(e.hardware.startswith("hardware ") for e in entries)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.jsonl.gz" in package_data["minitc.lm"]
    assert all(p.parent == DATA_DIR for p in DATA_DIR.glob("**/*.jsonl.gz"))  # the pattern reaches every shard
