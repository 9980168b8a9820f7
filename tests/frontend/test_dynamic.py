"""Dynamic shapes: kernels that skip the tiles past a run-time extent (lowering/limits.py) and
models compiled once for a range of sizes (frontend/dynamic.py)."""

import numpy as np
import pytest
import torch

import minitc as tc
from minitc.errors import ShapeError
from minitc.te import placeholder

RNG = np.random.default_rng(0)
AVX2 = "llvm -mcpu=x86-64-v3 -num-cores=2"  # the templates' tiles are the same on every host that runs it


def _limited(build_output):
    out = build_output()
    out.limits = {0: 0}
    return out, tc.build(out, target=AVX2), str(tc.lower(out, target=AVX2))


@pytest.mark.avx2
@pytest.mark.parametrize("op", ["dense", "softmax"])
def test_a_limited_kernel_computes_the_valid_rows_and_skips_the_tiles_past_them(op):
    x = placeholder((64, 48), "float32", name="x")
    X = RNG.standard_normal((64, 48)).astype(np.float32)
    if op == "dense":
        w = placeholder((40, 48), "float32", name="w")
        W = RNG.standard_normal((40, 48)).astype(np.float32)
        out, fn, text = _limited(lambda: tc.ops.dense(x, w))
        args, expect = (X, W), lambda n: X[:n] @ W.T
    else:
        out, fn, text = _limited(lambda: tc.ops.softmax(x))
        args = (X,)

        def expect(n):
            e = np.exp(X[:n] - X[:n].max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)

    assert "dyn_extents: int64[1]" in text and ("< (dyn_extents[0]" in text or "< dyn_extents[0]" in text)
    for n in (1, 5, 37, 64):
        result = np.full(out.shape, np.nan, np.float32)
        fn(*args, np.array([n], np.int64), out=result)
        np.testing.assert_allclose(result[:n], expect(n), rtol=1e-4, atol=1e-5)
        if n <= 5:  # the tiles that hold only padding are never written
            assert np.isnan(result[-1]).all()


def _bert(max_position=128):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=50,
        max_position_embeddings=max_position,
    )  # fmt: skip
    return transformers.BertModel(config).eval()


@pytest.fixture(scope="module")
def dynamic_bert():
    model = _bert()
    seq = torch.export.Dim("seq", min=2, max=128)
    ids = torch.randint(0, 50, (1, 40))
    with pytest.warns(UserWarning, match="through PyTorch"):  # the embeddings
        compiled = tc.compile(model, (ids,), dynamic_shapes={"input_ids": {1: seq}})
    return model, compiled


def test_a_dynamic_bert_matches_eager_at_lengths_of_three_buckets(dynamic_bert):
    model, compiled = dynamic_bert
    for n in (7, 40, 100):
        ids = torch.randint(0, 50, (1, n))
        with torch.no_grad():
            expected = model(ids)
        hidden, pooled = compiled(ids)
        assert hidden.shape == (1, n, 32)
        for got, want in ((hidden, expected.last_hidden_state), (pooled, expected.pooler_output)):
            assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
    shapes = compiled.compiled_shapes  # buckets 16, 32, 64, 128: one specialisation per bucket used
    assert shapes == [[[1, 64]], [[1, 16]], [[1, 128]]]


def test_a_call_outside_the_declared_range_is_refused(dynamic_bert):
    _, compiled = dynamic_bert
    with pytest.raises(ShapeError, match="outside the range 2..128"):
        compiled(torch.randint(0, 50, (1, 129)))
    with pytest.raises(ShapeError, match=r"must have shape \[1, \*\]"):
        compiled(torch.randint(0, 50, (2, 20)))


class _LastFour(torch.nn.Module):
    def forward(self, x):
        return x[:, -4:] * 2


class _MeanOverSequence(torch.nn.Module):
    def forward(self, x):
        return (x * 2).mean(dim=1)


