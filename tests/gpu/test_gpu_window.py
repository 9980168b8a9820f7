"""The GPU sliding-window templates (minitc/templates/gpu/window.py): depthwise convolution and
pooling against numpy in the simulator, with the defaults and with tiles that do not divide the
shape; the default kernels through nvcc/ptxas (no spills); a MobileNet-like block matches eager."""

import re

import numpy as np
import pytest
from cuda_tools import find_nvcc, ptxas_log

import minitc as tc
from minitc.expr import binary, const
from minitc.ops import reference as ref_ops
from minitc.te import compute
from minitc.templates.gpu import GPU_TEMPLATES, bind_unbound, load_gpu_templates
from minitc.templates.gpu.window import window_defaults


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def window_op(op: str, shape: tuple, k: int, stride: int, pad: int, mult: int = 1):
    """(output tensor, numpy inputs, numpy reference) of a depthwise convolution or pool."""
    N, C, H, W = shape
    X, x = tc.placeholder(shape, name="X"), rand(*shape)
    if op == "depthwise_conv2d":
        Wt, w = tc.placeholder((C * mult, 1, k, k), name="W"), rand(C * mult, 1, k, k, seed=1)
        out = tc.ops.depthwise_conv2d(X, Wt, stride=stride, padding=pad)
        return out, (x, w), ref_ops.depthwise_conv2d(x, w, stride=stride, padding=pad)
    out = getattr(tc.ops, op)(X, k, stride, pad)
    return out, (x,), getattr(ref_ops, op)(x, k, stride, pad)


