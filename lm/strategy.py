"""The `tlm` search strategy: the language model proposes, the cost model re-ranks, only the
best few are measured.

    search = TLMSearch(space, model, tok, hardware, rng, cost_model=TLPModel())
    search.ask(n) -> n new candidates;  search.tell(candidates, latencies_ms)

Each `ask` samples `oversample * n` programs with constrained decoding (every one legal),
drops those measured before and duplicates (structural hash), ranks the rest — by a cost model
pretrained on the measurement dataset from the first round (lm/cost.py), or, with a fresh
one, by the model's own log-likelihood until the cost model has seen enough of this
workload's measurements — and returns the top n.

Once something has been measured, a share `refine` of each round instead polishes the best
programs found so far: one- or two-decision edits (MetaSchedule's mutators), in random order
until the cost model is trusted, then ranked by it. The model finds a good region in a few
samples, but its later samples mostly repeat that region's likeliest programs; the edits
reach the neighbours it rates lower. The edits are not ranked by the model's own likelihood:
that would steer them back to the programs the model already favours.

The edits begin with a sweep: every one-switch flip of the best program (a template's
pack_a/unroll_window/pad, the generic sketch's cache_write or inline), in order, before any
random edit. MetaSchedule's mutators change a given switch in under 1% of edits, yet a single
switch can be worth ~10% of a kernel's speed. So that the sweep starts early, the first round
(nothing measured yet) is `first_round` = 8 programs, not the tuner's batch of 16. The
measurements behind these choices are in docs/language-model.md.

With `learn`, `tell` fine-tunes the model on this workload's measurements so far
(throughput-weighted) before the next round.

While a round is measured on a GPU the host's cores are idle: the session calls `decode_ahead`
and the model writes the next round's samples in a background thread (not with `learn`, whose
next samples must come from the model `tell` updates).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from minitc.autotune.cost_model import torch_threads
from minitc.autotune.interfaces import SearchStrategy
from minitc.autotune.mutators import edit, switch_flips
from minitc.errors import ScheduleError, warn_user
from minitc.lm.decode import Decoder
from minitc.lm.hardware import (
    HardwareWarning,
    closest_machine,
    differences,
    hardware,
    is_gpu_line,
    same_machine,
    trained_hardware,
)

DECODING_THREADS = 1  # decoding is latency-bound: a second torch thread mostly waits


class TLMSearch(SearchStrategy):
    """`meta`: the checkpoint's meta (what `finish` builds a learned model's meta on)."""

    def __init__(
        self,
        space,
        model,
        tok,
        hardware,
        rng=None,
        *,
        cost_model=None,
        oversample: int = 4,
        temperature: float = 1.0,
        top_k: int = 0,
        learn: bool = False,
        batch: int = 64,
        refine: float = 0.5,
        parents: int = 4,
        first_round: int = 8,
        meta: dict | None = None,
    ):
        self.cost_model = cost_model  # told of the workload by bind
        super().__init__(space, rng)
        self.model, self.tok, self.hardware, self.meta = model, tok, hardware, dict(meta or {})
        self.decoder = Decoder(model, tok, space, hardware, temperature=temperature, top_k=top_k)
        self.oversample, self.learn, self.batch = oversample, learn, batch
        self.refine, self.parents = refine, parents  # share of a round spent on edits; of how many best
        self.first_round = first_round  # programs asked for before anything is measured
        self.generated = self.invalid = self.fallback = 0  # programs sampled / rejected / random top-ups
        self.edits = 0  # edits of measured programs picked for measurement
        self.sweep: list = []  # one-switch flips of the best program, measured before other edits
        self.swept: set = set()  # keys of the programs whose switches were swept
        self.demos: list = []  # (sentence, latency ms) measured in this session, for `learn`
        self.ahead = None  # _Background writing the next round's samples (decode_ahead)
        self.decoded_ahead = 0  # programs written in the background
        # Until the cost model has seen this many of this workload's measurements, its ranking
        # is noise: rank by the model's likelihood (trained throughput-weighted) instead. A
        # cost model trained before the search (MINITC_COST_MODEL) ranks from the first round.
        pretrained = getattr(cost_model, "trained", 0) > 0
        self.told, self.trust_cost_model_after = 0, 0 if pretrained else 32

    def ask(self, n: int) -> list:
        drawn = self._collect_ahead()
        with torch_threads(DECODING_THREADS):
            return self._ask(n, drawn)

    def decode_ahead(self, n: int) -> None:
        """Start writing, in a background thread, the samples a next round of `n` programs will
        rank (the share its edits leave); that round's `ask` takes them first."""
        if self.learn or self.ahead is not None or n <= 0:
            return
        # twice what the round ranks: some repeat measured programs, and a second draw in ask
        # would cost what this one hides
        count = min(self.batch, 2 * self._draw_size(n - round(n * self.refine)))
        self.ahead = _Background(self._generate, count, np.random.default_rng(self.rng.integers(2**63)))

    def _generate(self, count: int, rng) -> tuple:
        with torch_threads(DECODING_THREADS):
            return self.decoder.generate(count, rng)

    def _collect_ahead(self):
        """The programs decode_ahead wrote (waiting for them), or None."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return None
        cands, failures = ahead.result()
        self.decoded_ahead += len(cands) + failures
        self.generated += len(cands) + failures
        self.invalid += failures
        return cands, failures

    def close(self) -> None:
        """Wait for a background decoding nobody will ask for (it uses the process's torch)."""
        self._collect_ahead()

    def _draw_size(self, need: int) -> int:
        return min(self.batch, max(need * self.oversample, 8))

    def _ask(self, n: int, drawn=None) -> list:
        if not self.measured:  # a short first round: the sweep and the edits start sooner
            n = min(n, self.first_round)
        picked = self.queued(n)
        taken = {c.key for c in picked}
        share = round((n - len(picked)) * self.refine) if self.best else 0
        edits = self._take_flips(share, taken) if share else []
        taken |= {c.key for c in edits}
        if share > len(edits) and self._trust_cost_model():  # the cost model picks among more
            edits += self._rank(self._edits((n - len(picked)) * self.oversample, taken))[: share - len(edits)]
        elif share > len(edits):  # as drawn: the model's likelihood would favour the region it already sampled
            edits += self._edits(share - len(edits), taken)
        self.edits += len(edits)
        picked += edits
        taken |= {c.key for c in edits}
        samples = self._samples(n - len(picked), taken, drawn)
        samples.sort(key=lambda c: -c.logprob)  # the model's preference
        picked += self._rank(samples)[: n - len(picked)]
        if len(picked) < n:  # the model only proposes programs already measured
            extra = self.random_candidates(n - len(picked), {c.key for c in picked})
            self.fallback += len(extra)
            picked += extra
        return picked

    def _samples(self, need: int, taken: set, drawn=None) -> list:
        """Up to `oversample * need` new programs written by the model; `drawn`: (candidates,
        failures) written ahead, used first."""
        fresh: dict = {}
        for _ in range(4):  # a confident model repeats itself: a few more draws, then stop
            if len(fresh) >= need * self.oversample or need <= 0:
                break
            if drawn is not None:
                (cands, _), drawn = drawn, None
            else:
                cands, failures = self.decoder.generate(self._draw_size(need), self.rng)
                self.generated += len(cands) + failures
                self.invalid += failures
            for c in cands:
                if c.key not in self.measured and c.key not in taken:
                    fresh.setdefault(c.key, c)
        return list(fresh.values())

    def _take_flips(self, count: int, taken: set) -> list:
        """Up to `count` one-switch flips of the best program, off the sweep queue (refilled
        when a new program becomes the best)."""
        try:
            best = self.space.replay(self.best[0][1])
        except ScheduleError:
            best = None
        if best is not None and best.key not in self.swept:
            self.swept.add(best.key)
            self.sweep = switch_flips(self.space, best, self.rng)
        self.sweep = [c for c in self.sweep if c.key not in self.measured and c.key not in taken]
        out, self.sweep = self.sweep[:count], self.sweep[count:]
        return out

    def _edits(self, count: int, taken: set) -> list:
        """Up to `count` new programs one or two decisions away from the best measured ones
        (the better a parent, the more of its edits)."""
        parents = []
        for _, values in self.best[: self.parents]:
            try:
                parents.append(self.space.replay(values, self.rng, strict=False))
            except ScheduleError:
                continue
        out: dict = {}
        for _ in range(count * 4):
            if len(out) >= count or not parents:
                break
            child = parents[min(int(self.rng.geometric(0.5)) - 1, len(parents) - 1)]
            child = edit(self.space, child, self.rng, steps=1 + int(self.rng.random() < 0.3))
            if child.key not in self.measured and child.key not in taken:
                out.setdefault(child.key, child)
        return list(out.values())

    def _trust_cost_model(self) -> bool:
        return self.cost_model is not None and self.told >= self.trust_cost_model_after

    def _rank(self, candidates: list) -> list:
        """Best first by the cost model once it has seen enough of this workload's
        measurements; until then as given."""
        ranked = list(candidates)
        if self._trust_cost_model() and len(ranked) > 1:
            scores = np.asarray(self.cost_model.predict(self.workload, [c.trace for c in ranked]), dtype=float)
            ranked = [ranked[i] for i in np.argsort(-np.nan_to_num(scores, nan=-1e9), kind="stable")]
        return ranked

    def tell(self, candidates: list, latencies_ms: list) -> None:
        super().tell(candidates, latencies_ms)
        self.told += len(candidates)
        if self.cost_model is not None:
            self.cost_model.fit(self.workload, [c.trace for c in candidates], list(latencies_ms))
        if self.learn:
            self.demos += [
                (self.decoder.write(c.decisions), ms) for c, ms in zip(candidates, latencies_ms) if math.isfinite(ms)
            ]
            self._learn()

    def stats(self) -> dict:
        valid = 1.0 - self.invalid / self.generated if self.generated else None
        return {
            "generated": self.generated,
            "invalid": self.invalid,
            "valid_rate": valid,
            "random_top_ups": self.fallback,
            "edits": self.edits,
            "decoded_ahead": self.decoded_ahead,
            "unwritable": self.decoder.unwritable,  # decisions drawn at random (decode.UnwritableWarning)
        }

    def finish(self) -> None:
        """With `learn`, keep what was learned: the user's own model, used by default from now on.
        Its meta is a new stage on top of the model's, naming this machine's hardware line."""
        if self.learn and self.demos:
            from minitc.lm.model import save_checkpoint
            from minitc.lm.pipeline import user_model_path

            before = dict(self.meta)
            history = list(before.pop("history", [])) + [before]
            line = str(self.hardware)
            meta = {
                "stage": "learn",
                "learned_from": len(self.demos),
                "hardware": line,
                "hardware_lines": {line: len(self.demos)},
                "parameters": self.model.num_parameters(),
                "history": history,
            }
            save_checkpoint(user_model_path(), self.model, self.tok.vocab, meta)

    def _learn(self, sharpness: float = 4.0) -> None:
        from minitc.lm.data import examples, throughput_weights
        from minitc.lm.train import train

        if len(self.demos) < 4:
            return
        weights = throughput_weights([ms for _, ms in self.demos], sharpness)
        data = examples(self.tok, [s for s, _ in self.demos], weights)
        train(self.model, data, epochs=1, batch_size=16, lr=5e-5, warmup=1, seed=len(self.demos))
        self.model.eval()


class _Background:
    """One call of `fn(*args)` in a daemon thread; `result()` waits and returns (or raises) it."""

    def __init__(self, fn, *args):
        self._value = self._error = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True, name="minitc-decode-ahead")
        self._thread.start()

    def _run(self, fn, args) -> None:
        try:
            self._value = fn(*args)
        except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def hardware_warning(meta: dict, hw, target="llvm") -> str | None:
    """One line saying that a checkpoint (its `meta`) learned from no machine like `hw` (a
    hardware line), naming the closest it did learn from and what to do; None when one of its
    machines is like this one. The measured rates are not compared: they vary with the load."""
    from minitc.lm.adapt import DEFAULT_MINUTES
    from minitc.lm.pipeline import adapted_model_path
    from minitc.target import hardware_fingerprint

    lines = trained_hardware(meta)
    if not lines or any(same_machine(line, hw) for line in lines):
        return None
    closest = closest_machine(lines, str(hw))
    differ = ", ".join(differences(closest, str(hw)))
    if len(lines) == 1:
        trained = (
            f"was trained on `{_machine(closest)}`, unlike this machine (`{_machine(hw)}`: it differs in {differ})"
        )
    else:
        trained = (
            f"was trained on {len(lines)} machines, none like this one (`{_machine(hw)}`); the closest, "
            f"`{_machine(closest)}`, differs in {differ}"
        )
    adapted = adapted_model_path(hardware_fingerprint(target))
    if adapted.exists():
        advice = f"a copy adapted to this machine is at {adapted}: tune with `--lm {adapted}` (or MINITC_LM={adapted})"
    else:
        advice = (
            f"run `minitc lm adapt` (about {DEFAULT_MINUTES} minutes) to measure this machine and fine-tune a "
            "copy for it, then tune with the `--lm` path it prints"
        )
    return f"the language model {trained}, so its proposals may be weaker here; {advice}"


