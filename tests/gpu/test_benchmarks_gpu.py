"""The GPU benchmark suites (benchmarks/gpu_core.py) without a GPU: registration, the workloads'
expressions at full size (CUDA C renders) and at tiny size (the simulator matches the numpy
reference and torch), the Triton kernels' source, the one-line message when the GPU stack is
missing, and the whole runner end to end on a CPU stand-in for CUDA (kernels in the simulator)."""

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.benchmarks import gpu_core, gpu_suites
from minitc.cli import main

torch = pytest.importorskip("torch")
F = torch.nn.functional
TRITON_SOURCE = Path(gpu_core.__file__).with_name("triton_kernels.py")


def bench(*args):
    return CliRunner().invoke(main, ["bench", *args])


def test_gpu_suites_are_registered():
    result = bench("--help")
    assert result.exit_code == 0 and "gpu-core" in result.output and "--tune" in result.output
    names = [w.name for w in gpu_suites.GPU_SUITES["gpu-core"]]
    assert names == [
        "matmul-4096",
        "conv-resnet50-l3",
        "conv-resnet50-l3-winograd",
        "dense-bert-ffn",
        "dense-bert-ffn-wt",
        "softmax-bert-attn",
    ]
    mm, conv, winograd, dense, dense_wt, softmax = gpu_suites.GPU_CORE
    assert dense_wt.work == dense.work and dense_wt.make_minitc().shape == (4096, 3072)
    assert mm.work == 2 * 4096**3 and mm.kind == "compute"
    assert conv.work == winograd.work == 2 * 8 * 256 * 14 * 14 * 256 * 9
    assert winograd.make_minitc().op.tag == "conv2d_winograd" and winograd.shapes == conv.shapes
    assert dense.work == 2 * 4096 * 3072 * 768 and "gelu" in dense.description
    assert softmax.kind == "memory" and softmax.work == 2 * 4 * 8 * 12 * 512 * 512


@pytest.mark.parametrize("w", gpu_suites.GPU_CORE, ids=lambda w: w.name)
def test_full_size_workloads_render_cuda_c(w):
    out = w.make_minitc()
    assert len(out.shape) == len(w.shapes[0]) and all(isinstance(n, int) for n in out.shape)
    source = tc.codegen(out, target="cuda -arch=sm_90")  # the GPU template; no GPU needed
    assert "__global__" in source


@pytest.mark.parametrize("w", gpu_suites.GPU_SMOKE, ids=lambda w: w.name)
def test_small_workloads_match_the_reference_in_the_simulator(w):
    arrays = w.make_inputs(np.random.default_rng(1))
    ref = torch.from_numpy(np.asarray(w.reference(*arrays), dtype=np.float64))
    sim = tc.build(w.make_minitc(), target="cuda-sim", db=False)
    why, rel = gpu_core.check(torch, torch.from_numpy(sim(*w.minitc_inputs(arrays))), ref, w)
    assert why is None and rel < 1e-5, why
    got = w.make_torch(torch, F)(*map(torch.from_numpy, arrays))
    why, _ = gpu_core.check(torch, got, ref, w)
    assert why is None, why


def test_check_reports_shape_nan_and_wrong_elements():
    w = gpu_suites.GPU_SMOKE[0]
    ref = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    assert gpu_core.check(torch, ref.float(), ref, w) == (None, 0.0)
    bad = ref.float().clone()
    bad[1, 2] += 1
    why, rel = gpu_core.check(torch, bad, ref, w)
    assert why == "wrong result: 1 of 6 elements off, worst at (1, 2): 6 vs 5" and rel == pytest.approx(0.2)
    assert "non-finite" in gpu_core.check(torch, torch.full((2, 3), float("nan")), ref, w)[0]
    assert "shape" in gpu_core.check(torch, ref[:1].float(), ref, w)[0]


