"""The tensor language model: a compact decoder-only transformer over schedule sentences.

A sentence describes a workload, the hardware and the design space, then a separator, then the
schedule decisions. Decoding (lm/decode.py) advances every sample of a batch one token per step
from a shared prompt, so the model exposes a key/value cache: `forward` takes and returns it,
`expand_cache` shares a batch-1 prompt across samples and `select_cache` keeps surviving rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from minitc.errors import MinitcError

CHECKPOINT_FORMAT = "minitc-lm-2"  # minitc-lm-1 plus "sha256", the content hash
LEGACY_FORMAT = "minitc-lm-1"  # no content hash: loads with a warning

# One (keys, values) pair per layer, each [batch, heads, cached positions, head dim].
Cache = list[tuple[torch.Tensor, torch.Tensor]]


class LMError(MinitcError):
    """The language model cannot do this (sequence too long, bad tokens, bad cache)."""


class CheckpointError(LMError):
    """A language-model checkpoint file is missing, damaged or does not fit its config."""


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    max_len: int = 640
    dropout: float = 0.0

    def __post_init__(self):
        if self.vocab_size < 1 or self.d_model < 1 or self.n_layers < 1 or self.max_len < 1:
            raise LMError(f"model config needs positive sizes, got {self}")
        if self.n_heads < 1 or self.d_model % self.n_heads:
            raise LMError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise LMError(f"unknown model config keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


class SelfAttention(nn.Module):
    """Multi-head causal self-attention that extends a key/value cache."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, past: tuple | None):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        if past is not None and len(past) == 4:
            out, kv = _attend_shared_prompt(q, k, v, past)
            return self.proj(out.transpose(1, 2).reshape(batch, length, width)), kv
        if past is None:
            mask, causal = None, True
        else:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
            # New token i sees every cached position and new tokens 0..i.
            n_past = past[0].shape[2]
            mask = torch.ones(length, n_past + length, dtype=torch.bool, device=x.device)
            mask, causal = mask.tril(diagonal=n_past), False
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width)), (k, v)


def _attend_shared_prompt(q, k, v, past):
    """Attention for many samples continuing one prompt. `past` is (prompt keys, prompt values)
    with batch 1 and (keys, values) of what each sample wrote since. The prompt is never
    copied per sample: the samples' queries are stacked against it in one matmul."""
    kp, vp, kg, vg = past
    kg, vg = torch.cat([kg, k], dim=2), torch.cat([vg, v], dim=2)
    batch, heads, length, dh = q.shape
    scale = dh**-0.5
    stacked = q.transpose(0, 1).reshape(heads, batch * length, dh)  # [H, B*T, Dh]
    s_prompt = (stacked @ kp[0].transpose(1, 2)).view(heads, batch, length, -1).transpose(0, 1) * scale
    s_own = (q @ kg.transpose(2, 3)) * scale  # [B, H, T, G]
    own = kg.shape[2]
    visible = torch.ones(length, own, dtype=torch.bool, device=q.device).tril(diagonal=own - length)
    s_own = s_own.masked_fill(~visible, float("-inf"))
    w = torch.softmax(torch.cat([s_prompt, s_own], dim=-1), dim=-1)
    n_prompt = kp.shape[2]
    w_prompt = w[..., :n_prompt].transpose(0, 1).reshape(heads, batch * length, n_prompt)
    out = (w_prompt @ vp[0]).view(heads, batch, length, dh).transpose(0, 1) + w[..., n_prompt:] @ vg
    return out, (kp, vp, kg, vg)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, past: tuple | None):
        attended, kv = self.attn(self.ln1(x), past)
        x = x + self.drop(attended)
        return x + self.drop(self.mlp(self.ln2(x))), kv


