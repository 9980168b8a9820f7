"""What the zoo's factories share (benchmarks/models_zoo.py, zoo_hf.py, zoo_nn.py): the seed,
random inputs, batch-norm statistics of a random batch, and a transformers model's last hidden
state as its one output."""

from __future__ import annotations

import torch
from torch import nn

SEED = 0


def calibrate_batch_norm(model: nn.Module, shape: tuple, seed: int = SEED) -> nn.Module:
    """Batch-norm statistics of one random batch of `shape` (a cumulative average, so one pass
    sets them), as if the model had been trained on such data; returns it in eval mode."""
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 1)))
    for m in norms:
        m.momentum = 0.1
    return model.eval()


def image(shape: tuple, seed: int = SEED) -> tuple:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)),)


# --- transformers -------------------------------------------------------------------------------
ATTENTION = "sdpa"  # PyTorch's scaled_dot_product_attention: it exports, and it is what eager runs


class LastHiddenState(nn.Module):
    """A transformers model returning its last hidden state only (one tensor)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return self.model(*inputs).last_hidden_state


def token_ids(vocab: int, seq: int, seed: int = SEED) -> torch.Tensor:
    return torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(seed))
