"""Front-end passes and converters that change what runs: convolution weights packed for the
channel-vector template (and their padded rows), attention's softmax and GPT-2's splits as
kernels, common subexpressions computed once, and one task per distinct fused kernel; each
compiled model is checked against PyTorch eager."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import check_golden, model_graph  # noqa: E402
from torch import nn  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.frontend import unsupported  # noqa: E402
from minitc.target import parse_target  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


def test_conv_weights_are_packed_where_channel_vectors_pay():
    """In PyTorch's layout (`layout="nchw"`) on an 8-lane target, a convolution with 8-wide
    output rows keeps its [K, C, R, S] weight; one with 7-wide rows or a stride of 2 gets it
    repacked once into [C, R, S, K]."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.Conv2d(16, 8, 2)
    ).eval()
    x = torch.randn(1, 3, 16, 16)
    compiled = tc.compile(model, (x,), target="llvm -mcpu=znver2 -num-cores=2", layout="nchw")
    convs = [b for n in compiled.graph.nodes for b in ([n] + list(getattr(n, "body", [])) or [n]) if b.op == "conv2d"]
    assert [c.attrs.get("weight_layout") for c in convs] == [None, "CRSK", "CRSK"]
    assert [tuple(compiled.graph.constants[c.inputs[1]].shape) for c in convs] == [
        (16, 3, 3, 3),
        (16, 3, 3, 16),
        (16, 2, 2, 8),
    ]
    assert "weight_layout=CRSK" in str(compiled.graph)
    with torch.no_grad():
        close(compiled(x), model(x))


def test_packed_conv_weight_rows_are_padded_off_a_kib_stride():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 256, 1, stride=2), nn.ReLU()).eval()
    x = torch.randn(1, 16, 14, 14)
    compiled = tc.compile(model, (x,), target="llvm -mcpu=znver2 -num-cores=2", layout="nchw")
    (conv,) = [n for n in compiled.graph.nodes for n in (n.body or [n]) if n.op == "conv2d"]
    assert compiled.graph.constants[conv.inputs[1]].shape == (16, 1, 1, 256 + 16)  # one cache line more
    with torch.no_grad():
        close(compiled(x), model(x))


def test_attention_softmax_is_one_kernel_and_a_fully_masked_row_gives_zeros():
    """scaled_dot_product_attention's softmax (_safe_softmax) is a minitc softmax: a row whose
    scores are all masked gives 0 as in PyTorch, not NaN, and nothing runs through PyTorch."""

    class Attention(nn.Module):
        def forward(self, q, k, v, mask):
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    mask = torch.zeros(1, 1, 8, 8)
    mask[..., 3, :] = float("-inf")  # query 3 may attend to nothing
    compiled = tc.compile(Attention(), (q, k, v, mask))
    softmaxes = [n for n in compiled.graph.nodes for n in (n.body or [n]) if n.op == "softmax"]
    assert [n.attrs for n in softmaxes] == [{"safe": True}] and not unsupported(compiled.graph)
    # the scores' scale (q's and k's, hoisted past the product) and the mask are the softmax's
    # prologue, not kernels of their own
    (kernel,) = [n for n in compiled.graph.nodes if "softmax" in [b.op for b in n.body or [n]]]
    assert [b.op for b in kernel.body] == ["mul", "view", "add", "softmax"], str(compiled.graph)
    assert kernel.body[0].attrs["scalar"] == pytest.approx(16**-0.5)
    got, want = compiled(q, k, v, mask), Attention()(q, k, v, mask)
    assert torch.equal(got[..., 3, :], torch.zeros_like(got[..., 3, :]))
    close(got, want)


