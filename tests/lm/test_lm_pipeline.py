"""The language model's pipeline end to end, with tiny models: data generation, pretraining,
tuning with the `tlm` strategy (records hold sentences), fine-tuning on the records, `--learn`,
the shipped checkpoint, and the `minitc lm` commands."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.database import Database
from minitc.autotune.tuner import tune
from minitc.lm.cli import lm as lm_cli
from minitc.lm.data import demonstrations, gen_data, read_sentences
from minitc.lm.language import parse
from minitc.lm.model import LMError, ModelConfig, TensorLM, load_checkpoint, save_checkpoint
from minitc.lm.pipeline import SHIPPED, finetune, load_model, pretrain, user_model_path
from minitc.lm.tokenizer import Tokenizer

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.set_num_threads(1)
    tok = Tokenizer.default()
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("lm") / "tiny.pt"
    save_checkpoint(path, TensorLM(ModelConfig(vocab_size=len(tok), **TINY)), tok.vocab, {"stage": "test"})
    return path


def _matmul(n=32):
    A = tc.placeholder((n, n), name="A")
    B = tc.placeholder((n, n), name="B")
    return tc.ops.matmul(A, B)


def test_gen_data_then_pretrain_a_tiny_model(tmp_path):
    data = tmp_path / "d.jsonl"
    assert gen_data(data, ["bert-layernorm", "matmul-256"], per_workload=6, seed=1) == 12
    items = read_sentences(data)
    assert len(items) == 12 and {w for w, _ in items} == {"bert-layernorm", "matmul-256"}
    meta = pretrain(data, tmp_path / "m.pt", config=TINY, epochs=2, batch_size=4, max_seconds=60, threads=1)
    model, vocab, saved = load_checkpoint(tmp_path / "m.pt")
    assert saved["sentences"] == meta["sentences"] == 11 and saved["hardware"].startswith("hardware llvm")
    assert vocab == Tokenizer.default().vocab and model.num_parameters() == saved["parameters"]


def _decision_distance(sentence) -> int:
    """How many decisions differ from the sentence's own `default` line."""
    return sum(a != b for a, b in zip(sentence.decisions, sentence.defaults)) + abs(
        len(sentence.decisions) - len(sentence.defaults)
    )


def test_gen_data_near_template_draws_from_the_default_programs_neighbourhood(tmp_path):
    uniform, near = tmp_path / "u.jsonl", tmp_path / "n.jsonl"
    assert gen_data(uniform, ["matmul-256"], per_workload=16, seed=3) == 16
    assert gen_data(near, ["matmul-256"], per_workload=16, seed=3, near_template=0.5) == 16
    far = [_decision_distance(s) for _, s in read_sentences(uniform)]
    close = [_decision_distance(s) for _, s in read_sentences(near)]
    # Mutations of the default: 8 programs within 4 edits of it (a mutation can re-draw a
    # decision it made illegal, so allow one more); the other 8 are the uniform draws.
    assert sum(d <= 5 for d in close) >= 8 and sum(d <= 5 for d in far) < 8
    assert len({str(s) for _, s in read_sentences(near)}) == 16
    # softmax's template has few neighbours: uniform draws make up the count.
    softmax = tmp_path / "s.jsonl"
    assert gen_data(softmax, ["gpt2-softmax"], per_workload=64, seed=3, near_template=1.0) == 64
    assert max(_decision_distance(s) for _, s in read_sentences(softmax)) > 5


def test_malformed_data_line_names_file_and_line(tmp_path):
    data = tmp_path / "d.jsonl"
    gen_data(data, ["matmul-256"], per_workload=2)
    with open(data, "a") as f:
        f.write(json.dumps({"workload": "x", "sentence": "workload stage oops"}) + "\n")
    with pytest.raises(tc.MinitcError, match=r"d.jsonl:3: malformed sentence"):
        read_sentences(data)