class TensorLM(nn.Module):
    """Decoder-only transformer with learned positions and an output head tied to the embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(_init_weights)

    def with_vocab(self, vocab_size: int) -> TensorLM:
        """A copy that knows `vocab_size` tokens, the first ones its own: the tokens appended to
        the vocabulary since it was trained start as fresh small embeddings."""
        if vocab_size < self.cfg.vocab_size:
            raise LMError(f"cannot shrink a model's vocabulary from {self.cfg.vocab_size} to {vocab_size}")
        grown = TensorLM(ModelConfig.from_dict({**self.cfg.to_dict(), "vocab_size": vocab_size}))
        state = dict(self.state_dict())
        weight = grown.tok_emb.weight.detach().clone()
        weight[: self.cfg.vocab_size] = state["tok_emb.weight"]
        state["tok_emb.weight"] = weight
        grown.load_state_dict(state)
        return grown

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, cache: Cache | None = None, start: int | None = None):
        """Logits [B, T, V] for `tokens` [B, T] and the cache extended by these T positions.

        With `cache`, the tokens continue the cached sequence: they attend to every cached
        position. Positions are `start + arange(T)`; `start` defaults to the cached length.
        """
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise LMError(f"tokens must be a LongTensor [batch, length], got {tokens.dtype} {list(tokens.shape)}")
        batch, length = tokens.shape
        n_cached = self._check_cache(cache, batch)
        start = n_cached if start is None else start
        if start < 0 or start + length > self.cfg.max_len:
            raise LMError(
                f"sequence of {start + length} tokens (positions {start}..{start + length - 1}) "
                f"is longer than the model's max_len={self.cfg.max_len}"
            )
        if length and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size):
            raise LMError(f"token ids must lie in [0, {self.cfg.vocab_size}), got {tokens.min()}..{tokens.max()}")
        positions = torch.arange(start, start + length, device=tokens.device)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(positions))
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)
        return F.linear(self.ln_f(x), self.tok_emb.weight), new_cache

    def _check_cache(self, cache: Cache | None, batch: int) -> int:
        """Number of cached positions; raises LMError for a cache of the wrong shape."""
        if cache is None:
            return 0
        if len(cache) != self.cfg.n_layers:
            raise LMError(f"cache has {len(cache)} layers, the model has {self.cfg.n_layers}")
        rows = cache[0][-2].shape[0]  # a shared prompt's own part, or the plain keys
        if rows != batch:
            raise LMError(f"cache holds {rows} rows but tokens have batch {batch}")
        return sum(t.shape[2] for t in cache[0][::2])


def _init_weights(module: nn.Module) -> None:
    # GPT-2 style: small normal weights keep the tied head's initial logits near uniform.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def expand_cache(cache: Cache, batch: int) -> Cache:
    """Share a batch-1 cache (a prompt) across `batch` rows. The prompt is kept once; each row
    gets its own (empty) continuation, so decoding never copies the prompt."""
    rows = cache[0][-2].shape[0] if cache else 1
    if rows != 1:
        raise LMError(f"expand_cache needs a batch-1 cache, got {rows} rows")
    out = []
    for layer in cache:
        k, v = layer[0], layer[1]
        if len(layer) == 4:
            k, v = torch.cat([k, layer[2]], dim=2), torch.cat([v, layer[3]], dim=2)
        empty = k.new_zeros(batch, k.shape[1], 0, k.shape[3])
        out.append((k, v, empty, empty.clone()))
    return out


def select_cache(cache: Cache, index: torch.Tensor) -> Cache:
    """Keep the rows `index` (a LongTensor of row numbers) of every layer's keys and values."""
    index = index.to(device=cache[0][0].device, dtype=torch.long) if cache else index
    if cache and len(cache[0]) == 4:
        return [(kp, vp, kg.index_select(0, index), vg.index_select(0, index)) for kp, vp, kg, vg in cache]
    return [(k.index_select(0, index), v.index_select(0, index)) for k, v in cache]


# -- checkpoints ---------------------------------------------------------------------------------


