"""Constrained decoding: the model writes the decisions of n programs at once, and at every
decision slot its logits are masked to the values the design space allows there, so every
generated program is legal by construction.

The design space is ordinary Python (autotune/space.py) that asks a Sampler for each decision, and
what it asks next depends on what was answered (a sketch, a cache, a compute location). So each
sample runs the space in its own thread with a sampler that posts its slot (label and legal
values) and waits; the decoder advances all samples in lockstep, one token per step, through
one batched forward with a key-value cache (the prompt is computed once and shared):

    forced label tokens  `s2 a1 =`  ->  masked value tokens `( 8 1 6 ##4 1 ) ;`  ->  next slot

Within a value the mask is a prefix trie over the legal values' token sequences, so a tile's
later factors can only complete a divisor tiling of what the earlier ones left.

A space the model was not trained on (a user's schedule program, tc.tune(space=...)) may ask
for values the vocabulary cannot write (its sketch's name, a string or float categorical): such
a slot is drawn at random, uniformly, without the model, and its label and value are not fed
(`Decoder.unwritable` counts them; an `UnwritableWarning` names the slots once).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from minitc.autotune.sampler import Decision, Sampler
from minitc.errors import ScheduleError, warn_user
from minitc.lm.describe import decision_label
from minitc.lm.language import Loc, SentenceWriter
from minitc.lm.model import LMError, expand_cache
from minitc.lm.tokenizer import TokenizerError, gpu_tokens


@dataclass
class _Slot:
    label_ids: list
    values: tuple  # the slot's legal values (space values)
    sequences: list  # value token ids of each, ending with `;`
    written: list = field(default_factory=list)  # value tokens chosen so far
    answer: object = None


class _ThreadSampler(Sampler):
    """Asks the decoder for each decision and blocks until it has been written."""

    def __init__(self, sample):
        super().__init__()
        self.sample = sample

    def _take(self, kind, name, domain):
        if not domain:
            raise ScheduleError(f"decision {name}: no legal value")
        value = self.sample.ask(kind, name, tuple(domain))
        self.decisions.append(Decision(kind, name, domain, value))
        return value


class _Sample:
    """One program being written: a thread running the space, and its token state."""

    def __init__(self, decoder, index: int):
        self.decoder, self.index = decoder, index
        self.pending: list = []  # forced tokens still to feed
        self.slot: _Slot | None = None
        self.posted = threading.Event()  # set when the thread asks a slot or ends
        self.answered = threading.Event()
        self.finished = False
        self.logprob = 0.0
        self.candidate = None
        self.error = None
        self.rng = None  # for slots the model cannot write (Decoder.draw_unwritable)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.candidate = self.decoder.space._apply(_ThreadSampler(self))
        except BaseException as e:  # noqa: BLE001  (the decoder re-raises all but ScheduleError)
            self.error = e
        self.finished = True
        self.posted.set()

    def ask(self, kind, name, domain):
        d = self.decoder
        values = tuple(Loc(n) for n in range(len(domain))) if kind == "location" else domain
        label = decision_label(name, d.write.names)
        try:
            sequences = [d.tok.value_ids(v) for v in values]
        except (TokenizerError, ValueError, TypeError):  # a value the vocabulary has no tokens for
            return d.draw_unwritable(self, label, domain)
        self.slot = _Slot(d.tok.label_ids(label), domain, sequences)
        self.answered.clear()
        self.posted.set()
        self.answered.wait()
        if self.decoder.aborted:
            raise ScheduleError("decoding was aborted")
        return self.slot.answer

    def wait_posted(self):
        self.posted.wait()
        self.posted.clear()
        if not self.finished:
            self.pending += self.slot.label_ids


class UnwritableWarning(UserWarning):
    """Decisions of a space whose values the language model cannot write were drawn at random."""


class ContextWarning(UserWarning):
    """Programs of a workload whose sentences are longer than the model's context were dropped."""


