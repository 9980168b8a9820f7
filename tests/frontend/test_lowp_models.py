"""Whole models in bfloat16 and int8 (`tc.compile(..., dtype=)`, minitc/frontend/lowp.py) against
eager PyTorch: bf16 against torch.autocast (the largest error at most 1e-2 of the largest
output), int8 against float32 (logits' cosine similarity at least 0.99). The paths are chosen
from recorded target descriptions; the models run on this host's own path (every x86-64 has
at least the exact emulations) and on Haswell's emulations."""

import warnings

import numpy as np
import pytest
import torch
from helpers import recorded_target

import minitc as tc
from minitc.errors import ConfigError
from minitc.frontend import passes
from minitc.frontend.importer import import_model

transformers = pytest.importorskip("transformers")

BF16_BOUND = 1e-2  # max |minitc - autocast| / max |autocast|
INT8_COSINE = 0.99


def _bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=100,
        max_position_embeddings=64,
    )  # fmt: skip
    return transformers.BertModel(config).eval(), (torch.randint(0, 100, (1, 32)),)


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2, n_positions=64, vocab_size=200, use_cache=False)
    return transformers.GPT2LMHeadModel(config).eval(), (torch.randint(0, 200, (1, 32)),)


def _first(out):
    """The hidden states or logits: the first of a model output or of a tuple."""
    return out[0] if isinstance(out, (tuple, dict)) or hasattr(out, "to_tuple") else out


def _compiled(model, inputs, dtype, target="llvm"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the embeddings' lookups run through PyTorch
        return tc.compile(model, inputs, target=target, dtype=dtype)


def _relative(got, expected) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


def _cosine(got, expected) -> float:
    return float(torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0))


