"""Every kernel of the four models of the models suite (ResNet-50, MobileNet-V2, BERT-base, GPT-2
at batch 1), as `tc.compile(..., target="cuda")` would build them, compiles with nvcc for sm_90
(issue 42). No GPU or CuPy: the sources are rendered (minitc/frontend/gpu_sources.py), all the
kernels of a model go into one .cu file and nvcc runs once per model."""

import re
import subprocess

import pytest

torch = pytest.importorskip("torch")
from cuda_tools import find_nvcc  # noqa: E402

from minitc.benchmarks.models_zoo import MODELS  # noqa: E402
from minitc.frontend.gpu_sources import model_sources  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")


def one_file(sources: list) -> tuple:
    """(the model's translation unit, [(first line, last line, task)]) with a comment naming
    each fused group ahead of its kernels."""
    lines, spans = [], []
    for k, (task, source) in enumerate(sources):
        lines.append(f"// group g{k}: {task} (nodes {', '.join(task.nodes)})")
        first = len(lines) + 1
        lines += source.splitlines()
        spans.append((first, len(lines), f"g{k} {task} (nodes {', '.join(task.nodes[:3])})"))
    return "\n".join(lines) + "\n", spans


def failing_groups(log: str, spans: list) -> list:
    """The fused groups that nvcc's `file.cu(LINE): error` messages point into."""
    at = {int(n) for n in re.findall(r"\.cu\((\d+)\): error", log)}
    return [group for first, last, group in spans if any(first <= n <= last for n in at)]


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "bert-base", "gpt2"])
@pytest.mark.heavy
def test_every_kernel_of_a_suite_model_compiles_with_nvcc(name, tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin: the CUDA C is not compiled")
    spec = MODELS[name]
    if spec.needs:
        pytest.importorskip(spec.needs, reason=f"{name} is built with {spec.needs}")
    model, inputs = spec.make()
    sources = model_sources(model, inputs, "cuda")
    source, spans = one_file(sources)
    (tmp_path / f"{name}.cu").write_text(source)
    cmd = [nvcc, "-arch=sm_90", "--ptx", "-std=c++17", f"{name}.cu", "-o", f"{name}.ptx"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    groups = "\n".join(failing_groups(log, spans)) or "(no line of a group named)"
    assert done.returncode == 0, f"nvcc failed on {name}; the fused groups:\n{groups}\nnvcc said:\n{log[-6000:]}"
    ptx = (tmp_path / f"{name}.ptx").read_text()
    launches = sum(source.count('extern "C" __global__') for _, source in sources)
    assert ptx.count(".entry ") == launches  # one PTX entry per kernel: none lost


def test_an_nvcc_error_names_the_fused_group(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda*/bin")

    class Task:
        nodes = ["relu_3"]

        def __str__(self):
            return "elementwise float32[4]->[4] x1"

    good = 'extern "C" __global__ void g0(float* y) { y[0] = 1.0f; }'
    source, spans = one_file([(Task(), good), (Task(), 'extern "C" __global__ void g1(float* y) { y[0] = z; }')])
    (tmp_path / "m.cu").write_text(source)
    done = subprocess.run([nvcc, "-arch=sm_90", "--ptx", "m.cu"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0
    assert failing_groups(done.stdout + done.stderr, spans) == ["g1 elementwise float32[4]->[4] x1 (nodes relu_3)"]
