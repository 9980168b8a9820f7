"""The cost model's plug point (the evolutionary search and the language model's search rank
with it) and its baseline, random scores. The protocol:

    model.fit(workload, traces, latencies_ms)  # measured data (inf = error); updates the model
    model.predict(workload, traces)            # -> np.ndarray of scores, higher = faster
    model.register(workload, outputs)          # optional: the workload's tensors, for replay

Only the ranking of scores within one workload means anything. `RandomModel` scores at random
(the baseline, and what MetaSchedule uses before it has data); tlp_model.py has the learned one.
"""

from __future__ import annotations

import numpy as np


class CostModel:
    """The protocol: `fit` measured data, `predict` scores (higher = predicted faster)."""

    def register(self, workload: str, outputs) -> None:
        """Tell the model which computation `workload` is (its output tensors)."""

    def fit(self, workload: str, traces: list, latencies_ms: list) -> None:
        raise NotImplementedError

    def predict(self, workload: str, traces: list) -> np.ndarray:
        raise NotImplementedError


class RandomModel(CostModel):
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def fit(self, workload: str, traces: list, latencies_ms: list) -> None:
        pass

    def predict(self, workload: str, traces: list) -> np.ndarray:
        return self.rng.random(len(traces))