class Decoder:
    """Generates programs of `space` with `model` (lm.model.TensorLM) and tokenizer `tok`."""

    def __init__(self, model, tok, space, hardware, *, temperature: float = 1.0, top_k: int = 0):
        self.model, self.tok, self.space = model, tok, space
        self.write = SentenceWriter(space, hardware)
        prompt = self.write()
        if getattr(space, "gpu", False):
            # fed `<unk>` for the GPU words, a CPU model would write plausible-looking nonsense;
            # a later operator's tags (conv2d_gemm) are read as `<unk>`, as on a CPU
            gpu_words = set(gpu_tokens())
            missing = [w for w in tok.missing_tokens(tok.prompt_text(prompt)) if w in gpu_words]
            if missing or not tok.writes_gpu():
                raise LMError(
                    f"this language model's vocabulary ({len(tok)} tokens) cannot write GPU sentences "
                    f"(no tokens for {' '.join(missing) or 'the GPU decision slots'}): it was made for CPU "
                    "targets; tune a GPU target with strategy='evolutionary', or train a model on GPU sentences"
                )
        self.prompt = tok.prompt_ids(prompt)
        self.temperature, self.top_k = temperature, top_k
        self.warned_context = False
        self.unwritable = 0  # decisions drawn at random: the vocabulary cannot write their values
        self.unwritable_labels: dict = {}  # their slot labels (in order of first sight)
        self.calls = 0  # generate calls (seeds the samples' random fallbacks)
        self.warned_unwritable = False

    def draw_unwritable(self, sample, label: str, domain: tuple):
        """A uniform random value for a slot the vocabulary cannot write (called from the
        sample's thread; its own generator keeps the draws reproducible)."""
        if len(domain) == 1:  # nothing to choose (a user space's one sketch): not counted
            return domain[0]
        if sample.rng is None:
            sample.rng = np.random.default_rng((self.calls, sample.index))
        self.unwritable += 1
        self.unwritable_labels.setdefault(label, None)
        return domain[int(sample.rng.integers(len(domain)))]

    def generate(self, n: int, rng=None) -> tuple:
        """(candidates, failures): up to n programs (tune.space.Candidate, each with `logprob`,
        the model's log-likelihood of its decisions); failures counts samples the space
        rejected (should be 0: every value is legal by construction) and samples whose sentence
        would not fit the model's context (max_len tokens), which are dropped."""
        rng = rng if rng is not None else np.random.default_rng()
        self.aborted = False
        self.calls += 1
        if len(self.prompt) >= self.model.cfg.max_len:
            self._too_long(n, n)
            return [], n
        samples = [_Sample(self, i) for i in range(n)]
        try:
            return self._generate(samples, n, rng)
        except BaseException:
            self._abort(samples)
            raise

    def _abort(self, samples: list) -> None:
        """Release the threads of `samples`, which wait for answers: each ends its program with
        a ScheduleError (a failure, not a candidate)."""
        self.aborted = True
        for s in samples:
            s.answered.set()

    def _generate(self, samples: list, n: int, rng) -> tuple:
        for s in samples:
            s.thread.start()
        for s in samples:
            s.wait_posted()
        with torch.no_grad():
            logits, cache = self.model(torch.tensor([self.prompt]))
            cache = expand_cache(cache, n)
            last = logits[0, -1].expand(n, -1)
            position = len(self.prompt)
            while not all(s.finished for s in samples):
                if position >= self.model.cfg.max_len:  # the rest would not fit the context
                    unfinished = [s for s in samples if not s.finished]
                    self._abort(unfinished)
                    self._too_long(len(unfinished), n)
                    break
                step, completed = zip(*(self._next_token(s, last[s.index], rng) for s in samples))
                for s, done in zip(samples, completed):  # their threads run on to the next slot
                    if done:
                        s.wait_posted()
                logits, cache = self.model(torch.tensor(step).view(n, 1), cache=cache, start=position)
                last = logits[:, -1]
                position += 1
        for s in samples:
            s.thread.join()
            if s.error is not None and not isinstance(s.error, ScheduleError):
                raise s.error
        if self.unwritable and not self.warned_unwritable:
            self.warned_unwritable = True
            warn_user(
                f"the language model's vocabulary cannot write the values of the slots "
                f"{', '.join(self.unwritable_labels)} of this design space: they are drawn at random, the "
                "model writes the rest",
                UnwritableWarning,
            )
        done = []
        for s in samples:
            if s.candidate is not None:
                s.candidate.logprob = s.logprob
                done.append(s.candidate)
        return done, n - len(done)

    def _too_long(self, dropped: int, n: int) -> None:
        if not self.warned_context:
            self.warned_context = True
            warn_user(
                f"{dropped} of {n} programs of this workload did not fit the language model's context "
                f"({self.model.cfg.max_len} tokens, of which the prompt takes {len(self.prompt)}): they are "
                "dropped, and the search fills its rounds with the programs that fit and random ones",
                ContextWarning,
            )

    def _next_token(self, s: _Sample, logits, rng) -> tuple:
        """(the token sample s feeds next, whether it completes a decision)."""
        if s.finished:
            return self.tok.pad, False
        if s.pending:
            return s.pending.pop(0), False
        slot = s.slot
        k = len(slot.written)
        live = [n for n, seq in enumerate(slot.sequences) if seq[:k] == slot.written]
        allowed = sorted({slot.sequences[n][k] for n in live})
        token = allowed[0] if len(allowed) == 1 else self._sample(logits, allowed, rng)
        if len(allowed) > 1:  # the model's log-probability of the program, within the legal values
            scores = logits[allowed].double()
            s.logprob += float(scores[allowed.index(token)] - torch.logsumexp(scores, 0))
        slot.written.append(token)
        if token == self.tok.end:
            value_index = next(n for n in live if slot.sequences[n] == slot.written)
            slot.answer = slot.values[value_index]
            s.answered.set()
            return token, True
        return token, False

    def _sample(self, logits, allowed: list, rng) -> int:
        scores = logits[allowed].double().numpy()
        if self.temperature <= 0:
            return allowed[int(np.argmax(scores))]
        scores = scores / self.temperature
        if self.top_k and len(allowed) > self.top_k:
            cut = np.sort(scores)[-self.top_k]
            scores = np.where(scores >= cut, scores, -np.inf)
        p = np.exp(scores - scores.max())
        return allowed[int(rng.choice(len(allowed), p=p / p.sum()))]