def test_tlm_tuning_records_sentences_and_finetuning_uses_them(tmp_path, tiny_checkpoint):
    C = _matmul()
    db = tmp_path / "r.db"
    r = tune(C, trials=6, strategy="tlm", db=db, batch=3, lm=tiny_checkpoint)
    assert r.trials == 6 and r.best_ms > 0 and r.search_stats["valid_rate"] == 1.0
    a, b = np.random.rand(32, 32).astype("float32"), np.random.rand(32, 32).astype("float32")
    np.testing.assert_allclose(r.kernel(a, b), a @ b, rtol=1e-4)
    with Database(db) as d:
        records = d.records(r.workload)
        demos = demonstrations(d)
    texts = [json.loads(rec.trace)["sentence"] for rec in records]
    assert all(parse(t).decisions for t in texts)  # every record holds a parsable sentence
    weights = sorted(w for _, w in demos)
    assert len(demos) == 6 and weights[-1] == pytest.approx(1.0) and all(0 < w <= 1 for w in weights)
    meta = finetune(tiny_checkpoint, db, tmp_path / "ft.pt", epochs=1, threads=1)
    assert meta["demonstrations"] == 6 and meta["history"][0]["stage"] == "test"
    load_checkpoint(tmp_path / "ft.pt")


def test_tlm_search_spends_half_of_later_rounds_on_edits_of_the_best_programs(tiny_checkpoint):
    from minitc.autotune.mutators import is_switch
    from minitc.autotune.space import Space
    from minitc.lm.strategy import tlm_search

    space = Space(_matmul(), "llvm")
    search = tlm_search(space, np.random.default_rng(0), lm=tiny_checkpoint)
    first = search.ask(8)
    assert search.stats()["edits"] == 0  # nothing measured yet: every program is the model's
    search.tell(first, [float(n + 1) for n in range(8)])  # first[0] is the fastest
    second = search.ask(8)
    assert search.stats()["edits"] == 4 and len({c.key for c in second}) == 8
    assert not {c.key for c in first} & {c.key for c in second}
    parents = first[: search.parents]
    for edit in second[:4]:
        assert space.replay(edit.values).key == edit.key  # legal: it replays exactly
        distance = min(sum(a != b for a, b in zip(edit.values, p.values)) for p in parents if p.sketch == edit.sketch)
        # a switch of the best may change which later decisions exist (they are re-drawn)
        first_change = next(n for n, (a, b) in enumerate(zip(edit.values, first[0].values)) if a != b)
        flip = edit.sketch == first[0].sketch and is_switch(first[0].decisions[first_change])
        assert 1 <= distance <= 2 or flip, (edit.values, [p.values for p in parents])


def test_tlm_search_first_sweeps_the_switches_of_its_best_program(tiny_checkpoint):
    from minitc.autotune.mutators import is_switch
    from minitc.autotune.space import Space
    from minitc.lm.strategy import tlm_search

    space = Space(_matmul(), "llvm")
    search = tlm_search(space, np.random.default_rng(1), lm=tiny_checkpoint)
    first = search.ask(16)
    assert len(first) == 8  # a short first round: the sweep starts after 8 measurements, not 16
    search.tell(first, [float(n + 1) for n in range(8)])
    best = first[0].values
    flips = [(n, v) for n, d in enumerate(first[0].decisions) if is_switch(d) for v in d.domain if v != d.value]
    assert flips  # every matmul program has a switch (the template's packing, the generic cache_write)

    def flip_of(c):  # the first decision where c differs from the best: the flipped switch
        n = next(n for n, (a, b) in enumerate(zip(c.values, best)) if a != b)
        return n, c.values[n]

    swept = []
    for _ in range(3):  # each round's edit share (4) goes to the sweep first, in order
        batch = search.ask(8)
        swept += [flip_of(c) for c in batch[: min(4, len(flips) - len(swept))]]
        search.tell(batch, [100.0] * 8)  # none beats the best: its sweep goes on
    assert swept == flips[:12]


