"""What minitc.lm adds to the tuner, registered through the entry point group `minitc.plugins`
(pyproject.toml) the first time the tuner looks a plug-in up:

- the `tlm` strategy: the language model proposes decisions (strategy.py); on a GPU target the
  GPU model does (pipeline.SHIPPED_GPU, or `lm` if given), and without one trained on GPU
  sentences tuning falls back to evolutionary search, with a warning;
- a `sentence` field in every tuning record, whichever strategy found the program, so that
  every measurement can become training data (data.demonstrations reads it back).

The factories import torch and measure the machine only when called.
"""

from __future__ import annotations

from minitc.autotune.cost_model import default_cost_model
from minitc.autotune.registry import make_strategy, register_record_extras, register_strategy
from minitc.errors import warn_user
from minitc.lm.hardware import hardware
from minitc.lm.language import SentenceWriter


def tlm_strategy(space, rng, cost_model=None, lm=None, learn: bool = False, **_):
    from minitc.lm.strategy import tlm_search

    if space.gpu and lm is None and not _gpu_model_ready():
        warn_user("no language model trained on GPU sentences is installed; tuning the GPU with evolutionary search")
        return make_strategy("evolutionary", space, rng, cost_model)

    from minitc.lm.cost import shipped_cost_model

    return tlm_search(space, rng, cost_model or shipped_cost_model(space.target) or default_cost_model(), lm, learn)


def _gpu_model_ready() -> bool:
    from minitc.lm.pipeline import default_model_path

    return default_model_path(gpu=True).exists()


def sentence_extras(space):
    """fn(candidate) -> {"sentence": its tensor-language sentence} for this space."""
    write = SentenceWriter(space, hardware(space.target))
    return lambda candidate: {"sentence": str(write(candidate.decisions))}


def register() -> None:
    register_strategy("tlm", tlm_strategy)
    register_record_extras("sentence", sentence_extras)