def test_triton_kernels_parse_and_use_ieee_products():
    tree = ast.parse(TRITON_SOURCE.read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"matmul", "linear", "conv2d", "softmax", "matmul_kernel", "conv2d_kernel", "softmax_kernel"} <= functions
    dots = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "tl.dot"]
    assert len(dots) == 2
    for call in dots:  # float32 products without TF32
        assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == {"input_precision": "ieee"}


TRITON_CHECK = """
import torch, torch.nn.functional as F, triton, triton.language as tl
from minitc.benchmarks import triton_kernels as tk

@triton.jit
def loop_to_an_argument(x_ptr, n):
    acc = 0.0
    for i in range(0, n):
        acc += 1.0
    tl.store(x_ptr, acc)

try:  # Triton 3.6's interpreter with numpy 2 cannot loop to a scalar argument (int() of a 1-element array)
    loop_to_an_argument[(1,)](torch.zeros(1), 3)
except Exception as e:
    raise SystemExit("skip: this Triton's interpreter cannot run a loop over a scalar argument: " + repr(e)[:200])
cfg = tk._config(32, 32, 16, 2, 1)
g = torch.Generator().manual_seed(0)
r = lambda *s: torch.randn(*s, generator=g)
a, b = r(70, 50), r(50, 45)
assert torch.allclose(tk.matmul(a, b, config=cfg), a @ b, atol=1e-4)
x, w, bias = r(37, 50), r(45, 50) * 0.2, r(45)
assert torch.allclose(tk.linear(x, w, bias, "gelu", config=cfg), F.gelu(F.linear(x, w, bias)), atol=1e-5)
x, w = r(2, 5, 7, 6), r(6, 5, 3, 3)
for stride, pad in [(1, 1), (2, 1), (1, 0)]:
    want = F.conv2d(x, w, stride=stride, padding=pad)
    assert torch.allclose(tk.conv2d(x, w, stride, pad, config=cfg), want, atol=1e-4)
x = r(9, 100)
assert torch.allclose(tk.softmax(x), torch.softmax(x, -1), atol=1e-6)
print("ok")
"""


