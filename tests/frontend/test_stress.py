"""The runtime under load (issue 55): tests/frontend/stress_runtime.py in a subprocess, so that a crash
fails the test instead of killing pytest: at 2 pool threads on the default path, and with more
pool threads than cores in the checked mode. The short runs take about two minutes on 2 cores
(marked heavy: CI's second step runs them); `-m slow` runs the long one (every zoo model, 20000
calls per Python thread)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("stress_runtime.py")


def run_stress(pool_threads: int, *args: str, timeout: float, check: bool = False) -> str:
    """The script's output; `check`: plans in the checked mode (else the default path, which
    the tests' MINITC_CHECK=1 would otherwise replace)."""
    env = {**os.environ, "MINITC_NUM_THREADS": str(pool_threads), "PYTHONFAULTHANDLER": "1"}
    env["MINITC_CHECK"] = "1" if check else "0"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"stress run ended with status {done.returncode}:\n{tail}"
    assert "stress ok" in done.stdout, tail
    return done.stdout


@pytest.mark.heavy
def test_two_pool_threads_two_python_threads():
    run_stress(2, "--calls", "1200", "--zoo", "4", "--python-threads", "2", timeout=600)


@pytest.mark.heavy
def test_more_pool_threads_than_cores():
    threads = len(os.sched_getaffinity(0)) + 3
    run_stress(threads, "--calls", "1500", "--zoo", "4", "--seed", "1", timeout=600, check=True)


@pytest.mark.slow
def test_long_every_zoo_model():
    run_stress(2, "--calls", "20000", "--zoo", "all", "--python-threads", "2", timeout=3600)
