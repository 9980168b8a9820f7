"""Text generation through torch.compile(backend="minitc", dynamic=True): the prefill and every
decode step with the growing key/value cache run through a bounded number of compiled graphs
and give exactly eager's greedy tokens."""

import pytest
import torch

from minitc.frontend import dynamo

transformers = pytest.importorskip("transformers")

DECODERS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128, vocab_size=200)
    ),
    "llama": lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=200,
            max_position_embeddings=128,
        )  # fmt: skip
    ),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.heavy
def test_greedy_generation_through_the_backend_gives_eagers_tokens_from_two_graphs(name):
    torch.manual_seed(0)
    model = DECODERS[name]().eval()
    prompt = torch.randint(0, 200, (1, 6))
    options = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(prompt, **options)
    graphs = []

    def recording(graph_module, example_inputs, **kwargs):
        graphs.append(dynamo.backend(graph_module, example_inputs, **kwargs))
        return graphs[-1]

    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend=recording, dynamic=True)
    with torch.no_grad(), pytest.warns(UserWarning, match="through PyTorch"):  # the embeddings
        tokens = model.generate(prompt, **options)
    torch._dynamo.reset()
    assert tokens.tolist() == expected.tolist()
    # the prefill and one decode step whose cache grows from 6 to 13: both dynamic, the decode
    # one compiled once for sizes up to 32 (4 x 6, to a power of 2), in buckets of 4 to 32
    assert len(graphs) == 2 and all(g.dynamic for g in graphs)
    decode = graphs[1]
    assert len(decode.models) == 1 and 1 <= len(decode.compiled.compiled_shapes) <= 4
