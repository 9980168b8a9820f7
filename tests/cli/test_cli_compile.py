"""`minitc compile MODEL`: a model from a file, compiled and tuned, checked and timed; bad
model specs get one clear line."""

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from minitc.cli import main  # noqa: E402

FACTORY = """
import torch
from torch import nn

def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval(), (torch.randn(4, 16),)

def wrong():
    return 3
"""


@pytest.fixture
def factory(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(FACTORY)
    return path


def test_compile_tunes_checks_and_times_a_model_from_a_file(factory, tmp_path):
    out = tmp_path / "o.json"
    args = ["compile", f"{factory}:make", "--trials", "4", "--strategy", "random", "--db", str(tmp_path / "r.db")]
    result = CliRunner().invoke(main, args + ["--graph", "--json", str(out), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "make: 2 nodes, 2 kernels of 2 distinct tasks" in result.output
    assert (
        "model estimate" in result.output
        and "dense(%input, %0.weight_t_blocked, %0.bias, weight_block=" in result.output
    )
    record = json.loads(out.read_text())
    assert record["max_abs_error"] < 1e-4 and record["tasks"] == 2 and record["trials"] == 4
    assert set(record["ms"]) == {"minitc", "torch eager"} and all(v > 0 for v in record["ms"].values())


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no-such-model", "unknown model 'no-such-model'"),
        ("missing.py:make", "missing.py: no such file"),
        ("{factory}:nothing", "has no function 'nothing'"),
        ("{factory}:wrong", "must return (model, example_inputs), got int"),
    ],
)
def test_bad_model_specs_get_one_clear_line(factory, spec, message):
    result = CliRunner().invoke(main, ["compile", spec.format(factory=factory)])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_compile_for_the_simulated_gpu_checks_and_times_it(factory, tmp_path):
    out = tmp_path / "o.json"
    args = ["compile", f"{factory}:make", "--target", "cuda-sim", "--db", str(tmp_path / "r.db"), "--json", str(out)]
    result = CliRunner().invoke(main, args + ["--threads", "1"])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["target"] == "cuda-sim" and record["max_abs_error"] < 1e-4 and record["ms"]["minitc"] > 0


@pytest.mark.heavy
def test_compile_with_a_dynamic_size_checks_and_times_the_range(factory, tmp_path):
    out = tmp_path / "d.json"
    args = ["compile", f"{factory}:make", "--dynamic", "batch=2..16@0", "--db", str(tmp_path / "r.db"), "--trials", "4"]
    result = CliRunner().invoke(main, args + ["--threads", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert [row["size"] for row in record["rows"]] == [2, 6, 12, 16]
    assert all(row["relative_error"] < 1e-5 for row in record["rows"])
    assert "buckets compiled" in result.output and record["tuned_tasks"] > 0  # --trials tuned the first bucket


BAD_SIZES = [("seq", "NAME=LO..HI"), ("seq=9..3", "1 <= LO <= HI"), ("seq=2..8@4", "no input has a dimension 4")]


@pytest.mark.parametrize("spec, message", BAD_SIZES)
def test_a_bad_dynamic_size_gets_one_clear_line(factory, spec, message):
    result = CliRunner().invoke(main, ["compile", f"{factory}:make", "--dynamic", spec])
    assert result.exit_code != 0 and message in result.output


@pytest.mark.heavy
def test_generate_checks_the_tokens_against_eager_and_times_the_decode(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "g.json"
    args = ["generate", "gpt2-tiny", "--prompt-len", "8", "--new", "4", "--rounds", "1", "--json", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert "mismatch" not in record and set(record["systems"]) == {"eager", "minitc"}
    assert record["systems"]["minitc"]["decode_ms_per_token"] > 0
