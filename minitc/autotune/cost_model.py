"""Cost models: rank unmeasured candidates of a workload so the search measures the promising ones.

The protocol the evolutionary search uses (search.py), in cost_protocol.py:

    model.fit(workload, traces, latencies_ms)  # measured data (inf = error); updates the model
                                               # (TLPModel: before its next predict or save)
    model.predict(workload, traces)            # -> np.ndarray of scores, higher = faster
    model.register(workload, outputs)          # optional: the workload's tensors, for replay

Only the ranking of scores within one workload means anything. The models:

- `RandomModel` (cost_protocol.py) scores at random: the baseline, and what MetaSchedule uses
  before it has data;
- `TLPModel` (tlp_model.py) is TLP's (ASPLOS'23): an attention network over the trace's steps,
  trained with LambdaRank within each workload;
- `EnsembleModel` (cost_ensemble.py) averages several TLPModels' standardised scores, and
  `load_cost_model` reads any saved model (mtl_model.py's MTLModel included).

    model = TLPModel(seed=0)
    model.pretrain([(workload, trace, latency_ms), ...], epochs=40)   # offline, from records
    model.save("tlp.pt"); model = TLPModel.load("tlp.pt")

This module is where callers import them from, and holds `default_cost_model()`.
"""

from __future__ import annotations

import os
import warnings

from minitc.autotune.cost_ensemble import EnsembleModel, load_cost_model
from minitc.autotune.cost_protocol import CostModel, RandomModel
from minitc.autotune.tlp_model import (  # noqa: F401 - re-exported: callers import them from here
    BLOB_KINDS,
    TLPConfig,
    TLPModel,
    _torch,
    labels_of,
    lambda_rank_loss,
    torch_threads,
)

__all__ = [
    "BLOB_KINDS",
    "CostModel",
    "EnsembleModel",
    "RandomModel",
    "TLPConfig",
    "TLPModel",
    "default_cost_model",
    "labels_of",
    "lambda_rank_loss",
    "load_cost_model",
    "torch_threads",
]


def default_cost_model() -> CostModel:
    """A TLPModel: the one saved at $MINITC_COST_MODEL if set, else a fresh one (a
    RandomModel, with a warning, where torch is not installed)."""
    try:
        _torch()
    except ImportError:
        warnings.warn("torch is not installed: the tuner's cost model falls back to random scores (pip install torch)")
        return RandomModel()
    path = os.environ.get("MINITC_COST_MODEL")
    if path:
        return load_cost_model(path)
    return TLPModel()
