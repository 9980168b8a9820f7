"""The TLP cost model: trace features, the ranking loss, learning a known ranking, the protocol
(fit / predict shapes, errors as infinite latencies) and save/load."""

import json
import math

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.cost_model import RandomModel, TLPModel, labels_of, lambda_rank_loss
from minitc.autotune.features import COLUMN, NUM_FEATURES, Featurizer, parse_steps
from minitc.autotune.space import Space
from minitc.errors import MinitcError
from minitc.schedule.trace import STEP_KINDS

torch = pytest.importorskip("torch")


def _matmul(m=64, k=128, n=64):
    return tc.ops.matmul(tc.placeholder((m, k), name="A"), tc.placeholder((k, n), name="B"))


@pytest.fixture(scope="module")
def matmul():
    out = _matmul()
    space, rng = Space(out, "llvm"), np.random.default_rng(0)
    traces = list(dict.fromkeys(space.sample(rng).trace for _ in range(300)))
    return out, traces


def _kendall_tau(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    i, j = np.triu_indices(len(a), 1)
    s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(s.sum() / len(s))


def _top_k(scores, latencies, k):
    latencies = np.asarray(latencies)
    return latencies.min() / latencies[np.argsort(-np.asarray(scores))[:k]].min()


# -- features ---------------------------------------------------------------------------------


def test_features_shape_determinism_and_cache(matmul):
    out, traces = matmul
    f = Featurizer()
    f.register("mm", out)
    x = f("mm", traces[0])
    n_steps = len(json.loads(traces[0]))
    assert x.shape == (1 + n_steps, NUM_FEATURES) and x.dtype == np.float32
    assert x[0, COLUMN["summary"]] == 1 and x[1:, COLUMN["summary"]].sum() == 0
    assert (x[1:, : len(STEP_KINDS)].sum(axis=1) == 1).all()  # one kind per step
    assert x[1:, COLUMN["replayed"]].all()
    assert f("mm", traces[0]) is x and f.hits == 1  # cached by trace text
    # deterministic across featurizers, and a tuner record gives the same features
    g = Featurizer()
    g.register("mm", _matmul())
    record = json.dumps({"sketch": "generic", "decisions": [], "steps": json.loads(traces[0])})
    np.testing.assert_array_equal(g("mm", record), x)
    # without the workload's tensors, only the steps' own arguments
    y = Featurizer()("mm", traces[0])
    assert y.shape == x.shape and not y[:, COLUMN["replayed"]].any()


def test_features_crop_and_illegal_steps(matmul):
    out, traces = matmul
    f = Featurizer(max_steps=4)
    f.register("mm", out)
    long = max(traces, key=lambda t: len(json.loads(t)))
    assert f("mm", long).shape == (5, NUM_FEATURES)
    illegal = {"kind": "vectorize", "stage": "matmul", "loops": ["k"]}  # k is a reduction loop
    bad = json.dumps([illegal, {"kind": "split", "stage": "matmul", "loops": ["i"], "decisions": [8]}])
    x = Featurizer()
    x.register("mm", out)
    rows = x("mm", bad)
    assert rows.shape == (3, NUM_FEATURES) and not rows[:, COLUMN["replayed"]].any()
    with pytest.raises(MinitcError, match="not valid JSON"):
        parse_steps("[{")


# -- loss and labels --------------------------------------------------------------------------


def test_labels_and_lambda_rank_loss():
    y = labels_of([2.0, 1.0, math.inf, 4.0, float("nan")])
    np.testing.assert_allclose(y, [0.5, 1.0, 0.0, 0.25, 0.0])
    assert not labels_of([math.inf, math.inf]).any()
    t = torch.tensor(y, dtype=torch.float32)
    good = lambda_rank_loss(torch.tensor([2.0, 3.0, -1.0, 1.0, -2.0]), t)
    bad = lambda_rank_loss(torch.tensor([-2.0, -3.0, 1.0, -1.0, 2.0]), t)
    assert 0 < float(good) < float(bad)
    assert lambda_rank_loss(torch.zeros(3), torch.zeros(3)) is None  # no pairs: no loss


# -- learning ---------------------------------------------------------------------------------


def _synthetic_latency(trace: str) -> float:
    """A known cost: every split factor away from 4 costs (log2 f - 2)^2."""
    factors = [s["decisions"][0] for s in json.loads(trace) if s["kind"] == "split"]
    return 1.0 + sum((math.log2(f) - 2.0) ** 2 for f in factors)


def test_learns_a_known_ranking(matmul):
    out, traces = matmul
    train, test = traces[:160], traces[160:260]
    lat_train = [_synthetic_latency(t) for t in train]
    lat_test = np.array([_synthetic_latency(t) for t in test])
    model = TLPModel(seed=0, fit_steps=30, fit_max_seconds=10.0)
    model.register("mm", out)
    for i in range(0, len(train), 40):  # online, as the tuner calls it
        model.fit("mm", train[i : i + 40], lat_train[i : i + 40])
    scores = model.predict("mm", test)
    tau = _kendall_tau(scores, -lat_test)
    random_top5 = np.mean([_top_k(np.random.default_rng(s).random(len(test)), lat_test, 5) for s in range(500)])
    assert tau > 0.5, tau
    assert _top_k(scores, lat_test, 5) > random_top5 + 0.2, (_top_k(scores, lat_test, 5), random_top5)


# -- protocol ---------------------------------------------------------------------------------


def test_fit_predict_shapes_and_errors(matmul):
    out, traces = matmul
    rng = np.random.default_rng(1)
    model = TLPModel(seed=1, fit_steps=4)
    model.register("mm", out)
    assert model.predict("mm", []).shape == (0,)
    cold = model.predict("mm", traces[:5])  # before warm-up: random scores
    assert cold.shape == (5,)
    lat = list(rng.uniform(0.1, 2.0, 40))
    lat[3] = lat[7] = math.inf  # errors
    model.fit("mm", traces[:40], lat)
    model.fit("mm", traces[40:50], [math.inf] * 10)  # a round where everything failed
    scores = model.predict("mm", traces[50:80])
    assert scores.shape == (30,) and np.isfinite(scores).all()
    # an unregistered workload still gets scores
    assert model.predict("other", traces[:3]).shape == (3,)
    with pytest.raises(MinitcError, match="2 traces but 1 latencies"):
        model.fit("mm", traces[:2], [1.0])
    r = RandomModel(seed=0)
    r.fit("mm", traces[:3], [1.0, 2.0, math.inf])
    assert r.predict("mm", traces[:7]).shape == (7,)


def test_fits_inside_the_callers_no_grad(matmul):
    """`minitc compile` tunes a model under torch.no_grad(): the cost model still trains there
    (backward() once failed: the scores had no grad_fn), and so does the language model."""
    import torch

    out, traces = matmul
    model = TLPModel(seed=2, fit_steps=2)
    model.register("mm", out)
    before = [p.detach().clone() for p in model.net.parameters()]
    with torch.no_grad():
        model.fit("mm", traces[:40], [_synthetic_latency(t) for t in traces[:40]])
        model.predict("mm", traces[40:42])  # the fit's training runs here
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net.parameters()))


