"""Measuring GPU candidates while tuning (minitc/autotune/gpu_runner.py, backends/cuda/nvrtc.py),
without a GPU through the fake CuPy and NVRTC of fake_cupy.py: the builder processes compile
cubins the measuring process only loads (shared by a builder's processes; the runner compiles the
source where NVRTC is missing), builder and runner render the same source, and a candidate's
outputs are checked where they ran. Marked `cuda`: a builder's cubin on a real GPU."""

import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_tools import cupy_usable
from fake_cupy import FAKE_CUBIN, FakeArray, install_fake_nvrtc, make_fake_nvrtc

import minitc as tc


def test_the_gpu_runner_checks_candidates_where_they_ran(fake_cupy):
    """The measuring process compares a candidate's outputs with the expected ones on the GPU
    (cupy.isclose: no copy back), then times it; a wrong program is an error, not a timing."""
    from minitc.autotune import gpu_runner

    task, trace = _matmul_candidate()
    target = task.target
    compared = []
    fake_cupy.isclose = lambda *a, **k: compared.append(type(a[0])) or np.isclose(*a, **k)
    assert gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, target)
    status, (latencies, kernel_s) = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0)
    assert status == "ok" and len(latencies) == 3 and all(ms > 0 for ms in latencies) and kernel_s > 0
    assert compared == [FakeArray]  # device arrays, compared by the device's module
    off = [e.copy() for e in task.expected]
    off[0][3, 5] += 1.0
    gpu_runner.gpu_runner_setup(task.inputs, off, task.rtol, target)
    assert gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0) == (
        "error",
        "wrong: 1 of 128 elements differ from the numpy reference",
    )


def _matmul_candidate():
    from minitc.autotune.runner import Task
    from minitc.autotune.space import Space
    from minitc.backends.cuda.device import device_target

    out = tc.ops.matmul(tc.placeholder((16, 24), name="A"), tc.placeholder((24, 8), name="B"))
    target = device_target("cuda").string
    space = Space(out, target)
    return Task.from_outputs(out, target), space.replay(space.default_values()).trace


def test_builders_compile_cubins_the_runner_only_loads(fake_cupy, monkeypatch):
    """With NVRTC installed, a builder process compiles the candidate (in parallel with the
    others, while the GPU measures); the measuring process loads the cubin and never compiles."""
    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate

    install_fake_nvrtc(monkeypatch, make_fake_nvrtc())
    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.error is None and built.object_code.startswith(FAKE_CUBIN)
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    status, _ = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code)
    assert status == "ok" and fake_cupy.modules == ["cubin"]
    rejected = make_fake_nvrtc(log='minitc.cu(3): error: expected a ";"')
    install_fake_nvrtc(monkeypatch, rejected)  # a program NVRTC rejects: the candidate's build error
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.object_code is None and built.error.startswith("build: BuildError: NVRTC failed to compile")
    assert 'error: expected a ";"' in built.error and "at:\n  line 3:" in built.error


def test_a_builders_processes_share_their_cubins(monkeypatch, tmp_path):
    """The final re-measurement builds the best programs again, maybe on other processes of the
    builder: they read what one of them compiled from the builder's folder (removed on close)."""
    from minitc.autotune.runner import LocalBuilder
    from minitc.backends.cuda.nvrtc import CACHE_ENV, compile_cubin

    nvrtc, compiled = make_fake_nvrtc(), []
    compile_program = nvrtc.compileProgram
    nvrtc.compileProgram = lambda program, options: compiled.append(program) or compile_program(program, options)
    install_fake_nvrtc(monkeypatch, nvrtc)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cubins"))
    first, again, other = (compile_cubin(src, "sm_90") for src in ("void a() {}", "void a() {}", "void b() {}"))
    assert first == again != other and len(compiled) == 2 and len(list(tmp_path.glob("cubins/*.cubin"))) == 2
    builder = LocalBuilder(workers=2)
    folder = Path(builder._cache)
    assert all(w.env == {CACHE_ENV: str(folder)} for w in builder._workers)
    assert not folder.exists()  # made by the first cubin: a CPU builder leaves nothing behind
    folder.mkdir()
    builder.close()
    assert not folder.exists()


RENDER_KEYS = """
import numpy as np
import minitc as tc
from minitc.autotune.space import Space
from minitc.backends.cuda.codegen import render_program
from minitc.backends.cuda.runtime import module_key
from minitc.driver import lower_gpu
X, W, G = tc.placeholder((24, 40), name="X"), tc.placeholder((32, 40), name="W"), tc.placeholder((40,), name="G")
for out in (tc.ops.dense(X, W, activation="gelu"), tc.ops.softmax(X), tc.ops.layer_norm(X, G, G)):
    space = Space(out, "cuda -arch=sm_90")
    rng = np.random.default_rng(0)
    for c in [space.replay(space.default_values())] + [space.sample(rng) for _ in range(2)]:
        print(module_key(render_program(lower_gpu(c.schedule, "cuda -arch=sm_90"))))
"""


def test_the_runner_renders_the_source_the_builder_compiled():
    """The runner finds a builder's cubin by the hash of the CUDA C both render in their own
    processes: the rendering must not depend on a process's string hashing (set order)."""
    import os
    import subprocess

    runs = [
        subprocess.run(
            [sys.executable, "-c", RENDER_KEYS],
            env=dict(os.environ, PYTHONHASHSEED=str(seed)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2)
    ]
    assert runs[0] == runs[1] and len(runs[0].split()) == 9


def test_without_nvrtc_the_runner_compiles_the_source(fake_cupy, monkeypatch):
    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate

    monkeypatch.setitem(sys.modules, "cupy_backends", None)  # import fails
    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    assert built.error is None and built.object_code is None and built.symbol == "gpu"
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    status, _ = gpu_runner.gpu_runner_run(task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code)
    assert status == "ok" and fake_cupy.modules == ["source"]


@pytest.mark.cuda
@pytest.mark.skipif(not cupy_usable(), reason="needs CuPy and a CUDA GPU")
def test_a_builders_cubin_runs_on_the_gpu():
    """On a real GPU: the cubin a builder compiled is what the measuring process loads and
    times, checked against numpy on the device."""
    import json

    from minitc.autotune import gpu_runner
    from minitc.autotune.runner import build_candidate
    from minitc.backends.cuda import runtime

    task, trace = _matmul_candidate()
    built = build_candidate(task.outputs, task.args, task.target, trace, task.key)
    if built.object_code is None:
        pytest.skip("CuPy's NVRTC binding is not importable here")
    gpu_runner.gpu_runner_setup(task.inputs, task.expected, task.rtol, task.target)
    before = set(runtime._MODULES)
    status, (latencies, _) = gpu_runner.gpu_runner_run(
        task.outputs, task.args, trace, 3, 1.0, built.symbol, built.object_code
    )
    assert status == "ok" and all(ms > 0 for ms in latencies)
    key = json.loads(built.symbol)[0]
    assert set(runtime._MODULES) - before == {key} and runtime._MODULES[key].file_path  # loaded, not compiled
