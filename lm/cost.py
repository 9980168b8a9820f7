"""Cost models pretrained on the measurement dataset, for the `tlm` strategy's first rounds.

The language model proposes programs; the TLP cost model (minitc.autotune.cost_model) ranks
them, and only the best few are measured. A fresh cost model knows nothing until it has seen a
workload's measurements, so the tlm strategy used to rank its first rounds by the language
model's likelihood. A cost model pretrained on the dataset's programs of this machine (or of
every CPU) ranks from the first round.

    train_cost_model(load(hardware=["znver5-2c-3cc6f2b4"]), members=4)  -> EnsembleModel
    shipped_cost_model(target)  -> the model for this machine, or None

Shipped models live in lm/checkpoints/cost/: `<hardware fingerprint>.pt` for each CPU
description with enough programs in the dataset, `cpu.pt` trained on all of them, and
`mtl.pt`, MTL-TLP (lm/mtl.py): one backbone for all of them with a head per description, which
`minitc lm adapt` gives a new machine its head in. Each is
an ensemble of trainings from different seeds: on the same data, two trainings ranked a
workload's first proposals differently enough to move TLM@10 from 0.87 to 0.97.
`minitc lm cost-model` writes them.
"""

from __future__ import annotations

import os
from pathlib import Path

from minitc.autotune.cost_model import EnsembleModel, TLPModel, load_cost_model
from minitc.autotune.mtl_model import MTLModel
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.errors import ScheduleError
from minitc.lm.language import SentenceError, parse, space_values
from minitc.lm.training_set import TRAINING, workload
from minitc.target import hardware_fingerprint, is_gpu

COST_DIR = Path(__file__).with_name("checkpoints") / "cost"
ALL_CPUS = "cpu"  # the file name (without .pt) of the model trained on every CPU description
MTL = "mtl"  # ... and of MTL-TLP's, a head per CPU description (lm/mtl.py)
MEMBERS = 4  # trainings per shipped (and adapted) ensemble


def cost_records(entries: list, model) -> tuple:
    """((group, trace, median ms) of each dataset entry whose program replays, programs that
    no longer replay). A group is one workload on one machine: latencies of two machines are
    never ranked against each other. Registers each group's computation with `model` (its
    features need the shapes)."""
    spaces, records, skipped = {}, [], 0
    for e in entries:
        if e.name not in TRAINING:
            continue
        group = f"{e.workload}@{e.fingerprint}"
        if group not in spaces:
            outputs = workload(e.name)
            if workload_key([outputs]) != e.workload:
                skipped += 1  # the name's computation changed since it was measured
                continue
            spaces[group] = Space(outputs, e.target)
            model.register(group, [outputs])
        space = spaces[group]
        try:
            trace = space.replay(space_values(space, parse(e.sentence))).trace
        except (SentenceError, ScheduleError):  # a program the current space cannot replay
            skipped += 1
            continue
        records.append((group, trace, e.median_ms if e.ok else None))
    return records, skipped


def train_cost_model(
    entries: list, epochs: int = 30, seed: int = 0, members: int = 1, log=None, model_class=TLPModel
) -> tuple:
    """(cost model pretrained on the entries' programs, records used, programs skipped): one
    `model_class` (TLPModel, or MTLModel: a head per machine, lm/mtl.py), or with `members` > 1
    an EnsembleModel of that many, seeds `seed`, `seed` + 1, ..."""
    nets = [model_class(seed=seed + i) for i in range(members)]
    model = nets[0] if members == 1 else EnsembleModel(nets)
    records, skipped = cost_records(entries, model)
    for net in nets:
        net.pretrain(records, epochs=epochs, log=log)
    return model, len(records), skipped


def adapted_cost_model_path(fingerprint: str) -> Path:
    """Where `minitc lm adapt` keeps the cost model it trained for the machine `fingerprint`:
    beside the adapted language model, in the user's cache directory."""
    from minitc.lm.pipeline import user_model_path

    return user_model_path().parent / f"cost-adapted-{fingerprint}.pt"


def shipped_cost_model_path(target) -> Path | None:
    """MINITC_COST_MODEL if set; else the one `minitc lm adapt` made on this machine (the MTL
    model with a head learned from all of the dataset's programs of this machine and its own),
    else the shipped model of this machine's hardware description, else the shipped MTL model
    (its head for this description, or its shared head: on a CPU left out of its training it
    ranked better than the all-CPU model, docs/evaluation.md), else the one trained on every
    CPU; none for a GPU target."""
    env = os.environ.get("MINITC_COST_MODEL")
    if env:
        return Path(env)
    if is_gpu(target):
        return None
    fingerprint = hardware_fingerprint(target)
    candidates = [adapted_cost_model_path(fingerprint), COST_DIR / f"{fingerprint}.pt", COST_DIR / f"{MTL}.pt"]
    for path in candidates + [COST_DIR / f"{ALL_CPUS}.pt"]:
        if path.exists():
            return path
    return None


def members_of(model) -> list:
    return list(model.members) if isinstance(model, EnsembleModel) else [model]


def use_hardware(model, fingerprint: str | None):
    """Make every MTL member of `model` score plain workload keys with the head of
    `fingerprint` (the shared head where it has none); other models are left as they are."""
    for m in members_of(model):
        if isinstance(m, MTLModel):
            m.hardware = fingerprint
    return model


def shipped_cost_model(target) -> TLPModel | EnsembleModel | None:
    """The model at shipped_cost_model_path; an MTL-TLP model (lm/mtl.py) scores with the
    head of this machine's hardware description, or its shared head where it has none."""
    path = shipped_cost_model_path(target)
    return use_hardware(load_cost_model(path), hardware_fingerprint(target)) if path is not None else None
