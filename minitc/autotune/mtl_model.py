"""MTL-TLP (TLP, ASPLOS'23, its second contribution): one cost model for many machines.

A TLP network (cost_model.TLPModel) is split in two: the backbone (step embedding, attention,
residual blocks) is shared by every machine, and the last MLP that turns each step's hidden
vector into a score is a *head*, one per hardware description. Latencies of two machines rank
programs differently (another SIMD width, other caches), but what a schedule step is, and how
it interacts with its neighbours, is the same everywhere: the backbone learns that from every
machine's measurements, a head only how one machine weighs it.

    model = MTLModel(seed=0)
    model.pretrain([("<workload key>@znver5-2c-3cc6f2b4", trace, ms), ...])  # a head per machine
    model.fit_head("rocketlake-2c-43bb2171", records)   # a new machine: its head only
    model.hardware = "rocketlake-2c-43bb2171"            # the head plain workload keys use
    model.predict(workload_key, traces)

Which head scores a workload: the machine after the last `@` of its name (lm/cost.py names
dataset groups `<key>@<fingerprint>`), else `hardware`; a machine without a head gets the
shared head. The shared head is the TLP network's own head, trained during `pretrain` on every
machine's programs (each epoch is one pass with the machines' heads, then one with the shared
head): it ranks for hardware never seen, and a new machine's head starts as a copy of it.
"""

from __future__ import annotations

import copy

import numpy as np

from minitc.autotune.cost_model import BLOB_KINDS, TLPModel, _torch
from minitc.autotune.features import pad_batch
from minitc.errors import MinitcError

SHARED = "*"  # the head trained on every machine's programs


def machine_of(workload: str) -> str | None:
    """The hardware fingerprint a dataset group `<key>@<fingerprint>` names, else None."""
    return workload.rsplit("@", 1)[1] if "@" in workload else None


def _build_mtl_net(body, names: list):
    """The TLP network `body` (its `head` is the shared head) plus one copy of that head per
    name; forward(x, mask, heads) scores row i with the head named heads[i]."""
    torch = _torch()
    nn = torch.nn

    class MTLNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body
            self.names = list(names)  # ModuleDict keys cannot hold every fingerprint (dots)
            self.heads = nn.ModuleList([copy.deepcopy(body.head) for _ in names])

        def head(self, name: str):
            return self.body.head if name == SHARED else self.heads[self.names.index(name)]

        def forward(self, x, mask, heads: list):
            h = self.body.features(x, mask)
            out = torch.zeros(x.shape[0], dtype=h.dtype, device=h.device)
            for name in dict.fromkeys(heads):
                rows = torch.tensor([i for i, n in enumerate(heads) if n == name], device=h.device)
                out = out.index_put((rows,), (self.head(name)(h[rows]).squeeze(-1) * mask[rows]).sum(dim=1))
            return out

    return MTLNet()


