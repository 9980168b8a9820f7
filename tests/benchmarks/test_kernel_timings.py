"""pytest-benchmark timings of a few minitc kernels (default schedules), for regression
tracking. In the test suite each kernel is checked against numpy and timed for a few rounds,
with nothing asserted about the time; to track speed on one machine, save and compare:

    python -m pytest tests/benchmarks/test_kernel_timings.py --benchmark-autosave
    python -m pytest tests/benchmarks/test_kernel_timings.py --benchmark-compare --benchmark-compare-fail=median:10%

(It lived in benchmarks/, which ships in the wheel, where CI never ran it.)
"""

import numpy as np
import pytest

import minitc as tc
from minitc.benchmarks import suites as wl
from minitc.benchmarks.runner import check_minitc, prepare

KERNELS = ["matmul-512", "conv-resnet", "softmax-bert", "eltwise-4m"]


@pytest.fixture(params=[1, 2], ids=lambda n: f"{n}T")
def threads(request):
    before = tc.get_num_threads()
    tc.set_num_threads(request.param)
    yield request.param
    tc.set_num_threads(before)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel(benchmark, name, threads):
    (w,) = wl.select("cpu-core", [name])
    p = prepare(w)
    assert p.error is None, p.error
    assert check_minitc(p) is None
    benchmark.extra_info.update(kind=w.kind, work=w.work, threads=threads)
    benchmark.pedantic(p.fns["minitc"], rounds=5, warmup_rounds=1)
    assert np.all(np.isfinite(p.minitc_out))