def _machine(line) -> str:
    return str(line).split(" gflops ")[0]


def trained_on_gpu(meta: dict) -> bool:
    """Whether a checkpoint's meta (or the meta of a stage it was trained from) names a GPU's
    hardware line."""
    lines = [meta.get("hardware")] + [h.get("hardware") for h in meta.get("history", []) if isinstance(h, dict)]
    return any(isinstance(line, str) and is_gpu_line(line) for line in lines)


def tlm_search(space, rng, cost_model=None, lm=None, learn: bool = False) -> TLMSearch:
    """The strategy `tc.tune(..., strategy="tlm")` uses: the model at `lm` (a checkpoint path)
    or the default one (pipeline.load_model), this machine's hardware tokens, the cost model."""

    from minitc.lm.pipeline import load_model

    model, tok, meta = load_model(lm, gpu=getattr(space, "gpu", False))
    hw = hardware(space.target)
    if getattr(space, "gpu", False) and not trained_on_gpu(meta):
        from minitc.lm.model import LMError

        raise LMError(
            f"the language model {str(lm) + ' ' if lm else ''}was trained on "
            f"`{meta.get('hardware', 'CPU sentences')}` and never on a GPU's "
            "sentences, so it cannot propose GPU programs: tune a GPU target with strategy='evolutionary' "
            "(what `tc.tune` does on GPU targets), or train a model on GPU sentences"
        )
    message = hardware_warning(meta, hw, space.target)
    if message:
        warn_user(message, HardwareWarning)
    return TLMSearch(space, model, tok, hw, rng, cost_model=cost_model, learn=learn, meta=meta)