def test_attention_reads_its_heads_in_place_and_scales_the_scores_once(update_golden):
    """hoist_operand_scales and the batch matmul's index prologue: q's and k's scales become
    one scale of the scores in the softmax's kernel, and the matmuls read q, k (transposed)
    and v through their head permutes, with no copy of any of them."""

    class Attention(nn.Module):
        def forward(self, q, k, v):  # [batch, tokens, heads, dim] in and out
            q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))
            return nn.functional.scaled_dot_product_attention(q, k, v).permute(0, 2, 1, 3)

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    compiled = tc.compile(Attention(), (q, k, v))
    check_golden("attention_graph", str(compiled.graph), update_golden)
    assert [n.op for n in compiled.graph.nodes if n.op != "view"] == ["fused"] * 4
    close(compiled(q, k, v), Attention()(q, k, v))


def test_dense_weights_are_packed_in_blocks_of_the_targets_vectors():
    """pack_dense_weights: a constant weight is packed once into [out / lanes, in, lanes], the
    last block padded with zeros where the lanes do not divide the output features."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10)).eval(), torch.randn(4, 16)
    for target, lanes in (("llvm -mcpu=znver2 -num-cores=2", 8), ("llvm -mcpu=znver4 -num-cores=2", 16)):
        graph = model_graph(model, (x,), target)  # AVX-512 kernels need not run here
        first, second = (b for n in graph.nodes for b in (n.body or [n]) if b.op == "dense")
        assert first.attrs["weight_block"] == lanes and "weight_in_out" not in first.attrs
        blocks = graph.constants[first.inputs[1]]
        assert blocks.shape == (32 // lanes, 16, lanes)
        assert np.array_equal(blocks.transpose(1, 0, 2).reshape(16, 32), model[0].weight.detach().numpy().T)
        assert second.attrs == {"weight_block": lanes, "out_features": 10}
        padded = graph.constants[second.inputs[1]].transpose(1, 0, 2).reshape(32, -1)
        assert padded.shape == (32, lanes * -(-10 // lanes)) and not padded[:, 10:].any()
        assert np.array_equal(padded[:, :10], model[2].weight.detach().numpy().T)
    compiled = tc.compile(model, (x,))
    with torch.no_grad():
        close(compiled(x), model(x))


def test_constants_are_computed_at_compile_time(update_golden):
    """fold_constants: what reads only constants, or nothing (positions, a causal mask, an
    embedding of them), becomes a constant; a random op stays, and so does a broadcast that
    would store 2 MiB for 4 bytes."""

    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(8, 4)

        def forward(self, x):  # [8, 4]
            pos = torch.arange(x.shape[0])
            causal = (pos[None, :] <= pos[:, None]).float()
            ones = torch.ones(1).expand(512, 1024)
            return causal @ (x + self.table(pos)), ones * x[:1, :1], torch.rand(x.shape) * 0

    torch.manual_seed(0)
    model, x = Positions().eval(), torch.randn(8, 4)
    compiled = tc.compile(model, (x,))
    check_golden("fold_constants_graph", str(compiled.graph), update_golden)
    assert [n.attrs["target"] for n in compiled.graph.nodes if n.op == "torch"] == ["aten.rand.default"]
    with torch.no_grad():
        for got, want in zip(compiled(x), model(x)):
            close(got, want)


def test_common_subexpressions_are_computed_once():
    """Layers that rebuild the same value (the same op on the same inputs) share one node, also
    for operators that run through PyTorch."""

    class Twice(nn.Module):
        def forward(self, x):
            a = torch.relu(x).cumsum(-1) + torch.relu(x).cumsum(-1)
            return a + x.view(4, 8).view(32).cumsum(0).view(4, 8)

    x = torch.randn(4, 8)
    with pytest.warns(UserWarning, match="runs 2 node"):  # cumsum twice in the model, once here
        compiled = tc.compile(Twice(), (x,))
    ops = [n.op for n in compiled.graph.nodes for n in (n.body or [n])]
    assert ops.count("relu") == 1 and ops.count("torch") == 2
    close(compiled(x), Twice()(x))


def test_slices_and_splits_are_kernels_that_fuse_into_their_readers():
    class Split(nn.Module):
        def forward(self, x):
            q, k, v = x.split([4, 4, 8], dim=-1)  # GPT-2's query, key and value
            return torch.relu(q) * k + v[:, 1:5] - x[:, -3:-1].sum(-1, keepdim=True)

    x = torch.randn(6, 16)
    compiled = tc.compile(Split(), (x,))
    assert not unsupported(compiled.graph)
    ops = [n.op for n in compiled.graph.nodes for n in (n.body or [n])]
    assert ops.count("slice") == 5 and [n.op for n in compiled.graph.nodes] == ["slice", "sum", "fused"]
    close(compiled(x), Split()(x))


def test_fused_kernels_of_the_same_input_shapes_are_different_tasks():
    """fused[add, relu] and fused[sub, sigmoid] of one input: two tasks, each its own kernel
    (they once shared a task key, and the second output was the first's kernel's)."""

    class Two(nn.Module):
        def forward(self, x):
            return torch.relu(x + 1), torch.sigmoid(x - 1)

    x = torch.randn(4, 8)
    compiled = tc.compile(Two(), (x,))
    assert [n.op for n in compiled.graph.nodes] == ["fused", "fused"] and len(compiled.tasks) == 2
    for got, want in zip(compiled(x), Two()(x)):
        close(got, want)


class TokensMLP(nn.Module):
    """GPT-2's MLP on [batch, tokens, features]: the Conv1D product is [tokens, features] viewed
    to 3-D, and the tanh GELU (which reads it four times) runs on the 3-D view."""

    def __init__(self, d=16, ff=32):
        super().__init__()
        self.w1, self.b1 = nn.Parameter(torch.randn(d, ff) / 4), nn.Parameter(torch.randn(ff))
        self.w2, self.b2 = nn.Parameter(torch.randn(ff, d) / 4), nn.Parameter(torch.randn(d))

    def forward(self, x):
        b, t, d = x.shape
        h = torch.addmm(self.b1, x.view(-1, d), self.w1).view(b, t, -1)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        return torch.addmm(self.b2, h.view(-1, h.shape[-1]), self.w2).view(b, t, d)


def test_an_elementwise_region_on_a_viewed_dense_result_is_its_epilogue():
    torch.manual_seed(0)
    model, x = TokensMLP().eval(), torch.randn(2, 5, 16)
    compiled = tc.compile(model, (x,))
    bodies = [[b.op for b in n.body] for n in compiled.graph.nodes if n.op == "fused"]
    assert bodies and bodies[0][0] == "dense" and "tanh" in bodies[0], bodies
    assert not any(n.op == "fused" and n.body[0].op != "dense" for n in compiled.graph.nodes)
    gelu = next(n for n in compiled.graph.nodes if n.op == "fused" and "tanh" in [b.op for b in n.body])
    assert gelu.shape == (10, 32) and all(b.shape == (10, 32) for b in gelu.body)
    with torch.no_grad():
        close(compiled(x), model(x))


def test_heads_split_from_one_product_are_read_through_their_views():
    """GPT-2's attention input: one product split into query, key and value, each viewed to
    [batch, tokens, heads, dim] and permuted: one kernel per head tensor reads the product
    through slice, view and permute (affine index math), with no copy of the slices."""

    class Heads(nn.Module):
        def __init__(self, d=16, heads=2):
            super().__init__()
            self.qkv, self.heads = nn.Linear(d, 3 * d), heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).permute(0, 2, 1, 3) for y in (q, k, v))
            return (q * 0.5) @ k.transpose(-1, -2), v.permute(0, 2, 1, 3).contiguous()

    torch.manual_seed(0)
    model, x = Heads().eval(), torch.randn(2, 5, 16)
    compiled = tc.compile(model, (x,))
    assert "slice" not in [n.op for n in compiled.graph.nodes]  # no slice is a kernel of its own
    bodies = [[b.op for b in n.body] for n in compiled.graph.nodes if n.op == "fused"]
    assert sum(body[:3] == ["slice", "view", "permute"] for body in bodies) == 3, bodies
    # the product is an output, which no kernel reads: q's scale stays with q, not hoisted
    assert ["slice", "view", "permute", "mul"] in bodies
    with torch.no_grad():
        for got, want in zip(compiled(x), model(x)):
            close(got, want)


def test_split_groups_names_the_axes_a_view_splits_each_axis_into():
    from minitc.frontend.kernels import split_groups

    assert split_groups((128, 768), (1, 128, 12, 64)) == [[0, 1], [2, 3]]
    assert split_groups((1, 128, 2304), (128, 2304)) == [[], [0], [1]]
    assert split_groups((2, 3), (2, 3, 1)) == [[0], [1]]
    assert split_groups((12, 64), (768,)) is None  # a merge: flat-index math instead
    assert split_groups((4, 6), (6, 4)) is None


def test_weights_larger_than_the_caches_are_tuned_cold(monkeypatch):
    """A model whose constants do not fit the target's caches reads them from memory at every
    run: its tasks mark their constant inputs, which tuning measures flushed from the caches."""
    from minitc.autotune.runner import Task
    from minitc.frontend import compiler
    from minitc.frontend.graph import Graph

    target = "llvm -mcpu=znver2 -num-cores=2"
    t = parse_target(target)
    caches = t.cache_bytes("l3") + 2 * t.cache_bytes("l2")
    big = Graph([], {"w": np.zeros(caches // 4 + 16, "float32")}, [], [])  # calloc: no pages touched
    assert compiler.weights_stay_cold(big, target) and not compiler.weights_stay_cold(big, "cuda")
    assert not compiler.weights_stay_cold(Graph([], {"w": np.zeros(16, "float32")}, [], []), target)

    graph = tc.compile(nn.Linear(16, 32).eval(), (torch.randn(4, 16),), target=target).graph
    monkeypatch.setattr(compiler, "weights_stay_cold", lambda g, tgt: True)
    (task,) = compiler.extract_tasks(graph, target)
    measured = Task.from_outputs(task.outputs, target)
    assert [a.name for a in measured.args[:3]] == ["in0", "in1", "in2"] and measured.cold == (1, 2)


class RegroupedTranspose(nn.Module):
    """A transpose whose result is viewed with other matrix axes before a matmul (ConvBERT's span
    convolution: unfold, transpose(1, 2), reshape to [-1, head size, kernel size])."""

    def forward(self, x, w):
        return torch.matmul(x.transpose(1, 2).reshape(2, 8, 3), w)


class BatchRegroupedTranspose(nn.Module):
    """A transpose of the last two axes whose view only merges the batch axes (attention's keys)."""

    def forward(self, x, w):
        return torch.matmul(x.transpose(-1, -2).reshape(6, 4, 5), w)


def test_a_transpose_is_read_in_place_only_through_a_view_of_its_batch_axes():
    """fold_transposes read the first through the matmul's transpose flag as [2, 3, 8]: a wrong
    answer (the sweep's convbert, 0.0169 of its largest value off eager); it is a copy now. The
    second still reads its source in place."""
    torch.manual_seed(0)
    cases = [
        (RegroupedTranspose(), (torch.randn(2, 6, 4), torch.randn(2, 3, 5)), False),
        (BatchRegroupedTranspose(), (torch.randn(2, 3, 5, 4), torch.randn(6, 5, 7)), True),
    ]
    for model, args, in_place in cases:
        compiled = tc.compile(model, args, target="llvm -mcpu=znver2 -num-cores=2", db=False)
        close(compiled(*args), model(*args))
        (matmul,) = [m for n in compiled.graph.nodes for m in (n.body or (n,)) if m.op == "batch_matmul"]
        assert matmul.attrs.get("transpose_a", False) is in_place