CASES = {
    "dw3-s1": ("depthwise_conv2d", (1, 6, 13, 15), 3, 1, 1),
    "dw3-s2": ("depthwise_conv2d", (2, 5, 14, 11), 3, 2, 1),
    "dw5-s1": ("depthwise_conv2d", (1, 4, 9, 12), 5, 1, 2),
    "dw5-s2": ("depthwise_conv2d", (1, 3, 15, 15), 5, 2, 2),
    "max3-s2": ("max_pool2d", (1, 4, 13, 12), 3, 2, 1),
    "avg2-s2": ("avg_pool2d", (2, 3, 8, 10), 2, 2, 0),
    "avg3-s1-pad": ("avg_pool2d", (1, 4, 7, 9), 3, 1, 1),
    "global-avg": ("avg_pool2d", (1, 40, 7, 7), 7, 7, 0),
    "global-max": ("max_pool2d", (2, 6, 6, 6), 6, 6, 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_window_kernel_against_numpy(case):
    out, inputs, want = window_op(*CASES[case])
    f = tc.build(out, target="cuda-sim", db=False)
    np.testing.assert_allclose(f(*inputs), want, rtol=1e-5, atol=1e-5)
    s = tc.Schedule(out)
    params = window_defaults(s, s.state.outputs[0], "cuda-sim")
    source = tc.codegen(out, "cuda", db=False)
    if params["threads"]:  # a global pool: one warp a window, shuffles between its threads
        assert case.startswith("global") and "__shfl_xor_sync" in source
    else:  # a 2-D block of columns x (rows, channels), the window unrolled
        assert not case.startswith("global") and re.search(r"block \(\d+, \d+, 1\)", source)
        assert "#pragma unroll" in source


@pytest.mark.parametrize(
    "params",
    [
        dict(wt=4, oht=3, ohb=3, kt=2),  # partial tiles of columns, rows and channels
        dict(wt=64, oht=64, ohb=1, kt=8),  # past 1024 threads: the block shrinks
        dict(wt=1, oht=1, ohb=5, kt=1),
        dict(threads=8, rows=3),  # the cross-thread reduction on a window that is not global
        dict(threads=64, rows=5),  # more threads than the window has values
    ],
)
@pytest.mark.parametrize("case", ["dw3-s2", "dw5-s1", "max3-s2"])
def test_window_template_parameters_against_numpy(case, params):
    load_gpu_templates()
    out, inputs, want = window_op(*CASES[case])
    s = tc.Schedule(out)
    GPU_TEMPLATES[CASES[case][0]](s, s.state.outputs[0], "cuda-sim", **params)
    bind_unbound(s)
    np.testing.assert_allclose(tc.build(s, target="cuda-sim")(*inputs), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "layer",
    [
        ("depthwise_conv2d", (1, 3, 10, 10), 3, 1, 1, 2),
        ("avg_pool2d", (1, 6, 7, 7), 7, 7, 0, 1),
        ("max_pool2d", (1, 4, 13, 12), 3, 2, 1, 1),
    ],
    ids=["depthwise-multiplier-2", "global-avg", "max-pool-padded"],
)
def test_a_fused_epilogue_against_numpy(layer):
    """A bias + ReLU6 epilogue applied at the store (the anchor found under it, as conv2d's
    template does), on a depthwise convolution with two output channels per input channel, on
    a global pool (stored by one thread of the window's) and on a padded max pool."""
    epilogue, inputs, want = with_relu6(*window_op(*layer), layer[0])
    np.testing.assert_allclose(tc.build(epilogue, target="cuda-sim", db=False)(*inputs), want, rtol=1e-5, atol=1e-5)


def with_relu6(out, inputs, want, tag):
    """(bias + ReLU6 after `out`, tagged for out's template as a fused group is, the inputs with
    the bias, the reference)."""
    C = out.shape[1]
    B, b = tc.placeholder((C,), name="B"), rand(C, seed=2)
    six, zero = const(6.0, "float32"), const(0.0, "float32")

    def relu6(n, c, h, i):
        return binary("min", binary("max", out[n, c, h, i] + B[c], zero), six)

    epilogue = compute(out.shape, relu6, name="epilogue", tag=tag)
    return epilogue, (*inputs, b), np.clip(want + b[None, :, None, None], 0, 6)


# MobileNet-V2's depthwise layers, ResNet's max pool and the global pools, at batch 1
LAYERS = {
    "mbv2-dw-112": ("depthwise_conv2d", (1, 32, 112, 112), 3, 1, 1),
    "mbv2-dw-112-s2": ("depthwise_conv2d", (1, 96, 112, 112), 3, 2, 1),
    "mbv2-dw-7": ("depthwise_conv2d", (1, 960, 7, 7), 3, 1, 1),
    "dw5-14": ("depthwise_conv2d", (1, 480, 14, 14), 5, 1, 2),
    "resnet-maxpool": ("max_pool2d", (1, 64, 112, 112), 3, 2, 1),
    "global-avg-2048": ("avg_pool2d", (1, 2048, 7, 7), 7, 7, 0),
}


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found on PATH or in /usr/local/cuda*/bin")
def test_default_window_kernels_keep_their_accumulators_in_registers(tmp_path):
    """Every layer's default kernel in one file through nvcc and ptxas: no spills, no stack."""
    sources = []
    for k, (name, layer) in enumerate(sorted(LAYERS.items())):
        op, shape, kernel, stride, pad = layer
        X = tc.placeholder(shape, name="X")
        if op == "depthwise_conv2d":
            out = tc.ops.depthwise_conv2d(X, tc.placeholder((shape[1], 1, kernel, kernel), name="W"), stride, pad)
        else:
            out = getattr(tc.ops, op)(X, kernel, stride, pad)
        sources.append(tc.codegen(out, "cuda", name=f"w{k}", db=False))
    log = ptxas_log("\n".join(sources), tmp_path)
    assert log.count("0 bytes spill stores, 0 bytes spill loads") == len(LAYERS), log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


def mobilenet_like():
    """Inverted residual blocks (depthwise 3x3 at stride 1 with the residual, 3x3 and 5x5 at
    stride 2, each under batch norm and ReLU6), a max pool and the global average pool; random
    batch norm statistics. Returns (model, example input)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    def block(cin, cout, k, stride):
        hidden = 4 * cin
        return nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, k, stride, k // 2, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    class Residual(nn.Module):
        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, x):
            return x + self.body(x)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        Residual(block(8, 8, 3, 1)), block(8, 12, 3, 2), nn.MaxPool2d(3, 2, 1), block(12, 16, 5, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).eval()  # fmt: skip
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model, torch.randn(1, 3, 32, 32)


def _kinds(tasks) -> list:
    return [str(t).split()[0] for t in tasks]


def test_a_mobilenet_like_model_on_the_gpu_simulator_matches_eager():
    """Every window layer gets the window template, each depthwise layer with its bias + ReLU6
    epilogue in its kernel (no elementwise kernel after it), and the outputs match eager."""
    torch = pytest.importorskip("torch")
    model, x = mobilenet_like()
    compiled = tc.compile(model, (x,), target="cuda-sim")
    windows = [t for t in compiled.tasks if str(t).split()[0] in ("depthwise_conv2d", "max_pool2d")]
    assert len(windows) == 4
    for task in windows:  # the window template's 2-D blocks, not the flat binding
        assert '"threadIdx.y"' in task.trace.to_json(), str(task)
    depthwise = [t for t in windows if str(t).startswith("depthwise_conv2d")]
    assert all(len(t.key[2]) == 3 for t in depthwise), [str(t) for t in depthwise]  # X, W and the bias
    assert "elementwise" not in _kinds(compiled.tasks)
    with torch.no_grad():
        want = model(x)
    np.testing.assert_allclose(compiled(x).numpy(), want.numpy(), rtol=0, atol=1e-4 * float(want.abs().max()))


def test_depthwise_epilogues_are_fused_on_the_gpu_only():
    """The same graph on a CPU in NCHW keeps each depthwise convolution and its epilogue apart
    (the CPU's NCHW template applies none): the GPU's task list is the CPU's without the three
    elementwise tasks."""
    from minitc.frontend import passes
    from minitc.frontend.compiler import extract_tasks
    from minitc.frontend.importer import import_model

    model, x = mobilenet_like()
    cpu, gpu = (
        _kinds(extract_tasks(passes.run_all(import_model(model, (x,)), target, "nchw"), target))
        for target in ("llvm", "cuda-sim")
    )
    assert cpu.count("elementwise") == 3 and cpu.count("depthwise_conv2d") == 3
    after = [cpu[k + 1] for k, kind in enumerate(cpu) if kind == "depthwise_conv2d"]
    assert after == ["elementwise"] * 3
    assert gpu == [kind for kind in cpu if kind != "elementwise"]


def test_elementwise_regions_and_pools_take_the_gpu_epilogue():
    """A SiLU written out (y * sigmoid(y): the depthwise result read twice, a region) after a
    depthwise layer, and a shift and ReLU after a max pool: each one kernel on the GPU."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(6, 6, 3, 1, 1, groups=6, bias=False)
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.shift = nn.Parameter(torch.randn(1, 6, 1, 1))

        def forward(self, x):
            y = self.dw(x)
            y = y * torch.sigmoid(y)
            return torch.relu(self.pool(y) + self.shift)

    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(1, 6, 11, 13)
    compiled = tc.compile(model, (x,), target="cuda-sim")
    assert _kinds(compiled.tasks) == ["depthwise_conv2d", "max_pool2d"]
    with torch.no_grad():
        want = model(x)
    np.testing.assert_allclose(compiled(x).numpy(), want.numpy(), rtol=0, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("case, epilogue", [("dw3-s2", False), ("global-avg", False), ("dw3-s1", True)])
def test_programs_the_tuner_draws_from_the_gpu_space_against_numpy(case, epilogue):
    """The tuner's design space draws every template parameter (the tiles or the cross-thread
    reduction): each draw is a legal program that matches numpy; its defaults are tc.build's.
    Also for a depthwise convolution under a fused bias + ReLU6, as a GPU model's group has it."""
    from minitc.autotune.space import Space
    from minitc.templates import template_schedule

    out, inputs, want = window_op(*CASES[case])
    if epilogue:
        out, inputs, want = with_relu6(out, inputs, want, CASES[case][0])
    space = Space([out], "cuda-sim", "template")
    assert space.replay(space.default_values()).trace == template_schedule([out], "cuda-sim").trace.to_json()
    rng = np.random.default_rng(0)
    for _ in range(6):
        f = tc.build(space.sample(rng).schedule, target="cuda-sim")
        np.testing.assert_allclose(f(*inputs), want, rtol=1e-5, atol=1e-5)