def test_tlm_search_warns_about_another_machine_not_another_measurement(tmp_path, tiny_checkpoint):
    import warnings

    from minitc.autotune.space import Space
    from minitc.lm.hardware import hardware
    from minitc.lm.strategy import tlm_search

    space = Space(_matmul(), "llvm")
    model, vocab, _ = load_checkpoint(tiny_checkpoint)
    here = hardware("llvm")
    same_kind = str(here).replace(f" gflops {here.gflops} ", f" gflops {here.gflops // 2 + 1} ")  # a busy day
    other_kind = str(here).replace(f" cores {here.cores} ", f" cores {here.cores + 62} ")
    assert same_kind != str(here) and other_kind != str(here)
    for line, warns in ((same_kind, False), (other_kind, True)):
        path = tmp_path / "m.pt"
        save_checkpoint(path, model, vocab, {"stage": "test", "hardware": line})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tlm_search(space, np.random.default_rng(0), lm=path)
        assert any("was trained on" in str(w.message) for w in caught) == warns, line


def test_learn_keeps_the_users_model_and_it_becomes_the_default(tmp_path, tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("MINITC_DB", str(tmp_path / "records.db"))
    monkeypatch.delenv("MINITC_LM", raising=False)
    assert not user_model_path().exists()
    tune(_matmul(), trials=4, strategy="tlm", batch=4, lm=tiny_checkpoint, learn=True)
    assert user_model_path().exists()
    _, _, meta = load_model()
    assert meta["stage"] == "learn" and meta["learned_from"] == 4
    from minitc.lm.hardware import hardware

    # a stage of its own on top of the model's: this machine is one it has learned from
    assert meta["hardware_lines"] == {str(hardware("llvm")): 4} and meta["history"][-1]["stage"] == "test"


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(LMError, match="no language model at"):
        tune(_matmul(), trials=2, strategy="tlm", db=tmp_path / "r.db", lm=tmp_path / "absent.pt")


def test_the_shipped_model_loads_and_proposes_valid_programs():
    if not SHIPPED.exists():
        pytest.fail(f"the package must ship a model at {SHIPPED}")
    from minitc.autotune.space import Space
    from minitc.lm.decode import Decoder
    from minitc.lm.hardware import hardware

    model, tok, meta = load_model(SHIPPED)
    assert meta["parameters"] == model.num_parameters() and 1e6 <= meta["parameters"] <= 5e6
    space = Space(_matmul(64), "llvm")
    cands, failures = Decoder(model, tok, space, hardware("llvm")).generate(8, np.random.default_rng(0))
    assert failures == 0 and len(cands) == 8
    assert all(space.replay(c.values).key == c.key for c in cands)


def test_lm_commands(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(lm_cli, ["workloads"])
    assert listed.exit_code == 0 and "held out" in listed.output and "matmul-512" in listed.output
    out = tmp_path / "d.jsonl"
    made = runner.invoke(
        lm_cli, ["gen-data", str(out), "--per-workload", "3", "--workloads", "gpt2-softmax", "--near-template", "0.5"]
    )
    assert made.exit_code == 0, made.output
    assert len(read_sentences(out)) == 3
    bad = runner.invoke(lm_cli, ["gen-data", str(out), "--workloads", "nope"])
    assert bad.exit_code != 0 and "unknown workloads" in bad.output


@pytest.mark.heavy
def test_tlm_eval_suite_runs_and_tabulates(tmp_path, tiny_checkpoint):
    from minitc.cli import main

    out = tmp_path / "eval.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--suite",
            "tlm-eval",
            "--workloads",
            "softmax-bert",
            "--tlm-k",
            "1,2",
            "--evo-trials",
            "2",
            "--lm",
            str(tiny_checkpoint),
            "--json",
            str(out),
            "-q",
            "--tlm-seeds",
            "3,4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "TLM@1/Evo@2" in result.output and "geomean" in result.output
    # a second seed runs TLM again against the same evolutionary run
    data = json.loads(out.read_text())
    (row,), (again,) = data["rows"], data["more_seeds"]["4"]
    assert again["evo_ms"] == row["evo_ms"] and "evo_history" not in again and len(again["tlm_history"]) == 2
    seeds = result.output.split("TLM with 2 seeds")[1]
    assert "seed 3" in seeds and "seed 4" in seeds and "median" in seeds and "side by side @2" in seeds
    assert "Evo s / TLM s" in seeds and " of 1" in seeds  # the wall-time ratio, on how many workloads
    assert row["workload"] == "softmax-bert" and row["valid_rate"] == 1.0
    assert len(row["tlm_history"]) == 2 and len(row["evo_history"]) == 2
    # each budget's answer is re-measured, and its time includes that
    assert all(ms > 0 for ms in row["tlm_ms"].values()) and row["tlm_seconds"]["1"] >= row["tlm_times"][0]
    assert row["tlm_seconds"]["2"] >= row["tlm_times"][1] and row["evo_confirmed"]
    # the winners at each budget (re-measured, and by first measurement alone), and the hand
    # template, timed again side by side
    labels = {"TLM@1", "TLM@2", "Evo@2"}
    assert set(row["winners"]) == set(row["first_winners"]) == labels
    assert row["winners"]["TLM@1"] == row["first_winners"]["TLM@1"]  # one program: nothing to confirm
    assert set(row["retimed_ms"]) == labels | {f"{x} first" for x in labels} | {"template"}
    assert all(ms > 0 for ms in row["retimed_ms"].values()) and "side by side" in result.output
    assert "against the hand template (template ms / ms): TLM@1 " in result.output
    assert "had each search kept its fastest first measurement (side by side): TLM@1/Evo@2 " in result.output
    assert "tuning time until a search's winner is within 1% of Evo@2's" in result.output
    assert row["evo_matches_evo"]["k"] == 2 and row["evo_matches_evo"]["seconds"] > 0
    bad = CliRunner().invoke(main, ["bench", "--suite", "tlm-eval", "--workloads", "matmul-1024"])
    assert bad.exit_code != 0 and "held-out workloads only" in bad.output


def _softmax_row(checkpoint, tlm_program=None) -> dict:
    """tlm-eval's row for softmax-bert: TLM@1 with `checkpoint`, Evo@2 lent by an earlier run
    (--evo-from), which also holds the TLM@1 program `tlm_program` if given."""
    from minitc.benchmarks.tlm_eval import evaluate_workload
    from minitc.lm.training_set import HELD_OUT

    winners = {"Evo@2": "[]", **({"TLM@1": tlm_program} if tlm_program else {})}
    earlier = {
        "evo_ms": {"2": 1.0},
        "evo_seconds": {"2": 1.0},
        "evo_history": [1.0, 1.0],
        "evo_times": [0.5, 1.0],
        "evo_errors": 0,
        "winners": dict(winners),
        "first_winners": dict(winners),
    }
    row = evaluate_workload(
        "softmax-bert",
        HELD_OUT["softmax-bert"],
        [1],
        [2],
        seed=0,
        lm=str(checkpoint),
        evo_from=earlier,
        retime_rounds=0,
    )
    return row


def test_an_earlier_run_lends_only_its_evolutionary_winners(tiny_checkpoint):
    """--evo-from reuses the evolutionary search; the TLM winners timed side by side must be
    this run's (an earlier run's TLM answers once stood in for them, pairing this run's
    latencies with another run's programs)."""
    row = _softmax_row(tiny_checkpoint, tlm_program="stale")
    assert row["winners"]["Evo@2"] == "[]" and row["first_winners"]["Evo@2"] == "[]"
    assert row["winners"]["TLM@1"] != "stale" and row["winners"]["TLM@1"] == row["first_winners"]["TLM@1"]
    assert json.loads(row["winners"]["TLM@1"])  # this run's program: a trace with steps


def test_time_to_match_uses_the_same_rule_for_both_searches():
    from minitc.benchmarks.tlm_report import _first_match

    row = {
        "retimed_ms": {"TLM@1": 2.0, "TLM@10": 1.0, "Evo@64": 0.99, "Evo@256": 1.2, "Evo@1000": 1.0},
        "tlm_seconds": {1: 5.0, 10: 8.0},
        "evo_seconds": {"64": 20.0, "256": 80.0, "1000": 300.0},
    }  # as read from JSON
    assert _first_match(row, "TLM", [1, 10], 1000) == {"k": 10, "seconds": 8.0}
    assert _first_match(row, "Evo", [64, 256, 1000], 1000) == {"k": 64, "seconds": 20.0}
    row["retimed_ms"]["TLM@10"] = 1.005  # within the timing noise (MATCH_TOLERANCE, 1%) counts
    assert _first_match(row, "TLM", [1, 10], 1000) == {"k": 10, "seconds": 8.0}
    row["retimed_ms"]["TLM@10"] = 1.02
    assert _first_match(row, "TLM", [1, 10], 1000) is None
    assert _first_match(row, "TLM", [1, 10], 1000, tolerance=0.05) == {"k": 10, "seconds": 8.0}


def test_a_stored_run_is_reported_again_under_the_current_rules(tmp_path):
    from minitc.benchmarks.tlm_report import report

    def row(tlm10, evo64):
        return {
            "workload": "softmax-bert",
            "template_ms": 1.0,
            "valid_rate": 1.0,
            "tlm_ms": {"1": 2.0, "10": tlm10},
            "evo_ms": {"64": evo64, "1000": 1.0},
            "tlm_seconds": {"1": 5.0, "10": 8.0},
            "evo_seconds": {"64": 20.0, "1000": 300.0},
            "retimed_ms": {"TLM@1": 2.0, "TLM@10": tlm10, "Evo@64": evo64, "Evo@1000": 1.0},
        }

    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "run": {"command": "python -m benchmarks --suite tlm-eval --tlm-seeds 3,4"},
                "rows": [row(1.005, 1.5)],
                "more_seeds": {"4": [row(1.2, 1.5)]},
            }
        )
    )
    text = report(path)
    assert "TLM@10 after 8 s, Evo@1000 after 300 s (Evo s / TLM s = 38)" in text  # 1.005 ms is within 1%
    seeds = {line.split()[1]: line.split() for line in text.splitlines() if line.startswith("seed ")}
    assert seeds["3"][-4:] == ["38", "1", "of", "1"] and seeds["4"][-4:] == ["-", "0", "of", "1"]


