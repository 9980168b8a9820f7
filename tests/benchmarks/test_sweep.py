"""The sweep of transformers' architectures (benchmarks/sweep*.py, issue 53): the shrinking
rules, the worker processes (a crash or a hang is a row), the pass list's regressions, the
generated page, and a fixed subset of ten architectures compiled and checked against eager."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from helpers import experiment

from minitc.benchmarks import sweep
from minitc.benchmarks.sweep_configs import Architecture, architectures, shrunk
from minitc.benchmarks.sweep_row import PASSING

# one of each kind of model and node: encoder (GELU, layer norm), causal decoder with a cache,
# LLaMA-style decoder (RMSNorm, rotary, gated SiLU), encoder-decoder (relative position
# buckets), convolutions with batch norm, depthwise convolutions with channel-last norms,
# patches and attention, audio features and 1-D convolutions, raw audio with group norm, and
# a multimodal (text and image) encoder
SUBSET = ("bert", "gpt2", "llama", "t5", "resnet", "convnext", "vit", "whisper", "wav2vec2", "clip")


def test_every_modality_is_enumerated():
    names = architectures()
    assert len(names) > 300
    assert set(SUBSET) <= set(names)
    assert Architecture.of("gpt2").model_class == "GPT2Model"
    with pytest.raises(KeyError, match="not a model type"):
        Architecture.of("no-such-model")


def test_a_model_with_several_main_inputs_is_built_from_the_first():
    """OneFormer names ["pixel_values", "task_inputs"]; the sweep raised TypeError (a list is
    not a key of MODALITY) instead of making a row of it."""
    assert Architecture.of("oneformer").main_input() == "pixel_values"


def test_configurations_shrink_alike():
    values = dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, num_key_value_heads=4)
    values.update(intermediate_size=4096, image_size=224, use_cache=True, vocab_size=32000)
    assert shrunk(values) == dict(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, num_key_value_heads=1, intermediate_size=128,
        image_size=64,
    )  # fmt: skip
    stages = dict(hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3], num_heads=[3, 6, 12, 24])
    assert shrunk(stages) == dict(hidden_sizes=[16, 16, 32, 64], depths=[1, 1, 1, 1], num_heads=[2, 2, 2, 2])
    assert "image_size" not in shrunk(values, keep=("image_size",))


FAKE_WORKER = """
import json, sys, time
for line in sys.stdin:
    name = line.strip()
    if name == "crash":
        print("minitc: fatal signal 11 in this process; running: kernel k", file=sys.stderr, flush=True)
        sys.exit(3)
    if name == "hang":
        time.sleep(60)
    print(json.dumps({"model": name, "status": "pass", "error": None, "speed": 2.0}), flush=True)
