"""torch.compile(model, backend="minitc"): the model's parameters and buffers, which dynamo
passes as graph inputs, are compiled as constants (batch norms folded, nothing through
PyTorch), the real inputs reach the compiled model in order, and a weight changed after
compiling compiles the graph again."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend import dynamo, unsupported  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")


def close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


class ResidualCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))


class TwoInputs(nn.Module):
    """Uses its inputs asymmetrically, with different widths: swapped inputs cannot pass."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(5, 6)

    def forward(self, x, y):
        return torch.relu(self.a(x)) - 2 * self.b(y)


def cnn():
    torch.manual_seed(0)
    model = ResidualCNN().eval()
    for bn in (model.bn1, model.bn2):  # statistics that are not the identity, so folding shows
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    return model, torch.randn(2, 3, 8, 8)


def compile_recording(model):
    """torch.compile with minitc's backend, keeping each CompiledGraph it returns."""
    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(dynamo.backend(graph_module, example_inputs))
        return graphs[-1]

    torch._dynamo.reset()
    return torch.compile(model, backend=recording), graphs


def test_cnn_weights_are_constants_and_nothing_runs_through_pytorch():
    model, x = cnn()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="minitc")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        close(fast(x), model(x))
    assert not [w for w in caught if "minitc" in str(w.message)]  # no "runs N node(s) through PyTorch"

    fast, graphs = compile_recording(model)
    with torch.no_grad():
        close(fast(x), model(x))
    (compiled,) = graphs
    used = [name for name in model.state_dict() if "num_batches_tracked" not in name]  # unread in eval mode
    assert sorted(compiled.weights.values()) == sorted(used)
    graph = compiled.compiled.graph
    assert unsupported(graph) == {}
    assert [v.shape for v in graph.inputs] == [(2, 3, 8, 8)]
    ops = {n.op for n in graph.nodes} | {b.op for n in graph.nodes for b in n.body}
    assert "scale_shift" not in ops  # both batch norms folded into their convolutions
    # folded (and repacked into channel blocks where the target's vectors fill them)
    assert all(any(c.startswith(f"{conv}.weight_folded") for c in graph.constants) for conv in ("conv1", "conv2"))
    assert any(c.startswith("fc.weight_t") for c in graph.constants)  # transposed (and packed when it divides)
    exported = tc.compile(model, (x,)).graph  # the model's own export: the same program

    def nodes(g):
        return [(n.op, tuple(b.op for b in n.body), n.value.shape) for n in g.nodes]

    assert nodes(graph) == nodes(exported) and sorted(graph.constants) == sorted(exported.constants)


def test_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    fast, graphs = compile_recording(model)
    with torch.no_grad():
        close(fast(x), model(x))
    assert sorted(graphs[0].weights.values()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    constants = graphs[0].compiled.graph.constants
    assert all(any(c.startswith(f"{layer}.weight_t") for c in constants) for layer in (0, 2))


def test_two_inputs_reach_the_compiled_model_in_order():
    torch.manual_seed(0)
    model = TwoInputs().eval()
    x, y = torch.randn(3, 4), torch.randn(3, 5)
    fast, graphs = compile_recording(model)
    with torch.no_grad():
        close(fast(x, y), model(x, y))
        close(fast(y[:, :4], x.repeat(1, 2)[:, :5]), model(y[:, :4], x.repeat(1, 2)[:, :5]))
    graph = graphs[0].compiled.graph
    assert [v.shape for v in graph.inputs] == [(3, 4), (3, 5)]
    assert len(graphs[0].weights) == 4


def test_a_weight_changed_after_compiling_compiles_again():
    model, x = cnn()
    fast, graphs = compile_recording(model)
    with torch.no_grad():
        fast(x)
        model.conv1.weight.mul_(2)  # in place: its version counter moves
        with pytest.warns(UserWarning, match="weights changed since compiling"):
            close(fast(x), model(x))
        model.fc.weight = nn.Parameter(torch.randn(10, 8))  # another tensor: dynamo passes it
        with pytest.warns(UserWarning, match="weights changed since compiling"):
            close(fast(x), model(x))
    assert len(graphs) == 1  # dynamo did not recompile: its guards do not cover the weights


def test_weights_are_copied_when_compiling():
    """A change the backend cannot see (through `.data`), and any change for tc.compile, leaves
    the compiled model computing with the weights it was compiled with, all of them: the bias
    that is used as it is as well as the weight that was transposed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x).clone()
    compiled = tc.compile(model, (x,))
    fast, _ = compile_recording(model)
    with torch.no_grad():
        fast(x)
        model[0].weight.data.mul_(2)
        model[2].bias.data.add_(10)
        close(compiled(x), expected)
        close(fast(x), expected)


def test_another_batch_size_compiles_the_dynamic_graph_once_for_a_range_of_sizes():
    model, x = cnn()
    fast, graphs = compile_recording(model)
    with torch.no_grad():
        close(fast(x), model(x))
        for batch in (3, 4, 7, 5):  # dynamo's second graph has the batch as a SymInt input
            xb = torch.randn(batch, 3, 8, 8)
            close(fast(xb), model(xb))
    dynamic = graphs[-1]
    assert dynamic.sizes and dynamic.dynamic and len(graphs) == 2
    # batches up to 4 x 3, in buckets of 2, 4, 8 and 16 images: 3 and 4 share one, 5 and 7 another
    assert sorted(dynamic.compiled.compiled_shapes) == [[[4, 3, 8, 8]], [[8, 3, 8, 8]]]


def test_a_model_that_changes_a_buffer_in_place_is_refused():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(4))

        def forward(self, x):
            self.calls.add_(1)
            return x + self.calls

    torch._dynamo.reset()
    with pytest.raises(Exception, match="changes calls in place"):
        torch.compile(Counter(), backend="minitc")(torch.randn(2, 4))
