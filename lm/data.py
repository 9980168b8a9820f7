"""Training data for the language model.

* Pretraining sentences (`minitc lm gen-data`): random legal programs of each training
  workload's design space, written as sentences, one JSON line each:
  {"workload": "bert-qkv", "sentence": "..."}. Nothing is measured.
* Demonstrations (`minitc lm measure`, then fine-tuning): measured programs from the records
  database; each record holds its sentence (tune/tuner.py writes it), and its weight is its
  throughput relative to the workload's best, so fine-tuning keeps the ranking, not only the
  top-1.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from minitc.errors import ScheduleError

from .language import SentenceError, parse, sentence
from .train import Example
from .workloads import TRAINING, workload


def gen_data(path, names=None, per_workload: int = 256, seed: int = 0, hardware=None, progress=None) -> int:
    """Append `per_workload` random programs of each workload to the JSONL file `path`; returns
    how many sentences were written."""
    from minitc.tune.space import Space

    from .hardware import hardware as host_hardware

    names = list(names or TRAINING)
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "a") as f:
        for n, name in enumerate(names):
            space = Space(workload(name), "llvm")
            hw = hardware or host_hardware(space.target)
            seen = set()
            for _ in range(per_workload * 3):
                if len(seen) >= per_workload:
                    break
                try:
                    c = space.sample(rng)
                except ScheduleError:
                    continue
                if c.key in seen:
                    continue
                seen.add(c.key)
                f.write(json.dumps({"workload": name, "sentence": str(sentence(space, hw, c.decisions))}) + "\n")
                written += 1
            if progress:
                progress(n + 1, len(names), name)
    return written


def read_sentences(path) -> list:
    """(workload, Sentence) per line of a gen-data file; a malformed line raises SentenceError
    naming the file and line."""
    out = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            out.append((item["workload"], parse(item["sentence"])))
        except (ValueError, KeyError, SentenceError) as e:
            raise SentenceError(f"{path}:{lineno}: {e}") from None
    return out


def examples(tok, sentences, weights=None) -> list:
    out = []
    for n, s in enumerate(sentences):
        ids, mask = tok.encode(s)
        out.append(Example(ids, mask, 1.0 if weights is None else float(weights[n])))
    return out


def demonstrations(db, target: str | None = None, sharpness: float = 4.0, workloads=None) -> list:
    """(Sentence, weight) of every measured program with a sentence in the records database.
    weight = (best ms of its workload / its ms) ** sharpness: the best program weighs 1, one
    twice as slow 1/16; failed programs are left out."""
    out = []
    for key, _ in db.workloads():
        if workloads is not None and key not in workloads:
            continue
        latest = {}
        for rec in db.records(key, target):
            latest[rec.trace] = rec  # a re-measure supersedes the first timing
        measured = []
        for rec in latest.values():
            text = json.loads(rec.trace).get("sentence") if rec.trace.startswith("{") else None
            if rec.ok and text:
                measured.append((parse(text), rec.median_ms))
        if not measured:
            continue
        best = min(ms for _, ms in measured)
        out += [(s, (best / ms) ** sharpness) for s, ms in measured if math.isfinite(ms) and ms > 0]
    return out