class _PadTheSequence(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.pad(x * 2, (0, 0, 0, 3))


def test_a_slice_counted_from_the_end_starts_at_the_run_time_extent():
    seq = torch.export.Dim("seq", min=4, max=64)
    compiled = tc.compile(_LastFour(), (torch.randn(1, 10, 8),), dynamic_shapes={"x": {1: seq}})
    for n in (4, 10, 37):
        x = torch.randn(1, n, 8)
        torch.testing.assert_close(compiled(x), x[:, -4:] * 2)


@pytest.mark.parametrize("model", [_MeanOverSequence(), _PadTheSequence()])
def test_what_would_average_or_move_the_padding_is_refused(model):
    seq = torch.export.Dim("seq", min=4, max=64)
    with pytest.raises(ShapeError, match="reduces over or moves along dimension 1"):
        tc.compile(model, (torch.randn(1, 10, 8),), dynamic_shapes={"x": {1: seq}})


def test_a_dimension_without_a_maximum_is_refused():
    seq = torch.export.Dim("seq", min=4)
    with pytest.raises(ShapeError, match="no upper bound"):
        tc.compile(_LastFour(), (torch.randn(1, 10, 8),), dynamic_shapes={"x": {1: seq}})


def test_a_saved_dynamic_model_keeps_its_range(dynamic_bert, tmp_path):
    model, compiled = dynamic_bert
    compiled.save(tmp_path / "bert.minitc")  # compiles the buckets not used yet: the file serves 2..128
    first, *others = [graph for graph, _, _ in compiled._variants.values()]
    weights = [name for name in first.constants if "weight" in name]
    assert weights and all(g.constants[w] is first.constants[w] for g in others for w in weights)  # one copy
    loaded = tc.frontend.load(tmp_path / "bert.minitc")
    assert len(loaded.compiled_shapes) == 4
    for n in (3, 33, 128):
        ids = torch.randint(0, 50, (1, n))
        with torch.no_grad():
            expected = model(ids).last_hidden_state
        hidden, _ = loaded(ids)
        assert (hidden - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()
    with pytest.raises(ShapeError, match="outside the range 2..128"):
        loaded(torch.randint(0, 50, (1, 200)))


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x):
        scores = self.q(x) @ x.transpose(1, 2)
        return torch.softmax(scores, dim=-1) @ x


def test_tuning_a_dynamic_model_measures_each_task_at_its_buckets_sizes(tmp_path):
    torch.manual_seed(0)
    model = _Attention().eval()
    seq = torch.export.Dim("seq", min=2, max=32)
    compiled = tc.compile(
        model, (torch.randn(1, 20, 8),), dynamic_shapes={"x": {1: seq}}, trials=6, strategy="random",
        db=str(tmp_path / "r.db"),
    )  # fmt: skip
    assert compiled.tune_results and compiled.compiled_shapes == [[[1, 32, 8]]]
    for n in (3, 20, 32):
        x = torch.randn(1, n, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


TEXT_ZOO = [
    "zoo-distilbert",
    "zoo-roberta",
    "zoo-albert",
    "zoo-electra",
    "zoo-gpt-neo",
    "zoo-opt",
    "zoo-llama",
    "zoo-t5-encoder",
]
FAST_ZOO = ("zoo-llama", "zoo-gpt-neo")  # rotary + grouped queries + HF's packed-sequence mask; local attention


@pytest.mark.parametrize("name", [n if n in FAST_ZOO else pytest.param(n, marks=pytest.mark.slow) for n in TEXT_ZOO])
def test_the_zoos_text_models_compile_once_for_a_range_of_lengths(name):
    pytest.importorskip("transformers")
    from minitc.benchmarks import zoo_hf

    model, inputs = zoo_hf.ZOO[name][1]()
    seq = torch.export.Dim("seq", min=2, max=64)
    with pytest.warns(UserWarning, match="through PyTorch"):
        compiled = tc.compile(model, inputs, dynamic_shapes=(tuple({1: seq} for _ in inputs),))
    for n in (5, 40):
        args = tuple(torch.cat([x] * 3, dim=1)[:, :n] for x in inputs)
        with torch.no_grad():
            expected = model(*args)
        assert (compiled(*args) - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()