class MTLModel(TLPModel):
    """A TLPModel with a shared backbone and a head per hardware description (module docstring)."""

    def __init__(self, seed: int = 0, device: str = "cpu", machines=(), hardware: str | None = None, **hyper):
        super().__init__(seed=seed, device=device, **hyper)
        self.net = _build_mtl_net(self.net, list(machines)).to(self.device)
        self.opt = self._optimizer(self.net.parameters())
        self.hardware = hardware  # the machine whose head scores workload keys without `@`
        self._pass = None  # SHARED while an epoch trains the shared head

    @property
    def machines(self) -> list:
        """The hardware descriptions with a head of their own (TLPConfig.heads counts attention heads)."""
        return list(self.net.names)

    def head_of(self, workload: str) -> str:
        """The head that scores `workload` (see the module docstring)."""
        if self._pass is not None:
            return self._pass
        name = machine_of(workload) or self.hardware
        return name if name in self.net.names else SHARED

    def add_head(self, name: str) -> None:
        """A head for the machine `name`, a copy of the shared head; the optimiser restarts."""
        if not name or name == SHARED or "@" in name:
            raise MinitcError(f"MTLModel: {name!r} cannot name a head (a hardware fingerprint, without '@')")
        if name in self.net.names:
            raise MinitcError(f"MTLModel: the machine {name} has a head already")
        self.net.names.append(name)
        self.net.heads.append(copy.deepcopy(self.net.body.head))
        self.opt = self._optimizer(self.net.parameters())

    # -- training ----------------------------------------------------------------------------
    def pretrain(self, records: list, epochs: int = 40, log=None) -> list:
        """TLPModel.pretrain on every machine's (`<key>@<fingerprint>`, trace, ms) records, with
        a head for each machine they name (added where missing) and the shared head."""
        for name in sorted({machine_of(w) for w, _, _ in records} - {None} - set(self.net.names)):
            self.add_head(name)
        return super().pretrain(records, epochs=epochs, log=log)

    def fit_head(self, name: str, records: list, epochs: int = 60, log=None) -> list:
        """Learn the head of machine `name` from records of its programs, (workload, trace, ms)
        with workloads named `<key>@<name>` or plain keys: the backbone and the other heads stay
        as they are, so a few hundred programs are enough. The head starts as a copy of the
        shared head (a head `name` already has is trained further). Only these records are
        trained on; the model's earlier records are kept. A quarter of the workloads (where there
        are four or more) is held out to pick the epoch by, the shared head's copy included: a
        head that learned these workloads but ranks others worse is not kept. Returns
        pretrain's history."""
        others = {machine_of(w) for w, _, _ in records} - {None, name}
        if others:
            raise MinitcError(f"fit_head({name!r}): the records name other machines too: {', '.join(sorted(others))}")
        if not records:
            raise MinitcError(f"fit_head({name!r}): no records of the machine")
        self._train_pending()  # fits queued before this belong to the whole model, not to this head
        if name not in self.net.names:
            self.add_head(name)
        head = self.net.head(name)
        saved = (self.data, self.opt, self.hardware, [p.requires_grad for p in self.net.body.parameters()])
        self.data, self.hardware = {}, name
        self.opt = self._optimizer(head.parameters())
        for p in self.net.body.parameters():  # no gradients for what stays
            p.requires_grad_(False)
        groups = sorted({w for w, _, _ in records})
        held = {groups[i] for i in self.rng.permutation(len(groups))[: len(groups) // 4]}
        train = [r for r in records if r[0] not in held]
        val = [r for r in records if r[0] in held]
        try:  # MTLModel.pretrain adds no head here: the records name only this machine
            history = super().pretrain(train, epochs=epochs, log=log, val_records=val or None)
        finally:
            for p, flag in zip(self.net.body.parameters(), saved[3]):
                p.requires_grad_(flag)
            new, self.data, self.opt, self.hardware = self.data, saved[0], saved[1], saved[2]
            for workload, recs in new.items():
                self.data.setdefault(workload, recs)
            self.trained = sum(int(np.isfinite(recs.latencies).sum()) for recs in self.data.values())
        return history

    def _epoch(self) -> float:
        """One pass with each record's own head, then (while the backbone learns) one with the
        shared head; the first pass's loss is returned."""
        loss = super()._epoch()
        if any(p.requires_grad for p in self.net.body.parameters()):
            self._pass = SHARED
            try:
                super()._epoch()
            finally:
                self._pass = None
        return loss

    def _forward(self, matrices: list, workloads: list):
        torch = _torch()
        x, mask = pad_batch(matrices)
        heads = [self.head_of(w) for w in workloads]
        return self.net(torch.from_numpy(x).to(self.device), torch.from_numpy(mask).to(self.device), heads)

    # -- saving ------------------------------------------------------------------------------
    def to_blob(self) -> dict:
        blob = super().to_blob()
        blob["meta"]["kind"] = "mtl"
        blob["meta"]["init"] = {"machines": self.machines, "hardware": self.hardware}
        return blob

    @classmethod
    def from_blob(cls, blob: dict, source, device: str = "cpu") -> MTLModel:
        if blob["meta"].get("kind") != "mtl":
            raise MinitcError(f"{source} holds a TLPModel without heads, not an MTLModel")
        return super().from_blob(blob, source, device)


BLOB_KINDS["mtl"] = MTLModel  # load_cost_model reads saved MTL models through this
