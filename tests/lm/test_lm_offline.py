"""The offline leave-one-hardware-out (benchmarks/tlm_offline.py): its scores on pools of
recorded programs, checked against brute force and against the model's own loss."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import minitc as tc
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.benchmarks import tlm_offline
from minitc.lm.dataset import check_entry
from minitc.lm.language import Hardware, SentenceWriter, parse
from minitc.lm.model import ModelConfig, TensorLM
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.train import evaluate

TARGET = "llvm -mcpu=znver2 -num-cores=2"
ZEN2 = Hardware("llvm", "znver2", 2, 8, 32, 512, 16384, 210, 33)


def test_random_at_is_the_mean_over_every_subset():
    ms = [1.0, 1.5, 2.0, 4.0, 3.0]
    for k in (1, 2, 3):
        subsets = list(itertools.combinations(ms, k))
        brute = sum(min(ms) / min(s) for s in subsets) / len(subsets)
        assert tlm_offline.random_at(ms, k) == pytest.approx(brute)
    assert tlm_offline.random_at(ms, len(ms)) == pytest.approx(1.0)


def test_evo_at_climbs_towards_the_best_programs_neighbours():
    # 24 slow programs two or three decisions apart; 8 fast ones one decision apart, the best among them
    decisions = [{"x": 0, "y": n, "z": n} for n in range(24)] + [{"x": 1, "y": 0, "z": n} for n in range(8)]
    ms = [2.0] * 24 + [1.5] * 7 + [1.0]
    scores = tlm_offline.evo_at(ms, decisions, [8, 16, 32], seeds=16)
    assert scores[32] == 1.0  # the whole pool measured
    assert scores[16] > tlm_offline.random_at(ms, 16)  # the second round searches near x = 1


@pytest.fixture(scope="module")
def matmul_entries():
    A, B = tc.placeholder((32, 32), name="A"), tc.placeholder((32, 32), name="B")
    out = tc.ops.matmul(A, B)
    space, rng, cands = Space(out, TARGET), np.random.default_rng(0), {}
    while len(cands) < 5:
        c = space.sample(rng)
        cands.setdefault(c.key, c)
    write = SentenceWriter(space, ZEN2)
    objs = [
        {
            "schema": 1,
            "workload": {"key": workload_key(out), "name": "matmul-384", "description": "a matmul"},
            "target": TARGET,
            "hardware": {"fingerprint": "znver2-2c-0000", "tokens": str(ZEN2)},
            "sentence": str(write(c.decisions)),
            "latencies_ms": [ms],
            "median_ms": ms,
            "error": None,
            "date": "2026-12-07T00:00:00Z",
            "minitc": "0.1.0",
            "source": "test",
        }
        for c, ms in zip(cands.values(), [3.0, 1.0, 2.0, 4.0, 5.0])
    ]
    return [check_entry(o, f"made:{n}") for n, o in enumerate(objs, 1)]


def test_tlm_at_k_ranks_the_pool_by_the_models_likelihood(matmul_entries, monkeypatch):
    torch.manual_seed(0)
    tok = Tokenizer.default()
    model = TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64, max_len=1024))
    sentences = [parse(e.sentence) for e in matmul_entries]
    logp = tlm_offline.log_likelihoods(model, tok, sentences)
    from minitc.lm.data import examples

    for s, lp in zip(sentences, logp):  # the sum of what evaluate averages over the targets
        loss = evaluate(model, examples(tok, [s]))
        assert -lp == pytest.approx(loss["loss"] * loss["targets"], rel=1e-4)

    # a model that finds the 2nd-fastest program likeliest: TLM@1 = 1.0 / 2.0
    liked = {s: -n for n, s in enumerate([sentences[2], sentences[1], sentences[0], sentences[3], sentences[4]])}
    monkeypatch.setattr(tlm_offline, "log_likelihoods", lambda m, t, ss: [liked[s] for s in ss])
    monkeypatch.setattr(tlm_offline, "TEST", ("matmul-384",))
    (row,) = tlm_offline.evaluate_description(model, tok, matmul_entries, "znver2-2c-0000", [1, 2, 10], 4)
    assert (row["pool"], row["TLM@1"], row["TLM@2"], row["TLM@10"]) == (5, 0.5, 1.0, None)
    assert row["Search@1"] == row["Learn@1"] == 0.5 and row["Search@10"] is None
    assert row["Random@1"] == pytest.approx(np.mean([1 / 3, 1, 1 / 2, 1 / 4, 1 / 5]))
    assert "geomean" in tlm_offline.table([row], [1, 2, 10])


def test_the_search_loop_edits_towards_the_best_where_the_likelihood_does_not_lead(monkeypatch):
    from types import SimpleNamespace

    far = [{"x": 0, "y": n, "z": n} for n in range(24)]
    near = [{"x": 1, "y": 0, "z": n} for n in range(8)]
    # the model's likeliest first: 7 slow programs, one fast one, 17 slow ones, then the rest of the fast ones
    decisions = far[:7] + near[:1] + far[7:] + near[1:]
    ms = [2.0] * 7 + [1.5] + [2.0] * 17 + [1.5] * 6 + [1.0]
    sentences = [SimpleNamespace(decisions=list(d.items())) for d in decisions]
    monkeypatch.setattr(tlm_offline, "log_likelihoods", lambda m, t, ss: [-float(n) for n in range(len(ss))])
    scores = tlm_offline.search_at(None, None, sentences, ms, [8, 24], learn=False)
    assert scores == {8: 1.0 / 1.5, 24: 1.0}  # the likelihood alone would still be at 1.0 / 1.5 after 24


def test_tlm_eval_takes_the_handwritten_operators_by_name():
    from minitc.benchmarks import tlm_eval

    assert tlm_eval.select(None) == list(tlm_eval.HELD_OUT)
    assert tlm_eval.select(["heads-scores", "bmm-bert"]) == ["heads-scores", "bmm-bert"]
    out = tlm_eval.workloads()["heads-scores"]()
    assert tuple(int(d) for d in out.shape) == (1, 12, 128, 128)
    with pytest.raises(KeyError, match="unknown: nope"):
        tlm_eval.select(["nope"])