def test_a_fit_trains_when_scores_are_next_asked_for(matmul):
    """fit() only queues: the training runs, in the order of the fits, at the next predict (or
    save). A search's last round is told results nothing ranks by afterwards: that fit never
    trains. Training later is the same training: the weights equal a model that trained at once."""
    out, traces = matmul
    lat = [_synthetic_latency(t) for t in traces[:80]]
    eager, lazy = TLPModel(seed=3, fit_steps=3), TLPModel(seed=3, fit_steps=3)
    for model in (eager, lazy):
        model.register("mm", out)
    before = [p.detach().clone() for p in lazy.net.parameters()]
    eager.fit("mm", traces[:40], lat[:40])
    eager.predict("mm", traces[80:90])
    eager.fit("mm", traces[40:80], lat[40:])
    eager.predict("mm", traces[80:90])
    lazy.fit("mm", traces[:40], lat[:40])
    lazy.fit("mm", traces[40:80], lat[40:])
    assert lazy.trained == 0 and all(torch.equal(a, b) for a, b in zip(before, lazy.net.parameters()))
    np.testing.assert_array_equal(lazy.predict("mm", traces[80:90]), eager.predict("mm", traces[80:90]))
    assert lazy.trained == eager.trained == 80
    assert all(torch.equal(a, b) for a, b in zip(eager.net.parameters(), lazy.net.parameters()))


def test_save_load_round_trip(matmul, tmp_path):
    out, traces = matmul
    model = TLPModel(seed=2, hidden=32, fit_steps=3)
    model.register("mm", out)
    model.fit("mm", traces[:30], [_synthetic_latency(t) for t in traces[:30]])
    model.save(tmp_path / "tlp.pt")
    loaded = TLPModel.load(tmp_path / "tlp.pt")
    loaded.register("mm", out)
    assert loaded.config == model.config and loaded.num_parameters() == model.num_parameters()
    np.testing.assert_array_equal(loaded.predict("mm", traces[30:60]), model.predict("mm", traces[30:60]))
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(MinitcError, match="not a saved TLPModel"):
        TLPModel.load(tmp_path / "junk.pt")
    with pytest.raises(MinitcError, match="unknown hyper-parameter"):
        TLPModel(hiden=3)


def test_pretrain_from_records(matmul):
    out, traces = matmul
    model = TLPModel(seed=3, group_size=32)
    model.register("mm", out)
    records = [("mm", t, _synthetic_latency(t)) for t in traces[:80]] + [("mm", traces[80], math.inf)]
    history = model.pretrain(records, epochs=3)
    assert len(history) == 3 and all(math.isfinite(h["train_loss"]) for h in history)
    assert "val_loss" in history[0]
    assert model.predict("mm", traces[100:110]).shape == (10,)