@pytest.mark.parametrize("make", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_bf16_model_matches_eager_autocast(make):
    model, inputs = make()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = _first(model(*inputs)).float()
    compiled = _compiled(model, inputs, "bfloat16")
    assert sum(n.op == "dense_lowp" for n in compiled.graph.nodes) >= 2 * 4  # each layer's dense layers
    got = _first(compiled(*inputs))
    assert _relative(got, expected) <= BF16_BOUND


@pytest.mark.parametrize("make", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_int8_model_logits_match_float32_eager(make):
    model, inputs = make()
    with torch.no_grad():
        expected = _first(model(*inputs))
    got = _first(_compiled(model, inputs, "int8")(*inputs))
    assert _cosine(got, expected) >= INT8_COSINE
    assert not torch.equal(got, expected)  # quantized: not the float32 model's numbers


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_emulated_paths_run_on_any_avx2_host(dtype):
    model, inputs = _gpt2()
    with torch.no_grad():
        expected = _first(model(*inputs))
    compiled = _compiled(model, inputs, dtype, target="llvm -mcpu=haswell")
    assert {n.attrs["path"] for n in compiled.graph.nodes if n.op == "dense_lowp"} == {
        "fma" if dtype == "bfloat16" else "int"
    }
    assert _cosine(_first(compiled(*inputs)), expected) >= INT8_COSINE


@pytest.mark.parametrize(
    "fixture, dtype, path, pooler",
    [
        ("intel-sapphirerapids-kvm.json", "bfloat16", "amx", "dpbf16"),
        ("amd-zen4.json", "bfloat16", "dpbf16", "dpbf16"),
        ("intel-haswell-avx2.json", "bfloat16", "fma", "fma"),
        ("intel-sapphirerapids-kvm.json", "int8", "amx", "vnni"),
        ("amd-zen4.json", "int8", "vnni", "vnni"),
        ("intel-haswell-avx2.json", "int8", "int", "int"),
    ],
)
def test_dense_layers_take_the_path_of_the_target_description(fixture, dtype, path, pooler):
    """32 tokens fill AMX's 32-row blocks; the pooler's one row does not (dot products instead)."""
    model, inputs = _bert()
    graph = passes.run_all(import_model(model, inputs), recorded_target(fixture), "auto", dtype=dtype)
    lowp = [n for n in graph.nodes if n.op == "dense_lowp"]
    assert len(lowp) == 2 * 6 + 1  # per layer q, k, v, out, up, down; the pooler
    assert {n.attrs["path"] for n in lowp if n.shape[0] == 32} == {path}
    assert {n.attrs["path"] for n in lowp if n.shape[0] == 1} == {pooler}
    assert not [n for n in graph.nodes if n.op == "dense"]  # no float32 dense layer left


def test_gpt2_vocabulary_is_padded_to_whole_tiles():
    model, inputs = _gpt2()
    graph = passes.run_all(import_model(model, inputs), recorded_target("intel-sapphirerapids-kvm.json"), dtype="int8")
    head = [n for n in graph.nodes if n.op == "dense_lowp" and n.attrs["out_features"] == 200]
    assert head and head[0].attrs["n_padded"] == 224 and head[0].shape[-1] == 200


@pytest.mark.parametrize("dtype", ["float16", "int4", torch.float64])
def test_an_unsupported_dtype_is_a_clear_error(dtype):
    model, inputs = _bert()
    with pytest.raises(ConfigError, match="dtype must be one of 'float32'.*'bfloat16'.*'int8'"):
        tc.compile(model, inputs, dtype=dtype)


def test_low_precision_is_for_cpus_and_static_shapes():
    model, inputs = _bert()
    with pytest.raises(ConfigError, match="CPU targets only"):
        tc.compile(model, inputs, target="cuda", dtype="bfloat16")
    seq = torch.export.Dim("seq", min=2, max=64)
    with pytest.raises(ConfigError, match="dynamic_shapes"):
        tc.compile(model, inputs, dtype="int8", dynamic_shapes={"input_ids": {1: seq}})


def _bf16(a):
    return a.astype(np.float32).astype("bfloat16").astype(np.float64)


def _linear_reference(layer, x, dtype):
    """numpy's float64 of what dtype= computes for one linear layer: bf16 operands, or ORT's
    dynamic quantization (per-channel symmetric int8 weight, per-tensor uint8 activation)."""
    w, b, x = (t.detach().double().numpy() for t in (layer.weight, layer.bias, x))
    if dtype == "bfloat16":
        return _bf16(x) @ _bf16(w).T + b
    sw = np.abs(w).max(axis=1) / 127
    qw = np.clip(np.rint(w / sw[:, None]), -127, 127)
    lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)
    sa = np.float32((hi - lo) / 255)
    za = round(-lo / sa)
    qx = np.clip(np.rint(x.astype(np.float32) * np.float32(1 / sa)) + za, 0, 255)
    return ((qx - za) @ qw.T) * (sa * sw.astype(np.float32)) + b


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_one_linear_layer_against_numpy(dtype):
    """48 outputs: padded to 64 for the GEMM and cut back."""
    torch.manual_seed(1)
    layer = torch.nn.Linear(64, 48).eval()
    x = torch.randn(32, 64)
    got = _compiled(layer, (x,), dtype)(x).numpy()
    expected = _linear_reference(layer, x, dtype)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_odd_widths_stay_float32_and_saving_is_refused(tmp_path):
    """K = 33 has no whole pairs of k: that layer stays a float32 dense; the K = 48 one is bf16.
    A low-precision model cannot be saved yet: a clear error, not a file that loads wrong."""
    from minitc.frontend.saved import SavedModelError

    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(33, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16)).eval()
    x = torch.randn(8, 33)
    compiled = _compiled(model, (x,), "bfloat16")
    ops = [n.op for n in compiled.graph.nodes]
    assert ops.count("dense_lowp") == 1 and ops.count("dense") == 1
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x).float()
    assert _relative(compiled(x), expected) <= BF16_BOUND
    with pytest.raises(SavedModelError, match="dtype='bfloat16' cannot be saved"):
        compiled.save(tmp_path / "model.minitc")
