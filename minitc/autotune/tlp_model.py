"""TLP's cost model (ASPLOS'23), scaled down: each trace step becomes a feature row
(features.py), a small attention network reads the [steps, features] matrix and sums a per-step
score, and training minimises LambdaRank within each workload on normalised throughput
`min latency / latency` (the minimum over the ranking group, a random subset of one workload's
records; failed candidates: 0).

    model = TLPModel(seed=0)
    model.pretrain([(workload, trace, latency_ms), ...], epochs=40)   # offline, from records
    model.save("tlp.pt"); model = TLPModel.load("tlp.pt")

A saved model is a blob {"meta", "state_dict"}; `meta["kind"]` names a subclass registered in
BLOB_KINDS (mtl_model.py: "mtl"), none a plain TLPModel. `load_models` reads a file of one model
or of an ensemble's members (cost_ensemble.py).
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

import numpy as np

from minitc.autotune.cost_protocol import CostModel
from minitc.autotune.features import NUM_FEATURES, Featurizer, pad_batch
from minitc.errors import MinitcError


@dataclass
class TLPConfig:
    max_steps: int = 64  # trace steps kept (traces here have 5-40)
    hidden: int = 64
    heads: int = 4
    ff_layers: int = 2  # residual Linear-ReLU blocks after the attention
    lr: float = 1e-3
    weight_decay: float = 1e-6
    grad_clip: float = 0.5
    group_size: int = 64  # candidates of one workload per ranking group
    groups_per_step: int = 4  # groups per optimiser step
    fit_steps: int = 48  # optimiser steps per fit() call (the tuner calls it every round) ...
    fit_max_seconds: float = 1.0  # ... stopping early past this (16 steps fall well short)
    warmup: int = 16  # predict() is random until trained on this many successful records
    val_fraction: float = 0.1  # pretrain: records held out to pick the best epoch
    threads: int = 1  # torch threads while the model works (0: leave torch's setting); one
    # thread is 2-4x faster than two on a loaded 2-core machine, where threads spin on each other


def _torch():
    import torch

    return torch


@contextmanager
def torch_threads(n: int):
    """Run torch with n intra-op threads, then restore the process's setting."""
    torch = _torch()
    old = torch.get_num_threads()
    if n and n != old:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n and n != old:
            torch.set_num_threads(old)