def test_a_smaller_budget_answers_as_the_tuner_would():
    """TLM@k and Evo@t are what tuning with that budget returns: the first k records'
    finalists re-measured, not their fastest first measurement (a lucky one here)."""
    from types import SimpleNamespace

    from minitc.autotune.database import Record
    from minitc.autotune.space import Space
    from minitc.autotune.tuner import encode_trace
    from minitc.benchmarks.tlm_eval import _confirmed_winners, _first_winners

    out = _matmul(64)
    space = Space(out, "llvm")
    rng = np.random.default_rng(0)
    cands = [space.replay(space.default_values())] + [space.sample(rng) for _ in range(2)]
    first_ms = [1000.0, 2000.0, 1e-6]  # as if first measured under load, then in a lucky moment
    records = [Record("w", space.target.string, "hw", encode_trace(c), (ms,), ms) for c, ms in zip(cands, first_ms)]
    result = SimpleNamespace(workload="w", history=first_ms, times=[1.0, 2.0, 3.0], best_trace=None)
    answers = _confirmed_winners(out, records, result, [1, 2])
    assert answers[1][0] == cands[0].trace and answers[1][2] >= 1.0
    trace, ms, seconds = answers[2]
    assert trace in (cands[0].trace, cands[1].trace) and 0 < ms < 1000.0 and seconds >= 2.0
    assert _first_winners(records, [2, 3]) == {2: cands[0].trace, 3: cands[2].trace}


def test_tlm_eval_ranks_with_the_strategys_own_cost_model(tiny_checkpoint, monkeypatch):
    """tlm-eval's tlm runs get the cost model `tc.tune(strategy="tlm")` gives users (the
    shipped one for this machine, or $MINITC_COST_MODEL), not a fresh one: a fresh TLPModel
    once stood in, so the suite measured a configuration no user runs."""
    from minitc.lm import cost

    asked = []

    def shipped(target):
        asked.append(target)
        return None  # the strategy then falls back to a fresh model, as without a shipped one

    monkeypatch.setattr(cost, "shipped_cost_model", shipped)
    _softmax_row(tiny_checkpoint)
    assert asked, "the tlm strategy was handed a cost model instead of choosing its own"
