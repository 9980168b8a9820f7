"""Training data for the language model.

* Pretraining sentences (`minitc lm gen-data`): random legal programs of each training
  workload's design space, written as sentences, one JSON line each:
  {"workload": "bert-qkv", "sentence": "..."}. Nothing is measured.
* Demonstrations (`minitc lm measure`, then fine-tuning): measured programs from the records
  database (each record holds its sentence: lm/plugin.py adds it) or from the dataset
  (lm/dataset.py); each weighs its throughput relative to its workload's best on the same
  target and machine, so fine-tuning keeps the ranking, not only the top-1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from minitc.autotune.search import neighbours, template_program
from minitc.autotune.space import Space
from minitc.errors import ScheduleError
from minitc.lm.dataset import trace_sentence
from minitc.lm.hardware import hardware as host_hardware
from minitc.lm.language import SentenceError, SentenceWriter, parse
from minitc.lm.train import Example
from minitc.lm.training_set import TRAINING, workload


def gen_data(
    path,
    names=None,
    per_workload: int = 256,
    seed: int = 0,
    hardware=None,
    progress=None,
    near_template: float = 0.0,
    target="llvm",
) -> int:
    """Append `per_workload` random programs of each workload to the JSONL file `path`; returns
    how many sentences were written.

    With `near_template`, that share of each workload with a hand template is instead drawn
    from the template's neighbourhood: its default program (the prompt's `default` line) after
    1-4 mutations. Uniform samples bear no relation to that line, so a model pretrained only on
    them learns to ignore it. `target` "cuda" writes GPU programs (no GPU needed)."""

    names = list(names or TRAINING)
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "a") as f:
        for n, name in enumerate(names):
            space = Space(workload(name), target)
            write = SentenceWriter(space, hardware or host_hardware(space.target))
            seen = set()
            near = round(per_workload * near_template)
            default = template_program(space) if near > 0 else None
            for c in neighbours(space, default, near, rng) + _random_programs(space, per_workload, rng):
                if len(seen) >= per_workload or c.key in seen:
                    continue
                seen.add(c.key)
                f.write(json.dumps({"workload": name, "sentence": str(write(c.decisions))}) + "\n")
                written += 1
            if progress:
                progress(n + 1, len(names), name)
    return written


def _random_programs(space, count: int, rng) -> list:
    out, keys = [], set()
    for _ in range(count * 3):
        if len(out) >= count:
            break
        try:
            c = space.sample(rng)
        except ScheduleError:
            continue
        if c.key not in keys:
            keys.add(c.key)
            out.append(c)
    return out


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


def throughput_weights(latencies_ms: list, sharpness: float = 4.0) -> list:
    """(best ms / ms) ** sharpness per program: the best weighs 1, one twice as slow 1/16."""
    best = min(latencies_ms)
    return [(best / ms) ** sharpness for ms in latencies_ms]


def demonstrations(db, target: str | None = None, sharpness: float = 4.0, workloads=None) -> list:
    """(Sentence, weight) of every measured program with a sentence in the records database,
    weighted by throughput_weights within its workload; failed programs are left out."""
    out = []
    for key, _ in db.workloads():
        if workloads is not None and key not in workloads:
            continue
        measured = [
            (trace_sentence(rec.trace), rec.median_ms)
            for rec in db.programs(key, target)
            if rec.ok and math.isfinite(rec.median_ms) and rec.median_ms > 0
        ]
        measured = [(parse(text), ms) for text, ms in measured if text]
        if measured:
            weights = throughput_weights([ms for _, ms in measured], sharpness)
            out += [(s, w) for (s, _), w in zip(measured, weights)]
    return out


def dataset_demonstrations(entries, sharpness: float = 4.0) -> list:
    """(Sentence, weight) of every successful dataset entry, weighted by throughput_weights among
    the entries of its workload, target and machine (latencies of two machines do not compare)."""
    return [(e.parsed or parse(e.sentence), w) for e, w in weighted_entries(entries, sharpness)]


def weighted_entries(entries, sharpness: float = 4.0) -> list:
    """(Entry, weight) of every successful dataset entry, as dataset_demonstrations weighs it,
    without parsing the sentences (a caller that keeps a sample parses only those)."""
    groups: dict = {}
    for e in entries:
        if e.ok:
            groups.setdefault((e.workload, e.target, e.fingerprint), []).append(e)
    out = []
    for group in groups.values():
        out += zip(group, throughput_weights([e.median_ms for e in group], sharpness))
    return out