def _build_net(cfg: TLPConfig):
    """TLP's AttentionModule, scaled down: MLP embedding -> multi-head self-attention with a
    residual -> residual MLP blocks -> per-step score -> sum over the (unpadded) steps."""
    torch = _torch()
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg.hidden
            self.embed = nn.Sequential(nn.Linear(NUM_FEATURES, h // 2), nn.ReLU(), nn.Linear(h // 2, h), nn.ReLU())
            self.attn = nn.MultiheadAttention(h, cfg.heads, batch_first=True)
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(h, h), nn.ReLU()) for _ in range(cfg.ff_layers)])
            self.head = nn.Sequential(nn.Linear(h, h // 2), nn.ReLU(), nn.Linear(h // 2, 1))

        def features(self, x, mask):  # x [B, S, F], mask [B, S] True on real steps -> [B, S, hidden]
            h = self.embed(x)
            a, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
            h = h + a
            for block in self.blocks:
                h = h + block(h)
            return h

        def forward(self, x, mask):
            return (self.head(self.features(x, mask)).squeeze(-1) * mask).sum(dim=1)

    return Net()


def labels_of(latencies_ms) -> np.ndarray:
    """Normalised throughput: best latency / latency, in (0, 1]; errors (inf, nan) get 0."""
    lat = np.asarray(latencies_ms, float)
    ok = np.isfinite(lat) & (lat > 0)
    out = np.zeros(len(lat))
    if ok.any():
        out[ok] = lat[ok].min() / lat[ok]
    return out


def lambda_rank_loss(scores, labels):
    """LambdaRank (TLP's LambdaRankLoss): pairwise logistic loss on every pair with different
    labels, weighted by the NDCG change of swapping the two; None if the group has no pairs."""
    torch = _torch()
    n = scores.shape[0]
    gains = torch.pow(2.0, labels) - 1.0
    ideal = torch.sort(gains, descending=True).values
    discount = 1.0 / torch.log2(torch.arange(n, dtype=scores.dtype, device=scores.device) + 2.0)
    idcg = (ideal * discount).sum()
    pairs = labels[:, None] > labels[None, :]
    if idcg <= 0 or not bool(pairs.any()):
        return None
    rank = torch.empty(n, dtype=torch.long, device=scores.device)
    rank[torch.argsort(scores.detach(), descending=True)] = torch.arange(n, device=scores.device)
    disc = discount[rank]
    weight = (gains[:, None] - gains[None, :]).abs() * (disc[:, None] - disc[None, :]).abs() / idcg
    diff = scores[:, None] - scores[None, :]
    return (weight * torch.nn.functional.softplus(-diff))[pairs].sum()


def _by_workload(records: list) -> dict:
    """{workload: ([trace, ...], [latency ms, inf for a failure, ...])} of (workload, trace, ms) records."""
    out: dict = {}
    for workload, trace, ms in records:
        traces, lat = out.setdefault(workload, ([], []))
        traces.append(trace)
        lat.append(float(ms) if ms is not None else math.inf)
    return out


class _Records:
    """One workload's measured candidates and their feature matrices."""

    def __init__(self):
        self.traces: list = []
        self.latencies: list = []
        self.features: list = []

    def labels(self, idx=None) -> np.ndarray:
        lat = np.asarray(self.latencies, float)
        return labels_of(lat if idx is None else lat[idx])


class TLPModel(CostModel):
    """TLP-style ranking model over trace steps (see the module docstring)."""

    VERSION = 1

    def __init__(self, seed: int = 0, device: str = "cpu", **hyper):
        torch = _torch()
        names = {f.name for f in fields(TLPConfig)}
        unknown = sorted(set(hyper) - names)
        if unknown:
            raise MinitcError(
                f"TLPModel: unknown hyper-parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        self.config = TLPConfig(**hyper)
        self.seed, self.device = seed, torch.device(device)
        self.featurizer = Featurizer(self.config.max_steps)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = _build_net(self.config).to(self.device)
        self.opt = self._optimizer(self.net.parameters())
        self.rng = np.random.default_rng(seed)
        self.data: dict = {}  # workload -> _Records
        self.trained = 0  # successful records the network has been trained on
        self._pending: list = []  # fit() calls whose training waits for the next predict/save
        self.net.eval()

    def _optimizer(self, params):
        return _torch().optim.Adam(params, lr=self.config.lr, weight_decay=self.config.weight_decay)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.net.parameters())

    # -- protocol ----------------------------------------------------------------------------
    def register(self, workload: str, outputs) -> None:
        self.featurizer.register(workload, outputs)

    def fit(self, workload: str, traces: list, latencies_ms: list) -> None:
        """Add measured candidates and train a few steps on everything seen so far, this
        workload's groups first (capped by fit_steps and fit_max_seconds). The training runs
        when the model is next asked for scores or saved, in the order of the calls: a search's
        last round is told results that nothing ranks by afterwards, and the language model's
        search only ranks once it has seen enough measurements."""
        if len(traces) != len(latencies_ms):
            raise MinitcError(f"fit: {len(traces)} traces but {len(latencies_ms)} latencies")
        self._pending.append((workload, list(traces), list(latencies_ms)))

    def _train_pending(self) -> None:
        if not self._pending:
            return
        cfg = self.config
        while self._pending:
            workload, traces, latencies_ms = self._pending.pop(0)
            self._add(workload, traces, latencies_ms)
            start = time.perf_counter()
            others = [w for w in self.data if w != workload]
            with torch_threads(cfg.threads):
                for _ in range(cfg.fit_steps):
                    groups = [self._sample_group(workload)]
                    for w in self.rng.permutation(len(others))[: cfg.groups_per_step - 1]:
                        groups.append(self._sample_group(others[int(w)]))
                    self._step(groups)
                    if time.perf_counter() - start > cfg.fit_max_seconds:
                        break
        self.trained = sum(int(np.isfinite(r.latencies).sum()) for r in self.data.values())

    def predict(self, workload: str, traces: list) -> np.ndarray:
        """Scores, higher = predicted faster (random until `warmup` successful records)."""
        if not traces:
            return np.zeros(0)
        self._train_pending()
        if self.trained < self.config.warmup:
            return self.rng.random(len(traces))
        return self._scores([self.featurizer(workload, t) for t in traces], workload)

    # -- offline -----------------------------------------------------------------------------
    def pretrain(self, records: list, epochs: int = 40, log=None, val_records: list | None = None) -> list:
        """Train on (workload, trace, latency_ms) records. A `val_fraction` of each workload's
        records is held out and the epoch with the lowest validation loss is kept. Returns one
        dict per epoch (train/val loss). With `val_records`, those pick the epoch instead (all of
        `records` are trained on), and the model as it was before training is a candidate too:
        MTLModel.fit_head holds out whole workloads, so that a head is kept only as far as it
        ranks workloads it did not learn from."""
        self._train_pending()
        by_workload = _by_workload(records)
        val: dict = {}
        for workload, (traces, lat) in _by_workload(val_records or []).items():
            val[workload] = [self.featurizer(workload, t) for t in traces], labels_of(lat)
        for workload, (traces, lat) in by_workload.items():
            idx = self.rng.permutation(len(traces))
            n_val = int(len(traces) * self.config.val_fraction) if len(traces) >= 20 and not val_records else 0
            keep, held = idx[n_val:], idx[:n_val]
            self._add(workload, [traces[i] for i in keep], [lat[i] for i in keep])
            if n_val:
                val[workload] = [self.featurizer(workload, traces[i]) for i in held], labels_of([lat[i] for i in held])
        history, best, best_state = [], math.inf, None
        if val_records:
            best, best_state = self._val_loss(val), copy.deepcopy(self.net.state_dict())
        with torch_threads(self.config.threads):
            for epoch in range(epochs):
                row = {"epoch": epoch + 1, "train_loss": self._epoch()}
                if val:
                    row["val_loss"] = self._val_loss(val)
                    if row["val_loss"] < best:
                        best, best_state = row["val_loss"], copy.deepcopy(self.net.state_dict())
                history.append(row)
                if log is not None:
                    log(row)
        if best_state is not None:
            self.net.load_state_dict(best_state)
        self.trained = sum(int(np.isfinite(r.latencies).sum()) for r in self.data.values())
        return history

    def save(self, path) -> None:
        """Weights and configuration (not the training records)."""
        _torch().save(self.to_blob(), str(path))

    def to_blob(self) -> dict:
        self._train_pending()
        state = {k: v.detach().cpu() for k, v in self.net.state_dict().items()}
        meta = {"version": self.VERSION, "config": asdict(self.config), "seed": self.seed, "trained": self.trained}
        return {"meta": meta, "state_dict": state}

    @classmethod
    def load(cls, path, device: str = "cpu") -> TLPModel:
        models, ensemble = load_models(path, device)
        if ensemble or not isinstance(models[0], cls):
            raise MinitcError(f"{path} holds an ensemble of TLPModels; load it with load_cost_model")
        return models[0]

    @classmethod
    def from_blob(cls, blob: dict, source, device: str = "cpu") -> TLPModel:
        meta = blob["meta"]
        if meta.get("version") != cls.VERSION:
            raise MinitcError(
                f"{source} is a TLPModel of format version {meta.get('version')}; this minitc reads {cls.VERSION}"
            )
        # meta["init"]: what a subclass needs to rebuild its network (MTLModel: its heads)
        model = cls(seed=meta["seed"], device=device, **meta.get("init", {}), **meta["config"])
        model.net.load_state_dict(blob["state_dict"])
        model.trained = meta["trained"]
        return model

    # -- internals ---------------------------------------------------------------------------
    def _add(self, workload: str, traces: list, latencies_ms: list) -> None:
        recs = self.data.setdefault(workload, _Records())
        for trace, ms in zip(traces, latencies_ms):
            ms = float(ms) if ms is not None and not (isinstance(ms, float) and math.isnan(ms)) else math.inf
            recs.traces.append(trace)
            recs.latencies.append(ms)
            recs.features.append(self.featurizer(workload, trace))

    def _epoch(self) -> float:
        """One pass over all records in ranking groups of `group_size` (one workload each)."""
        chunks, size = [], self.config.group_size
        for workload, recs in self.data.items():
            idx = self.rng.permutation(len(recs.traces))
            chunks += [(workload, idx[i : i + size]) for i in range(0, len(idx), size) if len(idx[i : i + size]) > 1]
        order, losses = self.rng.permutation(len(chunks)), []
        for i in range(0, len(order), self.config.groups_per_step):
            loss = self._step([self._group(*chunks[j]) for j in order[i : i + self.config.groups_per_step]])
            if loss is not None:
                losses.append(loss)
        return float(np.mean(losses)) if losses else float("nan")

    def _group(self, workload: str, idx) -> tuple:
        recs = self.data[workload]
        return [recs.features[i] for i in idx], recs.labels(idx), workload

    def _sample_group(self, workload: str) -> tuple:
        n = len(self.data[workload].traces)
        idx = self.rng.permutation(n)[: self.config.group_size]
        return self._group(workload, idx)

    def _forward(self, matrices: list, workloads: list):
        """Scores of feature matrices; `workloads` names each one's workload (MTLModel picks a
        head by it; one TLP network scores every workload alike)."""
        torch = _torch()
        x, mask = pad_batch(matrices)
        return self.net(torch.from_numpy(x).to(self.device), torch.from_numpy(mask).to(self.device))

    def _step(self, groups: list):
        """One optimiser step on the summed LambdaRank loss of the groups."""
        torch = _torch()
        groups = [(m, y, w) for m, y, w in groups if len(m) > 1 and (y > 0).any()]
        if not groups:
            return None
        with torch.enable_grad():  # tuning may run inside the caller's no_grad (minitc compile does)
            self.net.train()
            scores = self._forward([m for ms, _, _ in groups for m in ms], [w for ms, _, w in groups for _ in ms])
            losses, at = [], 0
            for ms, y, _ in groups:
                loss = lambda_rank_loss(
                    scores[at : at + len(ms)], torch.as_tensor(y, dtype=scores.dtype, device=self.device)
                )
                at += len(ms)
                if loss is not None:
                    losses.append(loss)
            self.net.eval()
            if not losses:
                return None
            total = torch.stack(losses).mean()
            self.opt.zero_grad()
            total.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.config.grad_clip)
        self.opt.step()
        return float(total.detach())

    def _val_loss(self, val: dict) -> float:
        torch = _torch()
        losses = []
        with torch.no_grad():
            for workload, (matrices, y) in val.items():
                loss = lambda_rank_loss(
                    self._forward(matrices, [workload] * len(matrices)),
                    torch.as_tensor(y, dtype=torch.float32, device=self.device),
                )
                if loss is not None:
                    losses.append(float(loss))
        return float(np.mean(losses)) if losses else math.inf

    def _scores(self, matrices: list, workload: str, batch: int = 512) -> np.ndarray:
        torch = _torch()
        out = []
        with torch.no_grad(), torch_threads(self.config.threads):
            for i in range(0, len(matrices), batch):
                chunk = matrices[i : i + batch]
                out.append(self._forward(chunk, [workload] * len(chunk)).cpu().numpy())
        return np.concatenate(out).astype(float)


# blob kind -> the class that rebuilds it; subclasses in other modules register themselves
# (mtl_model.py: "mtl"; minitc/autotune/__init__.py imports it, so it is always registered)
BLOB_KINDS: dict = {}


def _from_blob(blob: dict, source, device: str):
    """A TLPModel, or the registered subclass the blob's kind names (MTLModel for "mtl")."""
    kind = blob["meta"].get("kind")
    if kind is None:
        return TLPModel.from_blob(blob, source, device)
    if kind not in BLOB_KINDS:
        raise MinitcError(f"{source}: a cost model of kind {kind!r}, which this minitc cannot read")
    return BLOB_KINDS[kind].from_blob(blob, source, device)


def load_models(path, device: str = "cpu") -> tuple:
    """([model, ...], whether the file holds an ensemble) of the file at `path`: a TLPModel,
    one of the subclasses BLOB_KINDS names, or an ensemble's members."""
    torch = _torch()
    try:
        blob = torch.load(str(path), map_location="cpu", weights_only=True)
        ensemble = "ensemble" in blob
        models = [_from_blob(b, path, device) for b in (blob["ensemble"] if ensemble else [blob])]
    except MinitcError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same answer
        raise MinitcError(f"{path} is not a saved TLPModel ({type(e).__name__}: {e})") from None
    return models, ensemble