def test_triton_kernels_in_the_interpreter():
    """Where Triton is installed: its CPU interpreter runs the kernels at fixed tile sizes."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRITON_CHECK)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(gpu_core.__file__).parents[1],
        timeout=120,
    )
    if proc.stderr.startswith("skip: "):
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_without_a_gpu_stack_the_suite_stops_with_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail, GPU or not
    result = bench("--suite", "gpu-core", "-q")
    assert result.exit_code == 1
    assert result.output.startswith("Error: gpu-core needs an NVIDIA GPU with torch's CUDA build and CuPy: ")
    assert "CuPy is not installed (pip install 'minitc[cuda]')" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--threads", "1"],
            "--threads applies to the suites cpu-core, smoke, handwritten, cpu-tune, smoke-tune, handwritten-tune, "
            "models, generate, sweep and zoo",
        ),
        (["--db", "r.db"], "--db keeps the records of --tune: give --tune N too"),
        (["--workloads", "nope"], "unknown workload(s) 'nope' in suite 'gpu-core'"),
    ],
)
def test_bad_gpu_options_are_usage_errors(args, message):
    result = bench("--suite", "gpu-core", *args)
    assert result.exit_code == 2 and message in result.output


def test_tune_is_only_for_the_gpu_suites():
    result = bench("--suite", "smoke", "--tune", "4")
    assert result.exit_code == 2 and "--tune applies to the suites gpu-core and gpu-smoke, not smoke" in result.output


# ---------------------------------------------------------------------------------------------
# end to end on a stand-in: torch on the CPU with perf_counter "events", minitc in the simulator


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def _fake_gpu(monkeypatch):
    cupy = SimpleNamespace(
        __version__="fake",
        from_dlpack=lambda t: t.numpy(),  # the simulator writes through the numpy view
        cuda=SimpleNamespace(
            Device=lambda i=0: SimpleNamespace(attributes={"ClockRate": 1_000_000}),
            runtime=SimpleNamespace(driverGetVersion=lambda: 13000),
        ),
    )
    device = SimpleNamespace(id=0, name="Simulated GPU", arch="sm_90", sm_count=2)
    monkeypatch.setattr(gpu_core, "requirements", lambda suite: (torch, cupy, device))
    monkeypatch.setattr(gpu_core, "TARGET", "cuda-sim")
    monkeypatch.setattr(gpu_core, "DEVICE", "cpu")
    monkeypatch.setattr(gpu_core, "FLUSH_MIB", 1)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: SimpleNamespace(cuda_stream=0))
    props = SimpleNamespace(total_memory=2**34, name="Simulated GPU", major=9, minor=0, multi_processor_count=2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setitem(sys.modules, "triton", None)  # Triton missing: only its column is empty


def test_gpu_smoke_end_to_end_on_a_stand_in(monkeypatch, tmp_path):
    _fake_gpu(monkeypatch)

    def fake_tune(out, trials, strategy, target, db):  # succeeds for dense, fails for softmax
        assert (trials, strategy, target) == (2, "evolutionary", "cuda-sim") and db.endswith("records.db")
        if out.name.startswith("softmax"):
            raise tc.BuildError("tc.tune does not take target 'cuda' yet")
        return SimpleNamespace(kernel=tc.build(out, target="cuda-sim", db=False), trials=2, best_ms=1.5)

    monkeypatch.setattr(tc, "tune", fake_tune)
    path, png = tmp_path / "gpu.json", tmp_path / "gpu.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    result = bench(
        "--suite",
        "gpu-smoke",
        "--workloads",
        "dense-small,softmax-small",
        "--repeats",
        "3",
        "--budget",
        "0.01",
        "--tune",
        "2",
        "--json",
        str(path),
        *plot,
        "-q",
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    dense, softmax = json.loads(path.read_text())
    for r in (dense, softmax):
        assert r["error"] is None and r["minitc_ms"] > 0 and r["torch_ms"] > 0 and r["triton_ms"] is None
        assert r["vs_torch"] == pytest.approx(r["torch_ms"] / r["minitc_ms"], rel=2e-2)
        assert r["max_rel_err"]["minitc"] < 1e-5 and r["samples"]["minitc"] == 3
        assert r["device"]["name"] == "Simulated GPU" and r["device"]["fp32_peak_gflops"] == 512
        assert "bench --suite gpu-smoke" in r["run"]["command"] and "--tune 2" in r["run"]["command"]
        assert "Triton is not installed" in r["run"]["triton_note"]
        assert r["run"]["settings"]["torch_matmul_allow_tf32"] is False
    assert dense["unit"] == "GFLOP/s" and "flops" in dense and dense["peak_pct"] is not None
    assert dense["tune"] == {"trials": 2, "seconds": dense["tune"]["seconds"], "best_ms": 1.5, "error": None}
    assert dense["minitc_template_ms"] > 0 and dense["launches"][0][0] == "dense_bias_gelu_kernel"
    assert softmax["unit"] == "GB/s" and "bytes" in softmax and softmax["minitc_template_ms"] is None
    assert "does not take target 'cuda'" in softmax["tune"]["error"]
    assert any(n.startswith("tuning failed") for n in softmax["notes"])
    assert "precision: float32 without TF32" in result.output and "minitc template ms" in result.output
    assert "note: Triton is not installed" in result.output
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tune_with_db_keeps_the_records_there(monkeypatch, tmp_path):
    _fake_gpu(monkeypatch)
    kept = tmp_path / "kept.db"
    seen = []

    def fake_tune(out, trials, strategy, target, db):
        seen.append(db)
        return SimpleNamespace(kernel=tc.build(out, target="cuda-sim", db=False), trials=2, best_ms=1.5)

    monkeypatch.setattr(tc, "tune", fake_tune)
    args = ("--suite", "gpu-smoke", "--workloads", "dense-small", "--repeats", "3", "--budget", "0.01", "--tune", "2")
    result = bench(*args, "--db", str(kept), "-q")
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert seen == [str(kept)]


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None