"""


def test_a_crash_or_a_hang_is_a_row_and_the_sweep_goes_on(tmp_path, monkeypatch):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(FAKE_WORKER))
    monkeypatch.setattr(sweep, "worker_command", lambda *args: [sys.executable, str(script)])
    names = ["a", "crash", "b", "hang", "c"]
    rows = sweep.run(names, jobs=2, timeout_s=3, threads=1, rounds=0, inductor=False, say=lambda msg: None)
    assert [r["model"] for r in rows] == names
    assert [r["status"] for r in rows] == ["pass", "crash", "pass", "timeout", "pass"]
    assert rows[1]["error"] == "worker exit status 3: minitc: fatal signal 11 in this process; running: kernel k"
    assert "within 3 s" in rows[3]["error"]


def test_the_pass_list_catches_regressions():
    recorded = {"bert": "pass", "gpt2": "fallback", "vit": "pass"}
    rows = [
        {"model": "bert", "status": "fallback", "error": None},
        {"model": "gpt2", "status": "pass", "error": None},
        {"model": "vit", "status": "mismatch", "error": "output 0: wrong result"},
        {"model": "swin", "status": "pass", "error": None},
    ]
    assert sweep.regressions(rows, recorded) == [
        "bert: was pass, now fallback",
        "vit: was pass, now mismatch: output 0: wrong result",
    ]
    assert sweep.gains(rows, recorded) == ["gpt2", "swin"]
    assert sweep.pass_list(rows) == {"bert": "fallback", "gpt2": "pass", "swin": "pass"}


def test_the_summary_counts_the_exported_only():
    rows = [{"model": "a", "status": "pass", "speed": 2.0}, {"model": "b", "status": "pass", "speed": 8.0}]
    rows += [
        {"model": "c", "status": "mismatch"},
        {"model": "d", "status": "export"},
        {"model": "e", "status": "config"},
    ]
    figures = sweep.summary(rows)
    assert (figures["exported"], figures["passed"], figures["pass_rate"]) == (3, 2, 2 / 3)
    assert figures["geomean_vs_eager"] == pytest.approx(4.0)
    assert figures["geomean_vs_inductor"] is None


def test_the_recorded_pass_list_is_the_stored_runs():
    page = experiment("sweep_page", "docs")
    rows = json.loads(page.RESULT.read_text())["rows"]
    assert sweep.read_pass_list() == sweep.pass_list(rows), "record the run's pass list: --suite sweep --update"


def test_the_sweep_page_matches_the_stored_run():
    assert experiment("sweep_page", "docs").main(["--check"]) == 0, "run python docs/sweep_page.py"


@pytest.mark.heavy
def test_the_subset_compiles_and_matches_eager():
    """About 30 s on 2 cores: each architecture in a worker process, as the sweep runs it."""
    rows = sweep.run(list(SUBSET), jobs=1, timeout_s=300, threads=1, rounds=0, inductor=False, say=lambda msg: None)
    failed = {r["model"]: f"{r['status']}: {r['error']}" for r in rows if r["status"] not in PASSING}
    assert not failed
    assert all(r["compile_s"] > 0 and isinstance(r["fallbacks"], dict) for r in rows)
    assert rows[SUBSET.index("clip")]["modality"] == "multimodal"
    assert set(rows[SUBSET.index("t5")]["inputs"]) == {"input_ids", "decoder_input_ids"}


def test_internal_fallbacks_are_counted_before_and_after_the_fallback_path(monkeypatch):
    import warnings
    from types import SimpleNamespace

    import minitc as tc
    from minitc.benchmarks.sweep_row import internal_fallbacks

    class Fallback(UserWarning):
        pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("layout pass failed on node x", Fallback)
    assert internal_fallbacks(SimpleNamespace(), caught) == []  # not minitc's warning class
    monkeypatch.setattr(tc, "CompilerFallbackWarning", Fallback, raising=False)
    assert internal_fallbacks(SimpleNamespace(), caught) == ["layout pass failed on node x"]
    compiled = SimpleNamespace(fallbacks=["fusion of node y: IndexError"])  # the warning sums these up
    assert internal_fallbacks(compiled, caught) == ["fusion of node y: IndexError"]


def test_a_mismatch_says_whether_eager_or_torch_export_differs_first():
    """minitc compiles torch.export's program: where that program differs from a deterministic
    eager (paligemma's), the row is an export failure; where eager differs from itself (random
    masks), the reason says so; else it is minitc's mismatch."""
    import torch

    from minitc.benchmarks.sweep_row import mismatch, tensors

    class Traced(torch.nn.Module):
        def forward(self, x):
            return x * 2 if torch.compiler.is_exporting() else x

    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    x = (torch.ones(2, 3),)
    for model, stage, says in [
        (Traced(), "export", "torch.export's program differs from eager"),
        (Noisy(), "mismatch", "eager differs from itself"),
        (torch.nn.ReLU(), "mismatch", "minitc's"),
    ]:
        error = mismatch(model, x, tensors(model(*x)), "minitc's")
        assert error.stage == stage and says in str(error), error