def content_hash(payload: dict) -> str:
    """sha256 of a checkpoint's config, vocabulary, meta and stored weights (bytes, dtype and
    shape of each tensor, by name): what `load_checkpoint` verifies to catch a damaged file."""
    h = hashlib.sha256()
    head = {k: payload[k] for k in ("config", "vocab", "meta")}
    h.update(json.dumps(head, sort_keys=True).encode())
    for name in sorted(payload["state_dict"]):
        t = payload["state_dict"][name].detach().cpu().contiguous()
        h.update(f"\n{name} {str(t.dtype)} {list(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def write_payload(path, payload: dict) -> None:
    """Write a checkpoint payload with its content hash, atomically (a temporary file, then
    rename), so a killed save never leaves a half-written checkpoint."""
    payload = {**payload, "format": CHECKPOINT_FORMAT}
    payload["sha256"] = content_hash(payload)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a checkpoint is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(path, model: TensorLM, vocab: list, meta: dict, half: bool = False) -> None:
    """Write config, vocabulary, weights, meta and their content hash atomically (see
    write_payload). `meta` must be plain JSON-able data: checkpoints are loaded with
    `weights_only=True`. `half` stores the weights as float16 (the shipped checkpoint: half the
    size; loading restores float32)."""
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise LMError(f"checkpoint meta must be plain JSON-able data: {e}") from None
    if len(vocab) != model.cfg.vocab_size:
        raise LMError(f"vocab has {len(vocab)} tokens but the model's vocab_size is {model.cfg.vocab_size}")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": model.cfg.to_dict(),
        "vocab": list(vocab),
        "state_dict": {k: v.half() if half and v.is_floating_point() else v for k, v in model.state_dict().items()},
        "meta": meta,
    }
    write_payload(path, payload)


def load_checkpoint(path) -> tuple:
    """(model in eval mode, vocab, meta) of a checkpoint; CheckpointError names what is wrong."""
    path = str(path)

    def fail(why: str):
        return CheckpointError(f"{path}: {why}")

    if not os.path.isfile(path):
        raise fail("no such checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  (a damaged file can fail anywhere in the unpickler)
        first_sentence = str(e).split(". ")[0].splitlines()[0] if str(e) else ""  # torch's advice does not apply
        raise fail(f"not a readable torch file ({type(e).__name__}: {first_sentence})") from None
    if not isinstance(payload, dict) or payload.get("format") not in (CHECKPOINT_FORMAT, LEGACY_FORMAT):
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise fail(f"format is {got!r}, expected {CHECKPOINT_FORMAT!r}")
    missing = {"config", "vocab", "state_dict", "meta"} - set(payload)
    if missing:
        raise fail(f"missing entries {sorted(missing)}")
    _verify_hash(path, payload, fail)
    try:
        cfg = ModelConfig.from_dict(payload["config"])
    except (LMError, TypeError) as e:
        raise fail(f"bad model config: {e}") from None
    vocab = payload["vocab"]
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise fail("vocab is not a list of strings")
    if len(vocab) != cfg.vocab_size:
        raise fail(f"vocab has {len(vocab)} tokens but the config says vocab_size={cfg.vocab_size}")
    model = TensorLM(cfg)
    state, expected = payload["state_dict"], model.state_dict()
    absent = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if absent:
        raise fail(f"missing weights {absent[:4]}{' ...' if len(absent) > 4 else ''}")
    if extra:
        raise fail(f"unexpected weights {extra[:4]}{' ...' if len(extra) > 4 else ''}")
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise fail(f"{name} has shape {list(state[name].shape)}, the config needs {list(tensor.shape)}")
    model.load_state_dict(state)
    return model.eval(), vocab, payload["meta"]


def _verify_hash(path: str, payload: dict, fail) -> None:
    """Refuse a checkpoint whose content does not match its stored hash; warn about one saved
    without a hash (by a minitc older than the hash)."""
    if payload["format"] == LEGACY_FORMAT:
        warnings.warn(
            f"{path}: this checkpoint has no content hash (saved by an older minitc), so damage to it cannot be "
            "detected; save it again (minitc.lm.model.save_checkpoint) or retrain it",
            stacklevel=3,
        )
        return
    stored = payload.get("sha256")
    if not isinstance(payload["state_dict"], dict) or not all(
        isinstance(t, torch.Tensor) for t in payload["state_dict"].values()
    ):
        raise fail("state_dict is not a mapping of names to tensors")
    try:
        actual = content_hash(payload)
    except (TypeError, ValueError) as e:
        raise fail(f"cannot hash its content ({e})") from None
    if stored != actual:
        raise fail(
            f"content does not match its sha256 (stored {str(stored)[:16]}..., computed {actual[:16]}...): the file "
            "is damaged or was modified. Reinstall minitc for the shipped model (lm/checkpoints/cpu.pt); retrain, "
            "or restore a copy of, a model of your own"
        )
