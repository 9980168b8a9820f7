"""Adapting the language model to a machine (lm/adapt.py, `minitc lm adapt`) end to end with a
tiny model and one small workload; the hardware warning of the `tlm` strategy (what it compares,
the closest machine it names, what it advises); and the leave-one-hardware-out model of the
tlm-eval suite (its split and its refusals, not an evaluation)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from minitc.autotune.cost_model import load_cost_model
from minitc.autotune.database import Database
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.cli import main
from minitc.lm.adapt import adapt
from minitc.lm.cost import adapted_cost_model_path, shipped_cost_model_path
from minitc.lm.dataset import DatasetWriter, check_entry, load
from minitc.lm.hardware import closest_machine, differences, hardware, trained_hardware
from minitc.lm.language import Hardware, SentenceWriter, parse
from minitc.lm.model import LMError, ModelConfig, TensorLM, load_checkpoint, save_checkpoint
from minitc.lm.mtl import is_mtl, members_of, shipped_mtl_path
from minitc.lm.pipeline import SHIPPED, adapted_model_path
from minitc.lm.strategy import hardware_warning
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.training_set import workload
from minitc.target import hardware_fingerprint, parse_target

WORKLOAD = "bert-layernorm"  # a training workload whose programs build and run in a fraction of a second
ZEN4 = Hardware("llvm", "znver4", 64, 16, 32, 1024, 32768, 3800, 300)  # not the host, whatever it is
ZEN4_FP = "znver4-64c-0000"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    tok = Tokenizer.default()
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("lm") / "tiny.pt"
    model = TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64))
    save_checkpoint(path, model, tok.vocab, {"stage": "test"})
    return path


def _entries(hw, fingerprint: str, count: int, seed: int = 0) -> list:
    """Dataset entries of `count` random programs of WORKLOAD measured on the machine `hw`."""
    out = workload(WORKLOAD)
    space, rng, cands = Space(out, "llvm"), np.random.default_rng(seed), {}
    while len(cands) < count:
        c = space.sample(rng)
        cands.setdefault(c.key, c)
    write = SentenceWriter(space, hw)
    objs = [
        {
            "schema": 1,
            "workload": {"key": workload_key(out), "name": WORKLOAD, "description": "layer_norm"},
            "target": f"llvm -mcpu={hw.cpu} -num-cores={hw.cores}",
            "hardware": {"fingerprint": fingerprint, "tokens": str(hw)},
            "sentence": str(write(c.decisions)),
            "latencies_ms": [1.0 + n],
            "median_ms": 1.0 + n,
            "error": None,
            "date": "2026-11-25T06:23:11Z",
            "minitc": "0.1.0",
            "source": "test",
        }
        for n, c in enumerate(cands.values())
    ]
    return [check_entry(o, f"made:{n}") for n, o in enumerate(objs, 1)]


def test_adapt_measures_here_keeps_the_programs_and_fine_tunes_a_copy(tmp_path, tiny, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MINITC_DB", str(cache / "records.db"))
    monkeypatch.delenv("MINITC_LM", raising=False)
    monkeypatch.delenv("MINITC_COST_MODEL", raising=False)
    data = tmp_path / "data"
    DatasetWriter(data).append(_entries(ZEN4, ZEN4_FP, 10))  # another machine's programs
    shipped = SHIPPED.read_bytes()
    here_fp = hardware_fingerprint("llvm")

    args = ["lm", "adapt", "--lm", str(tiny), "--workloads", WORKLOAD, "--per-workload", "3", "--dataset", str(data)]
    result = CliRunner().invoke(main, [*args, "--minutes", "5", "--threads", "1"])
    assert result.exit_code == 0, result.output
    path = adapted_model_path(here_fp)
    assert path.parent == cache and path.exists() and SHIPPED.read_bytes() == shipped
    assert f"wrote {path}" in result.output and f"--lm {path}" in result.output and f"MINITC_LM={path}" in result.output
    assert f"[pass 1] {WORKLOAD}: 3 measured" in result.output
    # the shipped MTL-TLP cost model with this machine's head learned from its 3 programs, which
    # the tlm strategy then ranks with here
    cost_path = adapted_cost_model_path(here_fp)
    assert cost_path.parent == cache and f"wrote the cost model {cost_path}" in result.output
    adapted = load_cost_model(cost_path)
    assert is_mtl(adapted) and len(members_of(adapted)) == len(members_of(load_cost_model(shipped_mtl_path())))
    assert all(here_fp in m.machines and m.hardware == here_fp and m.trained == 3 for m in members_of(adapted))
    assert shipped_cost_model_path(parse_target("llvm")) == cost_path

    # the 3 programs (the template's, the model's, one near the template's) are kept in the records and dataset
    mine = [e for e in load(data) if e.fingerprint == here_fp]
    assert len(mine) == 3 and {e.source for e in mine} == {"minitc lm adapt"} and all(e.name == WORKLOAD for e in mine)
    with Database(cache / "adapt-records.db") as db:
        assert len(db.programs(workload_key(workload(WORKLOAD)))) == 3
    # fine-tuned on this machine's 3 programs and 2 x 3 of the other machine's 10
    _, _, meta = load_checkpoint(path)
    here_line = str(hardware("llvm"))
    assert meta["stage"] == "adapt" and meta["adapted_to"] == here_fp and meta["hardware"] == here_line
    assert (meta["here"], meta["others"], meta["demonstrations"]) == (3, 6, 9)
    assert meta["hardware_lines"] == {here_line: 3, str(ZEN4): 6} and meta["history"][-1]["stage"] == "test"
    assert trained_hardware(meta) == meta["hardware_lines"]

    # without the dataset: one more program, kept in the records only; the fine-tuning sees all 4
    again = adapt(checkpoint=tiny, names=[WORKLOAD], per_workload=1, dataset=data, keep=False, threads=1)
    assert (again.measured, again.here, again.others) == (1, 4, 8) and len(load(data)) == 13
    # the time limit stops measuring; what was measured before is still used
    said = []
    late = adapt(checkpoint=tiny, names=[WORKLOAD], minutes=1e-9, dataset=data, keep=False, threads=1, say=said.append)
    assert late.measured == 0 and late.here == 4 and "measuring stopped at its time limit, in pass 1" in said


def test_adapt_refuses_the_shipped_checkpoint_and_an_empty_sample(tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("MINITC_DB", str(tmp_path / "records.db"))
    result = CliRunner().invoke(main, ["lm", "adapt", "--out", str(SHIPPED), "--no-dataset"])
    assert result.exit_code == 1 and "is the model minitc ships, which adapting never overwrites" in result.output
    result = CliRunner().invoke(main, ["lm", "adapt", "--workloads", "matmul-512", "--no-dataset"])
    assert result.exit_code == 2 and "matmul-512: held out of training for tlm-eval" in result.output
    with pytest.raises(LMError, match="nothing of this machine was measured .* give `minitc lm adapt` more --minutes"):
        adapt(checkpoint=tiny, names=[WORKLOAD], minutes=1e-9, dataset=tmp_path / "none", keep=False)


def _line(**fields) -> str:
    return str(Hardware(**{**vars(ZEN4), **fields}))


def test_hardware_lines_compare_what_the_machine_is():
    assert differences(_line(gflops=100, gbps=5), str(ZEN4)) == []  # measured rates vary with the load
    assert differences(_line(cpu="znver3", simd=8, l2=512), str(ZEN4)) == ["cpu", "simd", "l2"]
    lines = {_line(cpu="znver3", simd=8): 50, _line(cores=1): 10, _line(cores=4): 20}
    assert closest_machine(lines, str(ZEN4)) == _line(cores=4)  # one field apart; the most programs
    pretrained = {"stage": "pretrain", "hardware": _line(cpu="haswell"), "sentences": 100}
    assert trained_hardware(pretrained) == {_line(cpu="haswell"): 100}
    assert trained_hardware(pretrained, measured=True) == {}
    # fine-tuning rounds repeat their programs: a line counts its largest stage, not their sum
    tuned = {"stage": "finetune", "hardware": str(ZEN4), "demonstrations": 30}
    tuned["history"] = [pretrained, {"stage": "finetune", "hardware": str(ZEN4), "demonstrations": 20}]
    assert trained_hardware(tuned) == {str(ZEN4): 30}


def test_the_warning_names_the_closest_machine_and_advises_adapting(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITC_DB", str(tmp_path / "records.db"))
    here = hardware("llvm")
    same_kind = str(here).replace(f" gflops {here.gflops} ", " gflops 1 ")
    far, near = _line(cpu="haswell", cores=64, simd=here.simd * 2 + 1), str(here).replace(" l3 ", " l3 1")
    meta = {"stage": "finetune", "hardware": far, "hardware_lines": {far: 100, near: 5}}
    message = hardware_warning(meta, here)
    assert "\n" not in message and "was trained on 2 machines, none like this one" in message
    assert f"the closest, `{near.split(' gflops ')[0]}`, differs in l3" in message
    assert "run `minitc lm adapt` (about 12 minutes)" in message
    assert hardware_warning({**meta, "hardware_lines": {far: 100, same_kind: 5}}, here) is None
    one = hardware_warning({"stage": "finetune", "hardware": near}, here)
    assert "was trained on `" in one and "unlike this machine" in one and "it differs in l3" in one
    # a --learn stage on this machine counts
    learned = {"stage": "learn", "hardware": str(here), "history": [meta]}
    assert hardware_warning(learned, here) is None
    # once adapted, it points at the adapted copy instead
    path = adapted_model_path(hardware_fingerprint("llvm"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    assert f"a copy adapted to this machine is at {path}: tune with `--lm {path}`" in hardware_warning(meta, here)


def test_leave_out_model_trains_without_this_hosts_measurements(tmp_path, tiny):
    from minitc.benchmarks.tlm_eval import leave_out_model, without_hardware

    here_fp = hardware_fingerprint("llvm")
    mine, zen4 = _entries(hardware("llvm"), here_fp, 3), _entries(ZEN4, ZEN4_FP, 4, seed=1)
    assert without_hardware(mine + zen4, here_fp) == (zen4, 3)
    assert without_hardware(zen4, here_fp) == (zen4, 0)  # nothing to leave out: all of it is kept
    DatasetWriter(tmp_path / "data").append(mine + zen4)
    said = []
    meta = leave_out_model(tiny, tmp_path / "lo.pt", data=tmp_path / "data", threads=1, say=said.append)
    assert meta["left_out"] == here_fp and meta["hardware_lines"] == {str(ZEN4): 4}
    assert said == [f"leave-out: fine-tuning tiny.pt on 4 programs, without the 3 of {here_fp}"]
    # a base that has seen this machine's measurements cannot show how the model does without them
    model, vocab, _ = load_checkpoint(tiny)
    save_checkpoint(tmp_path / "seen.pt", model, vocab, {"stage": "finetune", "hardware": str(hardware("llvm"))})
    with pytest.raises(LMError, match="was fine-tuned on measurements of this machine .* start from a checkpoint"):
        leave_out_model(tmp_path / "seen.pt", tmp_path / "x.pt", data=tmp_path / "data")
    # ... and the cost model it ranks with: trained without this machine, so no head of its own
    from minitc.benchmarks.tlm_eval import leave_out_cost_model

    made = leave_out_cost_model(tmp_path / "cost.pt", data=tmp_path / "data", members=2, epochs=2)
    assert made["programs"] == 4
    assert all(m.machines == [ZEN4_FP] for m in members_of(load_cost_model(tmp_path / "cost.pt")))
    refused = CliRunner().invoke(main, ["bench", "--suite", "smoke", "--leave-out-hardware"])
    assert refused.exit_code == 2 and "--leave-out-hardware applies to the suite tlm-eval" in refused.output


def test_adapting_a_cpu_mixes_in_other_cpus_not_gpus(tmp_path):
    import shutil

    from minitc.lm.adapt import mixture
    from minitc.target import parse_target

    data = tmp_path / "data"
    here_fp = hardware_fingerprint(parse_target("llvm"))
    DatasetWriter(data).append(_entries(hardware("llvm", measured={"gflops": 1.0, "gbps": 1.0}), here_fp, 4))
    DatasetWriter(data).append(_entries(ZEN4, ZEN4_FP, 5))
    for shard in (Path(__file__).parents[2] / "lm" / "data").glob("NVIDIA-*.jsonl.gz"):  # GPU measurements
        shutil.copy(shard, data / shard.name)
    assert any(e.hardware.startswith("hardware cuda") for e in load(data, sentences=False))
    here, rest = mixture(tmp_path / "none.db", data, "llvm", 100.0, np.random.default_rng(0))
    assert len(here) == 4 and len(rest) == 5
    assert all(str(parse(e.sentence).hardware).startswith("hardware llvm") for e, _ in here + rest)
