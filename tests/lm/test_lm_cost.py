"""Cost models pretrained on the dataset (minitc/lm/cost.py): records from the dataset's
sentences, training, which model the tlm strategy loads, and its ranking from the first round."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.cost_model import EnsembleModel, TLPModel, load_cost_model
from minitc.autotune.space import Space
from minitc.errors import MinitcError
from minitc.lm import cost
from minitc.lm.cli import lm as lm_cli
from minitc.lm.dataset import DatasetWriter, load
from minitc.lm.model import ModelConfig, TensorLM, save_checkpoint
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.training_set import workload
from minitc.target import hardware_fingerprint, parse_target

HARDWARE = "znver3-1c-5b998170"  # one of the dataset's CPU descriptions
NAMES = ["matmul-256", "bert-layernorm"]


@pytest.fixture(scope="module")
def entries():
    return load(hardware=[HARDWARE], workloads=NAMES)


@pytest.mark.heavy
def test_records_replay_the_dataset_programs_per_workload_and_machine(entries):
    model = TLPModel(seed=0)
    records, skipped = cost.cost_records(entries, model)
    assert skipped == 0 and len(records) == len(entries) > 20
    assert {group for group, _, _ in records} == {f"{e.workload}@{HARDWARE}" for e in entries}
    assert all(json.loads(trace) and "workload" not in trace for _, trace, _ in records)  # traces, not sentences
    ok = [ms for _, _, ms in records if ms is not None]
    assert len(ok) == sum(e.ok for e in entries)


def test_a_trained_model_saves_loads_and_scores(entries, tmp_path):
    model, used, skipped = cost.train_cost_model(entries, epochs=2)
    assert used == len(entries) and skipped == 0 and model.trained >= model.config.warmup
    model.save(tmp_path / "m.pt")
    again = TLPModel.load(tmp_path / "m.pt")
    e = entries[0]
    group = f"{e.workload}@{HARDWARE}"
    again.register(group, [workload(e.name)])
    traces = model.data[group].traces[:5]
    np.testing.assert_allclose(again.predict(group, traces), model.predict(group, traces), rtol=1e-5)


def test_an_ensemble_ranks_by_its_members_standardised_mean_and_saves_whole(entries, tmp_path):
    model, used, _ = cost.train_cost_model(entries, epochs=1, seed=3, members=2)
    assert isinstance(model, EnsembleModel) and [m.seed for m in model.members] == [3, 4]
    assert model.trained == min(m.trained for m in model.members) >= model.members[0].config.warmup
    e = entries[0]
    group = f"{e.workload}@{HARDWARE}"
    traces = model.members[0].data[group].traces[:6]
    members = [m.predict(group, traces) for m in model.members]
    assert not np.allclose(members[0], members[1])  # two trainings, two rankings
    expected = np.mean([(s - s.mean()) / s.std() for s in members], axis=0)
    np.testing.assert_allclose(model.predict(group, traces), expected, rtol=1e-6)
    model.save(tmp_path / "e.pt")
    again = load_cost_model(tmp_path / "e.pt")
    assert isinstance(again, EnsembleModel) and len(again.members) == 2
    again.register(group, [workload(e.name)])
    np.testing.assert_allclose(again.predict(group, traces), expected, rtol=1e-5)
    with pytest.raises(MinitcError, match="ensemble"):
        TLPModel.load(tmp_path / "e.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a model")
    with pytest.raises(MinitcError, match="not a saved TLPModel"):
        load_cost_model(tmp_path / "bad.pt")


def test_which_cost_model_the_tlm_strategy_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(cost, "COST_DIR", tmp_path)
    monkeypatch.delenv("MINITC_COST_MODEL", raising=False)
    host = parse_target("llvm")
    assert cost.shipped_cost_model_path(host) is None  # none shipped: a fresh model
    (tmp_path / "cpu.pt").write_bytes(b"")
    assert cost.shipped_cost_model_path(host) == tmp_path / "cpu.pt"
    (tmp_path / "mtl.pt").write_bytes(b"")
    assert cost.shipped_cost_model_path(host) == tmp_path / "mtl.pt"  # MTL-TLP's head or shared head first
    mine = tmp_path / f"{hardware_fingerprint(host)}.pt"
    mine.write_bytes(b"")
    assert cost.shipped_cost_model_path(host) == mine  # this machine's own, before every CPU's
    assert cost.shipped_cost_model_path(parse_target("cuda-sim")) is None
    monkeypatch.setenv("MINITC_COST_MODEL", str(tmp_path / "x.pt"))
    assert cost.shipped_cost_model_path(host) == tmp_path / "x.pt"


class _PrefersShortTraces:
    """A cost model trained before the search that scores shorter traces higher."""

    trained = 100

    def register(self, workload, outputs):
        pass

    def predict(self, workload, traces):
        return np.array([-float(len(t)) for t in traces])

    def fit(self, workload, traces, latencies_ms):
        pass


def test_a_pretrained_cost_model_ranks_the_first_round(tmp_path):
    from minitc.lm.strategy import TLMSearch, tlm_search

    torch.set_num_threads(1)
    tok = Tokenizer.default()
    torch.manual_seed(0)
    path = tmp_path / "tiny.pt"
    save_checkpoint(
        path, TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64)), tok.vocab, {}
    )
    A, B = tc.placeholder((64, 64), name="A"), tc.placeholder((64, 64), name="B")
    space = Space(tc.ops.matmul(A, B), "llvm")
    fresh = tlm_search(space, np.random.default_rng(0), cost_model=TLPModel(), lm=path)
    assert fresh.trust_cost_model_after == 32  # a fresh cost model waits for measurements
    search = tlm_search(space, np.random.default_rng(0), cost_model=_PrefersShortTraces(), lm=path)
    assert isinstance(search, TLMSearch) and search.trust_cost_model_after == 0
    first = search.ask(8)
    lengths = [len(c.trace) for c in first]
    assert len(set(lengths)) > 1 and lengths == sorted(lengths)  # ranked by the cost model, not the likelihood


@pytest.mark.heavy
def test_the_cost_model_command_trains_per_machine_for_every_cpu_and_mtl(tmp_path):
    data = tmp_path / "data"
    DatasetWriter(data).append(load(hardware=[HARDWARE], workloads=NAMES[:1]))
    result = CliRunner().invoke(
        lm_cli,
        [
            "cost-model",
            "--data",
            str(data),
            "--out-dir",
            str(tmp_path / "cost"),
            "--epochs",
            "1",
            "--min-programs",
            "5",
            "--members",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "cost").iterdir()) == sorted([f"{HARDWARE}.pt", "cpu.pt", "mtl.pt"])
    assert all(len(load_cost_model(p).members) == 2 for p in (tmp_path / "cost").iterdir())
