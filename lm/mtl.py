"""MTL-TLP for the language model's machines: one cost model with a head per CPU description.

The model is minitc.autotune.mtl_model.MTLModel (a shared TLP backbone, a head per hardware
fingerprint, a shared head for hardware never seen). Here it meets the dataset:

    model, used, skipped = train_mtl_model(load())           # every CPU's programs, a head each
    fit_machine_head(model, entries, "rocketlake-2c-43bb2171")  # a new machine: its head only
    use_hardware(model, fingerprint)                         # the head the tuner's keys use

`minitc lm cost-model` writes it as lm/checkpoints/cost/mtl.pt; `minitc lm adapt` gives this
machine a head learned from its programs (fit_machine_head, about a minute for 600 programs)
instead of training a separate model, and keeps the result in the user's cache directory
(cost.adapted_cost_model_path). experiments/mtl_eval.py compares it with the per-machine and
the all-CPU model on a machine left out (docs/evaluation.md).
"""

from __future__ import annotations

from pathlib import Path

from minitc.autotune.cost_model import load_cost_model
from minitc.autotune.mtl_model import MTLModel
from minitc.errors import MinitcError
from minitc.lm import cost
from minitc.lm.cost import MTL, cost_records, members_of, train_cost_model, use_hardware

HEAD_EPOCHS = 60  # a head learns from a few hundred programs: many short epochs


def shipped_mtl_path():
    return cost.COST_DIR / f"{MTL}.pt"


def is_mtl(model) -> bool:
    return all(isinstance(m, MTLModel) for m in members_of(model))


def train_mtl_model(entries: list, epochs: int = 30, seed: int = 0, members: int = 1, log=None) -> tuple:
    """(MTL-TLP model pretrained on the entries, records used, programs skipped): a head per
    hardware description among them; see cost.train_cost_model."""
    return train_cost_model(entries, epochs=epochs, seed=seed, members=members, log=log, model_class=MTLModel)


def fit_machine_head(model, entries: list, fingerprint: str, epochs: int = HEAD_EPOCHS) -> int:
    """Learn the head of machine `fingerprint` in each member of the MTL model from the
    entries measured on it (others are ignored), and make it the head plain keys use. Returns
    the records trained on."""
    if not is_mtl(model):
        raise MinitcError("fit_machine_head needs an MTL-TLP model (lm/mtl.py), not a TLPModel without heads")
    mine = [e for e in entries if e.fingerprint == fingerprint]
    used = 0
    for member in members_of(model):
        records, _ = cost_records(mine, member)
        if not records:
            raise MinitcError(
                f"no replayable program of {fingerprint} among {len(entries)} entries: nothing to learn its head from"
            )
        member.fit_head(fingerprint, records, epochs=epochs)
        used = len(records)
    use_hardware(model, fingerprint)
    return used


def adapted_mtl_model(entries: list, fingerprint: str, path=None):
    """The shipped MTL-TLP model (or the one at `path`) with a head for `fingerprint` learned
    from its entries, or None where there is no such model to start from (none there, or one
    without heads)."""
    path = Path(path) if path else shipped_mtl_path()
    if not path.exists():
        return None
    model = load_cost_model(path)
    if not is_mtl(model):
        return None
    fit_machine_head(model, entries, fingerprint)
    return model
