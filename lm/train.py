"""Training the tensor language model on tokenised schedule sentences.

Only decision-value tokens are targets (the loss mask): the prompt part of a sentence is always
given at decoding time, so learning to predict it would waste capacity. Each example carries a
weight; fine-tuning sets it to the normalised measured throughput so fast schedules count more.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minitc.lm.model import LMError, TensorLM


@dataclass
class Example:
    """One sentence. loss_mask[t] is True where tokens[t] is a trained target; the model predicts
    tokens[t] from tokens[:t], so position 0 can never be one."""

    tokens: list[int]
    loss_mask: list[bool]
    weight: float = 1.0

    def __post_init__(self):
        if len(self.tokens) != len(self.loss_mask):
            raise LMError(f"example has {len(self.tokens)} tokens but a loss mask of {len(self.loss_mask)}")
        if self.loss_mask and self.loss_mask[0]:
            raise LMError("loss_mask[0] is True, but the first token has no context to predict it from")
        if not self.weight >= 0:
            raise LMError(f"example weight must be >= 0, got {self.weight}")


def collate(examples: list[Example], pad_id: int = 0, device=None):
    """(inputs [B, T-1], targets [B, T-1], target weights [B, T-1]) with right padding.
    Padding has weight 0, and attention is causal, so it never influences real positions."""
    length = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), length), pad_id, dtype=torch.long)
    weights = torch.zeros(len(examples), length)
    for row, e in enumerate(examples):
        tokens[row, : len(e.tokens)] = torch.tensor(e.tokens, dtype=torch.long)
        weights[row, : len(e.tokens)] = torch.tensor(e.loss_mask, dtype=torch.float32) * e.weight
    tokens, weights = tokens.to(device), weights.to(device)
    return tokens[:, :-1], tokens[:, 1:], weights[:, 1:]


def batch_loss(model: TensorLM, examples: list[Example], pad_id: int = 0):
    """(weighted mean cross-entropy over target positions, total weight, logits, targets, weights).
    The sum of weights is the denominator, so an example of weight 0 is the same as no example."""
    inputs, targets, weights = collate(examples, pad_id, next(model.parameters()).device)
    logits, _ = model(inputs)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(weights)
    total = weights.sum()
    return (ce * weights).sum() / total.clamp_min(1e-12), total, logits, targets, weights


def length_buckets(examples: list[Example], batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """Batches of example indices of similar length (little padding), in a shuffled order.
    Ties in length are shuffled too, so equal-length examples do not always share a batch."""
    order = torch.randperm(len(examples), generator=generator).tolist()
    order.sort(key=lambda i: len(examples[i].tokens))  # stable: keeps the shuffle among ties
    buckets = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [buckets[i] for i in torch.randperm(len(buckets), generator=generator).tolist()]


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0 at `total` steps."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


@torch.enable_grad()  # a caller's no_grad (tuning inside `minitc compile`) must not stop training
def train(
    model: TensorLM,
    examples: list[Example],
    *,
    epochs: int = 1,
    batch_size: int = 32,
    lr: float = 3e-4,
    weight_decay: float = 0.01,
    warmup: int = 50,
    grad_clip: float = 1.0,
    pad_id: int = 0,
    seed: int = 0,
    progress=None,
    max_seconds: float | None = None,
) -> list[float]:
    """Train with AdamW and a warm-up + cosine schedule; returns the loss of every step.

    `progress(step, total_steps, loss)` is called after each step (step counts from 1).
    `max_seconds` stops early; the learning rate then decays with the time spent as well as
    with the steps taken. The model is left in eval mode.
    """
    if not examples:
        raise LMError("no training examples")
    generator = torch.Generator().manual_seed(seed)
    total_steps = epochs * math.ceil(len(examples) / batch_size)
    # A short fine-tuning run would otherwise spend most of its steps warming up.
    warmup = min(warmup, max(1, total_steps // 5))
    # Decay matrices only: biases and LayerNorm gains have no scale to regularise.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds

    def factor(s: int) -> float:
        # With a time limit the schedule follows the time spent too, whichever is further, so a
        # run the limit stops ends at a decayed rate rather than in the middle of the schedule.
        if deadline is not None:
            s = max(s, (time.monotonic() - started) / max_seconds * total_steps)
        return lr_factor(s, warmup, total_steps)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    history, step = [], 0
    model.train()
    try:
        for _ in range(epochs):
            for bucket in length_buckets(examples, batch_size, generator):
                loss, total_weight = batch_loss(model, [examples[i] for i in bucket], pad_id)[:2]
                optimizer.zero_grad(set_to_none=True)
                if total_weight > 0:  # a batch without weighted targets would only apply decay
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, grad_clip)
                    optimizer.step()
                schedule.step()
                step += 1
                history.append(loss.item())
                if progress is not None:
                    progress(step, total_steps, history[-1])
                if deadline is not None and time.monotonic() > deadline:
                    return history
        return history
    finally:
        model.eval()


@torch.no_grad()
def evaluate(model: TensorLM, examples: list[Example], batch_size: int = 64, pad_id: int = 0) -> dict:
    """{"loss", "accuracy", "targets"}: mean cross-entropy and argmax accuracy over target tokens
    (every target counts once; example weights are ignored). NaN when there are no targets."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].tokens))
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(0, len(order), batch_size):
        batch = [Example(examples[j].tokens, examples[j].loss_mask) for j in order[i : i + batch_size]]
        loss, total, logits, targets, mask = batch_loss(model, batch, pad_id)
        is_target = mask > 0
        loss_sum += loss.item() * total.item()
        correct += (logits.argmax(-1) == targets)[is_target].sum().item()
        count += int(is_target.sum().item())
    model.train(was_training)
    if count == 0:
        return {"loss": math.nan, "accuracy": math.nan, "targets": 0}
    return {"loss": loss_sum / count, "accuracy": correct / count, "targets": count}
