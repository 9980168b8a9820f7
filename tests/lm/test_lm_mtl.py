"""MTL-TLP (minitc/autotune/mtl_model.py, lm/mtl.py): a head per hardware description on a shared
backbone, a new machine's head from few programs, the shared head for hardware never seen,
saving and loading, and the errors."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from minitc.autotune.cost_model import EnsembleModel, TLPModel, load_cost_model
from minitc.autotune.mtl_model import SHARED, MTLModel, machine_of
from minitc.autotune.workload_key import workload_key
from minitc.errors import MinitcError
from minitc.lm import cost, mtl
from minitc.lm.cli import lm as lm_cli
from minitc.lm.dataset import DatasetWriter, load
from minitc.lm.training_set import workload
from minitc.target import parse_target

ZEN3, X86 = "znver3-1c-5b998170", "x86-64-v3-2c-e3b0c442"  # two of the dataset's CPU descriptions
NEW = "rocketlake-2c-43bb2171"  # the machine that gets a head later
NAMES = ["matmul-256", "bert-layernorm"]


@pytest.fixture(scope="module")
def entries():
    torch.set_num_threads(1)
    return load(hardware=[ZEN3, X86, NEW], workloads=NAMES, sentences=False)  # cost_records parses them


@pytest.fixture(scope="module")
def trained(entries):
    """An MTL model pretrained on two machines (not NEW), and the records of all three."""
    model = MTLModel(seed=0)
    records, skipped = cost.cost_records(entries, model)
    assert skipped == 0
    model.pretrain([r for r in records if machine_of(r[0]) != NEW], epochs=2)
    return model, records


def _outputs(group: str) -> list:
    """The output tensors of a dataset group `<workload key>@<machine>`."""
    key = group.split("@")[0]
    return [workload(next(n for n in NAMES if workload_key([workload(n)]) == key))]


def _plain(model, group: str) -> str:
    """The workload key of a dataset group, registered with `model` as the tuner registers it."""
    key = group.split("@")[0]
    model.register(key, _outputs(group))
    return key


def _spearman(a, b) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def test_a_head_per_hardware_description_on_one_backbone(trained):
    model, records = trained
    assert model.machines == sorted([ZEN3, X86]) and model.trained >= model.config.warmup
    group = next(w for w, _, _ in records if machine_of(w) == ZEN3)
    assert model.head_of(group) == ZEN3 and model.head_of(f"{group.split('@')[0]}@{NEW}") == SHARED
    traces = model.data[group].traces[:8]
    own = model.predict(group, traces)
    model.hardware = X86
    plain = _plain(model, group)
    assert model.head_of(plain) == X86
    assert not np.allclose(model.predict(plain, traces), own)  # two heads, two rankings of the same programs
    body = dict(model.net.body.named_parameters())
    assert all(name.startswith(("embed", "attn", "blocks", "head")) for name in body)  # TLP's network, shared
    model.hardware = None


def test_a_new_head_from_few_programs_learns_the_machine_and_leaves_the_rest(trained):
    model, records = trained
    model = MTLModel.from_blob(model.to_blob(), "test")
    mine = [r for r in records if machine_of(r[0]) == NEW]
    for group in {w for w, _, _ in records}:
        model.register(group, _outputs(group))
    # a machine that ranks opposite to what the shared head predicts: its head must learn that
    by_group = {}
    for w, t, _ in mine:
        by_group.setdefault(w, []).append(t)
    shared = {w: model.predict(w, ts) for w, ts in by_group.items()}  # NEW has no head yet: the shared one
    flipped = [(w, t, float(np.exp(s))) for w, ts in by_group.items() for t, s in zip(ts, shared[w])]
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    model.fit_head(NEW, flipped, epochs=40)
    assert model.machines == sorted([ZEN3, X86]) + [NEW] and model.head_of(f"x@{NEW}") == NEW
    after = model.net.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before.get(k, after[k] + 1))}
    assert changed and all(k.startswith("heads.2.") for k in changed)  # only the new head learned
    rho_before = np.mean([_spearman(shared[w], [-ms for ww, _, ms in flipped if ww == w]) for w in by_group])
    rho_after = np.mean([_spearman(model.predict(w, ts), -np.exp(shared[w])) for w, ts in by_group.items()])
    assert rho_before < -0.9 and rho_after > rho_before + 1.0


def test_unknown_hardware_falls_back_to_the_shared_head(trained):
    model, records = trained
    group = next(w for w, _, _ in records if machine_of(w) == ZEN3)
    plain = _plain(model, group)
    traces = model.data[group].traces[:8]
    model._pass = SHARED  # what the shared head scores
    shared = model.predict(group, traces)
    model._pass = None
    for hardware in (None, "skylake-avx512-4c-00000000"):
        model.hardware = hardware
        assert model.head_of(plain) == SHARED
        np.testing.assert_allclose(model.predict(plain, traces), shared, rtol=1e-6)
    assert not np.allclose(model.predict(group, traces), shared)
    model.hardware = None


def test_save_load_round_trip_and_ensembles(trained, tmp_path):
    model, records = trained
    model.hardware = ZEN3
    model.save(tmp_path / "m.pt")
    again = load_cost_model(tmp_path / "m.pt")
    assert isinstance(again, MTLModel) and again.machines == model.machines and again.hardware == ZEN3
    group = next(w for w, _, _ in records if machine_of(w) == X86)
    again.register(group, _outputs(group))
    traces = model.data[group].traces[:6]
    np.testing.assert_allclose(again.predict(group, traces), model.predict(group, traces), rtol=1e-5)
    EnsembleModel([model, again]).save(tmp_path / "e.pt")
    ensemble = mtl.use_hardware(load_cost_model(tmp_path / "e.pt"), X86)
    assert mtl.is_mtl(ensemble) and [m.hardware for m in ensemble.members] == [X86, X86]
    model.hardware = None


def test_fit_machine_head_from_dataset_entries_and_the_shipped_lookup(trained, entries, tmp_path, monkeypatch):
    model, _ = trained
    model = MTLModel.from_blob(model.to_blob(), "test")
    assert mtl.fit_machine_head(model, entries, NEW, epochs=2) == sum(e.fingerprint == NEW for e in entries)
    assert NEW in model.machines and model.hardware == NEW
    model.save(tmp_path / "mtl.pt")
    monkeypatch.setenv("MINITC_COST_MODEL", str(tmp_path / "mtl.pt"))
    host = parse_target("llvm")
    loaded = cost.shipped_cost_model(host)
    assert isinstance(loaded, MTLModel) and loaded.hardware == cost.hardware_fingerprint(host)
    adapted = mtl.adapted_mtl_model(entries, ZEN3, path=tmp_path / "mtl.pt")
    assert adapted.hardware == ZEN3 and adapted.machines == model.machines  # ZEN3's head trained further
    assert mtl.adapted_mtl_model(entries, ZEN3, path=tmp_path / "none.pt") is None
    plain = tmp_path / "plain.pt"  # a cost model without heads (MINITC_COST_MODEL may name one): none to adapt
    cost.train_cost_model(entries, epochs=1)[0].save(plain)
    assert mtl.adapted_mtl_model(entries, ZEN3, path=plain) is None


def test_errors_name_the_problem(trained, entries, tmp_path):
    model, records = trained
    (tmp_path / "bad.pt").write_bytes(b"not a model")
    with pytest.raises(MinitcError, match="not a saved TLPModel"):
        load_cost_model(tmp_path / "bad.pt")
    blob = model.to_blob()
    blob["state_dict"] = {k: v for k, v in blob["state_dict"].items() if not k.startswith("heads.1.")}
    torch.save(blob, tmp_path / "truncated.pt")
    with pytest.raises(MinitcError, match="truncated.pt is not a saved TLPModel"):
        load_cost_model(tmp_path / "truncated.pt")
    TLPModel(seed=0).save(tmp_path / "plain.pt")
    with pytest.raises(MinitcError, match="without heads"):
        MTLModel.from_blob(torch.load(tmp_path / "plain.pt", weights_only=True), "plain.pt")
    with pytest.raises(MinitcError, match="other machines too"):
        model.fit_head(NEW, [r for r in records if machine_of(r[0]) in (ZEN3, NEW)])
    with pytest.raises(MinitcError, match="no records"):
        model.fit_head(NEW, [])
    for name in ("", SHARED, "a@b", ZEN3):
        with pytest.raises(MinitcError, match="cannot name a head|has a head already"):
            model.add_head(name)
    with pytest.raises(MinitcError, match="needs an MTL-TLP model"):
        mtl.fit_machine_head(TLPModel(), entries, NEW)
    with pytest.raises(MinitcError, match="no replayable program of skylake"):
        mtl.fit_machine_head(MTLModel(), entries, "skylake-4c-0")


def test_the_cost_model_command_writes_the_mtl_model(tmp_path):
    data = tmp_path / "data"
    DatasetWriter(data).append(load(hardware=[ZEN3, X86], workloads=NAMES[1:], sentences=False))
    args = ["cost-model", "--data", str(data), "--out-dir", str(tmp_path / "cost"), "--epochs", "1"]
    result = CliRunner().invoke(lm_cli, [*args, "--min-programs", "10000", "--members", "1"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "cost").iterdir()) == ["cpu.pt", "mtl.pt"]
    model = load_cost_model(tmp_path / "cost" / "mtl.pt")
    assert isinstance(model, MTLModel) and model.machines == sorted([ZEN3, X86])
    result = CliRunner().invoke(lm_cli, [*args, "--members", "1", "--out-dir", str(tmp_path / "only"), "--mtl-only"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "only").iterdir()] == ["mtl.pt"]


def test_a_saved_cost_model_of_a_kind_this_minitc_does_not_know_is_refused(tmp_path):
    """Saved models name their class's kind (cost_model.BLOB_KINDS, which mtl_model fills)."""
    blob = TLPModel().to_blob()
    blob["meta"]["kind"] = "from-the-future"
    path = tmp_path / "future.pt"
    torch.save(blob, str(path))
    with pytest.raises(MinitcError, match="of kind 'from-the-future', which this minitc cannot read"):
        load_cost_model(path)
