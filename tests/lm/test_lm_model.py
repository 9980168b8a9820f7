"""The tensor language model: causality, the key/value cache, learning a tiny set, example
weights, checkpoints and their errors. Tiny configs keep the file fast on a laptop CPU."""

import os

import pytest

torch = pytest.importorskip("torch")

from minitc.lm.model import (  # noqa: E402 - after the importorskip
    CheckpointError,
    LMError,
    ModelConfig,
    TensorLM,
    expand_cache,
    load_checkpoint,
    save_checkpoint,
    select_cache,
    write_payload,
)
from minitc.lm.train import Example, batch_loss, evaluate, train  # noqa: E402

VOCAB = 24


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from threads, and on a busy machine OpenMP threads waiting on
    each other slow training tenfold or more."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tiny_model(seed=0, **overrides) -> TensorLM:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=32)
    return TensorLM(ModelConfig(**{**cfg, **overrides})).eval()


def random_examples(n, seed=0, lengths=(10, 16)):
    """Random sentences whose second half is the target, like decisions after a prompt."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=gen))
        tokens = torch.randint(1, VOCAB, (length,), generator=gen).tolist()
        out.append(Example(tokens, [t >= length // 2 for t in range(length)]))
    return out


def test_default_config_is_about_three_million_parameters():
    n = TensorLM(ModelConfig(vocab_size=400)).num_parameters()
    assert 2.5e6 < n < 4e6


def test_attention_is_causal():
    model = tiny_model()
    tokens = torch.randint(0, VOCAB, (2, 12))
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(tokens)[0], model(changed)[0]
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_cache_matches_full_forward():
    model = tiny_model()
    tokens = torch.randint(0, VOCAB, (3, 14))
    with torch.no_grad():
        full, _ = model(tokens)
        pieces, cache = [], None
        logits, cache = model(tokens[:, :5])
        pieces.append(logits)
        for t in range(5, 14):
            logits, cache = model(tokens[:, t : t + 1], cache)
            pieces.append(logits)
    assert cache[0][0].shape == (3, 2, 14, 16)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


def test_expanded_prompt_gives_identical_rows_and_select_keeps_rows():
    model = tiny_model()
    prompt, steps = torch.randint(0, VOCAB, (1, 6)), torch.randint(0, VOCAB, (1, 3))
    with torch.no_grad():
        _, cache = model(prompt)
        cache = expand_cache(cache, 4)
        logits, cache = model(steps.expand(4, -1), cache)
        reference, _ = model(torch.cat([prompt, steps], dim=1))
    for row in range(4):
        torch.testing.assert_close(logits[row], reference[0, 6:], atol=1e-5, rtol=0)
    kept = select_cache(cache, torch.tensor([0, 2]))
    prompt_keys, _, own_keys, own_values = kept[1]
    assert prompt_keys.shape == (1, 2, 6, 16) and own_keys.shape == own_values.shape == (
        2,
        2,
        3,
        16,
    )  # prompt kept once
    with torch.no_grad():
        logits, _ = model(torch.tensor([[5], [5]]), kept)
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=0)
    with pytest.raises(LMError, match="batch-1"):
        expand_cache(cache, 8)


def test_too_long_sequence_and_bad_tokens_raise():
    model = tiny_model()
    with pytest.raises(LMError, match="max_len=32"):
        model(torch.zeros(1, 33, dtype=torch.long))
    _, cache = model(torch.zeros(1, 30, dtype=torch.long))
    with pytest.raises(LMError, match="max_len=32"):
        model(torch.zeros(1, 3, dtype=torch.long), cache)
    with pytest.raises(LMError, match="token ids"):
        model(torch.tensor([[VOCAB]]))


def test_tiny_model_overfits_tiny_set():
    model, examples = tiny_model(), random_examples(8)
    before = evaluate(model, examples)
    assert before["accuracy"] < 0.3 and before["loss"] > 2.5  # random targets: nothing known yet
    history = train(model, examples, epochs=200, batch_size=4, lr=3e-3, warmup=10, weight_decay=0.0)
    after = evaluate(model, examples)
    assert len(history) == 400 and not model.training
    assert after["accuracy"] == 1.0 and after["loss"] < 0.05, after
    assert after["targets"] == sum(sum(e.loss_mask) for e in examples)


def _grads(model, examples):
    model.zero_grad()
    batch_loss(model, examples)[0].backward()
    return [p.grad.clone() for p in model.parameters()]


def test_weight_zero_example_has_no_effect():
    model, (a, b, c) = tiny_model(), random_examples(3, seed=1, lengths=(8, 14))
    ignored = Example(c.tokens + [3, 4], c.loss_mask + [True, True], weight=0.0)  # longest: pads the others
    counted = Example(ignored.tokens, ignored.loss_mask, weight=0.5)
    for got, want in zip(_grads(model, [a, ignored, b]), _grads(model, [a, b])):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert any(not torch.allclose(g, w) for g, w in zip(_grads(model, [a, counted, b]), _grads(model, [a, b])))
    # And through train(): same parameters with or without the weight-0 example.
    m1, m2 = tiny_model(), tiny_model()
    train(m1, [a, ignored, b], epochs=3, batch_size=8)
    train(m2, [a, b], epochs=3, batch_size=8)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)


def test_checkpoint_round_trip(tmp_path):
    model = tiny_model(seed=3)
    vocab = [f"t{i}" for i in range(VOCAB)]
    meta = {"stage": "pretrain", "losses": [1.5, 0.25], "workloads": {"gemm": 3}}
    path = tmp_path / "minitc.lm.pt"
    save_checkpoint(path, model, vocab, meta)
    loaded, vocab2, meta2 = load_checkpoint(path)
    assert not loaded.training and vocab2 == vocab and meta2 == meta
    assert loaded.cfg == model.cfg
    tokens = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded(tokens)[0], model(tokens)[0])
    assert os.listdir(tmp_path) == ["minitc.lm.pt"]  # no temporary file left behind


def _payload(model):
    return {
        "format": "minitc-lm-2",
        "config": model.cfg.to_dict(),
        "vocab": [str(i) for i in range(VOCAB)],
        "state_dict": model.state_dict(),
        "meta": {},
    }


def test_damaged_checkpoints_raise_checkpoint_error(tmp_path):
    model = tiny_model()
    good = tmp_path / "good.pt"
    save_checkpoint(good, model, [str(i) for i in range(VOCAB)], {})
    data = good.read_bytes()

    files = {
        "random.pt": os.urandom(2000),
        "truncated.pt": data[: len(data) // 2],
        "empty.pt": b"",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)

    wrong_format = {**_payload(model), "format": "something-else"}
    torch.save(wrong_format, tmp_path / "format.pt")
    missing = _payload(model)
    missing["state_dict"] = {k: v for k, v in missing["state_dict"].items() if not k.startswith("ln_f")}
    write_payload(tmp_path / "missing.pt", missing)  # a valid hash: the checks behind it run
    reshaped = _payload(model)
    reshaped["state_dict"]["pos_emb.weight"] = torch.zeros(16, 32)
    write_payload(tmp_path / "shape.pt", reshaped)
    vocab = {**_payload(model), "vocab": ["a", "b"]}
    write_payload(tmp_path / "vocab.pt", vocab)

    expected = {
        "random.pt": "not a readable torch file",
        "truncated.pt": "not a readable torch file",
        "empty.pt": "not a readable torch file",
        "format.pt": "format is 'something-else'",
        "missing.pt": "missing weights",
        "shape.pt": "pos_emb.weight has shape",
        "vocab.pt": "vocab has 2 tokens",
        "absent.pt": "no such checkpoint file",
    }
    for name, message in expected.items():
        path = tmp_path / name
        with pytest.raises(CheckpointError, match=message) as info:
            load_checkpoint(path)
        assert str(path) in str(info.value)


def test_bad_config_and_meta_raise():
    with pytest.raises(LMError, match="divisible"):
        ModelConfig(vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(LMError, match="unknown"):
        ModelConfig.from_dict({"vocab_size": 10, "layers": 2})
    with pytest.raises(LMError, match="JSON"):
        save_checkpoint("/nonexistent/x.pt", tiny_model(), [str(i) for i in range(VOCAB)], {"m": object()})
