"""The whole-model suite's models and runner (benchmarks/models_zoo.py, benchmarks/models.py):
the small variants compile with tc.compile and match PyTorch eager, and `--suite models` runs
end to end on one of them and writes valid JSON."""

import importlib.util
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from click.testing import CliRunner  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.benchmarks.models import compile_takes_trials  # noqa: E402
from minitc.benchmarks.models_systems import RTOL, compare  # noqa: E402
from minitc.benchmarks.models_zoo import MODELS, select  # noqa: E402
from minitc.cli import main  # noqa: E402
from minitc.frontend import unsupported  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")

HEAVY_OPS = ("linear", "addmm", "mm", "bmm", "convolution", "layer_norm", "_softmax")


def compiled_and_eager(name: str):
    model, inputs = MODELS[name].make()
    compiled = tc.compile(model, inputs, db=False)  # the templates: the user's records play no part
    with torch.no_grad():
        expected = model(*inputs)
    return compiled, compiled(*inputs), expected


def assert_close(actual, expected):
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=RTOL, atol=1e-5)


def test_tiny_bert_matches_eager_with_its_heavy_ops_in_minitc():
    pytest.importorskip("transformers", reason="tiny-bert is a transformers BertModel: pip install transformers")
    compiled, actual, expected = compiled_and_eager("tiny-bert")
    assert tuple(actual.shape) == (1, 16, 64)
    assert_close(actual, expected)
    through_torch = unsupported(compiled.graph)
    assert not [op for op in through_torch if op.split(".")[1] in HEAVY_OPS], through_torch


def test_small_resnet18_matches_eager_with_no_torch_fallback():
    compiled, actual, expected = compiled_and_eager("resnet18-small")
    assert tuple(actual.shape) == (1, 10)
    assert_close(actual, expected)
    assert unsupported(compiled.graph) == {}


def test_factories_are_seeded_and_batch_norm_is_calibrated():
    (a, xa), (b, xb) = MODELS["resnet18-small"].make(), MODELS["resnet18-small"].make()
    assert torch.equal(xa[0], xb[0]) and not a.training
    for (name, ta), tb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(ta, tb), name
    assert not torch.allclose(a.bn1.running_var, torch.ones_like(a.bn1.running_var))


def test_compare_reports_errors_and_flags_wrong_results():
    ref = np.array([[1.0, -4.0], [2.0, 0.5]])
    check, why = compare(torch.tensor(ref + 1e-6, dtype=torch.float32), ref)
    assert why is None and check["rel_err"] < RTOL
    check, why = compare(ref + [[0.0, 0.01], [0.0, 0.0]], ref)
    assert check["max_abs_err"] == pytest.approx(0.01) and "wrong result" in why
    assert "shape" in compare(ref[0], ref)[1]


def test_unknown_model_names_list_the_known_ones():
    with pytest.raises(KeyError, match="available: resnet50, mobilenet_v2, bert-base, gpt2"):
        select(["resnet51"])
    result = CliRunner().invoke(main, ["bench", "--suite", "models", "--workloads", "resnet51"])
    assert result.exit_code == 2 and "unknown model(s) 'resnet51'" in result.output


