"""Several TLPModels ranking together (`EnsembleModel`), and `load_cost_model`, which reads any
saved cost model: one TLPModel (or a registered subclass such as MTLModel) or an ensemble."""

from __future__ import annotations

import numpy as np

from minitc.autotune.cost_protocol import CostModel
from minitc.autotune.tlp_model import TLPModel, _torch, load_models
from minitc.errors import MinitcError


class EnsembleModel(CostModel):
    """Several TLPModels trained alike from different seeds (initial weights, held-out
    records, batches), ranking together: each member's scores are standardised over the
    candidates and averaged. Pretrained members disagree most on a workload's first
    proposals, where one training's mistake would decide what is measured."""

    def __init__(self, members: list):
        if not members:
            raise MinitcError("an ensemble needs at least one member")
        self.members = list(members)

    @property
    def trained(self) -> int:
        return min(m.trained for m in self.members)

    def register(self, workload: str, outputs) -> None:
        for m in self.members:
            m.register(workload, outputs)

    def fit(self, workload: str, traces: list, latencies_ms: list) -> None:
        for m in self.members:
            m.fit(workload, traces, latencies_ms)

    def predict(self, workload: str, traces: list) -> np.ndarray:
        total = np.zeros(len(traces))
        for m in self.members:
            scores = np.asarray(m.predict(workload, traces), dtype=float)
            spread = scores.std()
            total += (scores - scores.mean()) / spread if spread > 0 else 0.0
        return total / len(self.members)

    def save(self, path) -> None:
        _torch().save({"ensemble": [m.to_blob() for m in self.members]}, str(path))


def load_cost_model(path, device: str = "cpu") -> TLPModel | EnsembleModel:
    """The TLPModel, MTLModel or EnsembleModel saved at `path`."""
    models, ensemble = load_models(path, device)
    return EnsembleModel(models) if ensemble else models[0]
