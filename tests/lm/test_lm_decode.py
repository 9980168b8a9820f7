"""Constrained decoding of the tensor language (lm/decode.py): with an untrained model, every
program written for an op's space is legal, replays, prints and parses back, and builds to
match numpy; greedy and top-1 decoding write one program."""

import numpy as np
import pytest
import torch

import minitc as tc
from minitc.autotune.space import Space
from minitc.lm.decode import Decoder
from minitc.lm.language import parse, sentence, space_values
from minitc.lm.model import ModelConfig, TensorLM

DECODE_OPS = [
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d",
    "depthwise_conv2d",
    "max_pool2d",
    "avg_pool2d",
    "softmax",
    "layer_norm",
    "sum",
    "add",
    "bias_add",
]
DECODE_PER_OP = 90  # ~1000 decoded programs in all


@pytest.fixture(scope="module")
def model(tok):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64, max_len=1024)
    yield TensorLM(cfg).eval()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def decode_instances():
    rng = np.random.default_rng(11)
    out = {}
    for name in DECODE_OPS:
        inst = tc.ops.OPS[name].instantiate("small", rng)
        out[name] = (inst, Space(inst.output, "llvm"))
    return out


@pytest.fixture(scope="module")
def decoded(decode_instances, model, tok, hw):
    rng = np.random.default_rng(5)
    out = {}
    for name, (_, space) in decode_instances.items():
        out[name] = Decoder(model, tok, space, hw).generate(DECODE_PER_OP, rng)
    return out


@pytest.mark.parametrize("name", DECODE_OPS)
def test_decoded_programs_are_legal_and_replay(decoded, decode_instances, hw, name):
    candidates, failures = decoded[name]
    _, space = decode_instances[name]
    assert failures == 0 and len(candidates) == DECODE_PER_OP
    assert len({c.key for c in candidates}) > 1  # an untrained model samples, it does not repeat
    for c in candidates:
        assert c.sketch in space.sketches
        for d in c.decisions:
            assert d.value in d.domain and type(d.value) in {type(v) for v in d.domain}
        assert space.replay(c.values).key == c.key
        text = str(sentence(space, hw, c.decisions))
        assert space_values(space, parse(text)) == c.values


BUILD_OPS = ["matmul", "conv2d", "dense", "depthwise_conv2d", "max_pool2d", "softmax", "layer_norm"]


@pytest.mark.parametrize("name", BUILD_OPS)
def test_decoded_programs_match_numpy(decoded, decode_instances, name):
    inst, _ = decode_instances[name]
    candidates, _ = decoded[name]
    picked = {c.sketch: c for c in reversed(candidates)}  # one program of each sketch
    assert set(picked) == {"template", "generic"}
    for c in picked.values():
        f = tc.build(c.schedule, target="llvm", args=list(inst.placeholders) + [inst.output])
        np.testing.assert_allclose(f(*inst.arrays), inst.expected(), rtol=1e-3, atol=1e-3, err_msg=c.trace)


@pytest.mark.parametrize("settings", [{"temperature": 0.0}, {"top_k": 1}], ids=["greedy", "top1"])
@pytest.mark.parametrize("name", ["matmul", "conv2d", "softmax"])
def test_greedy_and_top1_decoding_write_one_program(decode_instances, model, tok, hw, settings, name):
    _, space = decode_instances[name]
    decoder = Decoder(model, tok, space, hw, **settings)
    first, failures = decoder.generate(6, np.random.default_rng(0))
    assert failures == 0 and len(first) == 6
    assert len({c.key for c in first}) == 1
    again, _ = decoder.generate(3, np.random.default_rng(99))
    assert {c.key for c in again} == {first[0].key}