def test_suite_runs_a_small_model_end_to_end(tmp_path, monkeypatch):
    pytest.importorskip("transformers", reason="tiny-bert is a transformers BertModel: pip install transformers")
    systems = ["minitc", "eager"] + (["onnxruntime"] if importlib.util.find_spec("onnxruntime") else [])
    monkeypatch.setenv("MINITC_MODELS_SYSTEMS", ",".join(systems))  # Inductor's compile takes too long here
    path = tmp_path / "models.json"
    args = ["--suite", "models", "--workloads", "tiny-bert", "--repeats", "1", "--budget", "0", "--no-machine", "-q"]
    result = CliRunner().invoke(main, ["bench", *args, "--json", str(path)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "tiny-bert" in result.output and "minitc ms" in result.output
    (rec,) = json.loads(path.read_text())
    assert rec["model"] == "tiny-bert" and rec["threads"] == 2 and rec["error"] is None
    assert set(rec["systems"]) == set(systems)
    for system in systems:
        assert rec["systems"][system]["error"] is None, rec["systems"][system]
        assert rec[system + "_ms"] > 0
    assert rec["rel_err"] <= RTOL and rec["compile_s"] > 0 and rec["minitc_vs_eager"] > 0
    assert isinstance(rec["torch_nodes"], int) and rec["torch_nodes"] == sum(rec["torch_ops"].values())
    assert rec["inputs"] == ["int64[1, 16]", "int64[1, 16]"] and rec["run"]["suite"] == "models"
    assert rec["host"]["cpu"] and rec["machine"] is None
    assert rec["peak_rss_mib"] is None or rec["peak_rss_mib"] >= rec["start_rss_mib"] > 0
    assert rec["minitc_breakdown"]["total_ms"] > 0 and rec["minitc_breakdown"]["top_tasks"]
    assert "slowest tasks" in result.output


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_suite_runs_a_small_model_in_low_precision(tmp_path, monkeypatch, dtype):
    """--dtype bf16: minitc and eager under autocast, within BF16_RTOL; int8: minitc and ORT's
    quantize_dynamic, each checked by its cosine similarity with float32 eager."""
    pytest.importorskip("transformers", reason="tiny-bert is a transformers BertModel: pip install transformers")
    from minitc.benchmarks.models_systems import BF16_RTOL, INT8_COSINE

    ort = dtype == "int8" and importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnxscript")
    systems = ["minitc", "eager"] + (["onnxruntime"] if ort else [])
    monkeypatch.setenv("MINITC_MODELS_SYSTEMS", ",".join(systems))
    path = tmp_path / "models.json"
    args = ["--suite", "models", "--workloads", "tiny-bert", "--repeats", "1", "--budget", "0", "--no-machine", "-q"]
    result = CliRunner().invoke(main, ["bench", *args, "--dtype", dtype, "--json", str(path)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    (rec,) = json.loads(path.read_text())
    assert rec["dtype"] == dtype and rec["run"]["dtype"] == dtype
    for system in systems:
        assert rec["systems"][system]["error"] is None, rec["systems"][system]
    if dtype == "bf16":
        assert 0 < rec["rel_err"] <= BF16_RTOL
    else:
        assert all(rec["systems"][s]["cosine"] >= INT8_COSINE for s in systems if s != "eager")
    assert any(name.startswith(f"{dtype}_dense_") for name, _ in rec["minitc_breakdown"]["top_tasks"])


@pytest.mark.heavy
def test_the_suite_reports_the_tuned_compiles_choices(tmp_path, monkeypatch):
    """tuned_kept / tuned_dropped count the choices of the compile that read the records (they
    came from the templates' compile, which reads none, and were always 0). Random programs
    differ from the templates', so some tasks are contested."""
    pytest.importorskip("transformers", reason="tiny-bert is a transformers BertModel: pip install transformers")
    import minitc.benchmarks.models as suite

    real = suite.setup_minitc

    def random_search(name, *args, **options):
        return real(name, *args, **({**options, "strategy": "random"} if name == "minitc-tuned" else options))

    monkeypatch.setattr(suite, "setup_minitc", random_search)
    monkeypatch.setenv("MINITC_MODELS_SYSTEMS", "minitc,minitc-tuned")
    path, db = tmp_path / "models.json", tmp_path / "records.db"
    args = ["--suite", "models", "--workloads", "tiny-bert", "--trials", "40", "--db", str(db)]
    result = CliRunner().invoke(main, ["bench", *args, "--repeats", "1", "--budget", "0", "--no-machine", "-q",
                                       "--json", str(path)])  # fmt: skip
    assert result.exit_code == 0, result.output + repr(result.exception)
    (rec,) = json.loads(path.read_text())
    assert rec["systems"]["minitc-tuned"]["error"] is None and rec["trials"] == 40
    assert rec["tuned_kept"] + rec["tuned_dropped"] > 0, rec


@pytest.mark.heavy
def test_the_suite_runs_a_model_for_the_gpu_at_two_batch_sizes(tmp_path, monkeypatch):
    """--target cuda-sim: minitc's kernels on the simulator, the same records as on a GPU."""
    pytest.importorskip("transformers", reason="tiny-bert is a transformers BertModel: pip install transformers")
    monkeypatch.setenv("MINITC_MODELS_SYSTEMS", "minitc,eager")
    path = tmp_path / "models.json"
    args = ["--suite", "models", "--workloads", "tiny-bert", "--target", "cuda-sim", "--batch", "1,2"]
    args += ["--repeats", "1", "--budget", "0", "--no-machine", "-q", "--json", str(path)]
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    records = json.loads(path.read_text())
    assert [r["batch"] for r in records] == [1, 2] and {r["target"] for r in records} == {"cuda-sim"}
    assert records[1]["inputs"] == ["int64[2, 16]", "int64[2, 16]"]
    for rec in records:
        assert rec["error"] is None and rec["rel_err"] <= RTOL and rec["minitc_ms"] > 0


def test_the_suite_knows_that_tc_compile_tunes():
    assert compile_takes_trials()
