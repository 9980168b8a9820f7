"""benchmarks/host_load.py: the CPU time of processes outside this process tree, which doubles
a 2-thread kernel's time on a 2-core host; and tlm_report's line naming where it was taken."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from minitc.benchmarks import host_load
from minitc.benchmarks.tlm_report import _under_load

pytestmark = pytest.mark.skipif(host_load._processes() is None, reason="no /proc")


def test_a_process_outside_the_tree_counts_and_a_child_does_not():
    assert host_load._descendants({1: (0, 0.0), 5: (1, 0.0), 6: (5, 0.0), 7: (1, 0.0)}, 5) == {5, 6}
    spin = "import time; t = time.time()\nwhile time.time() - t < 1.5: pass"
    # the shell exits at once, so the spinning python is re-parented outside this tree
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{spin}" &'], check=True)
    with host_load.ForeignLoad() as load:
        time.sleep(1.0)
    assert load.cpus >= 0.5


def test_the_report_names_measurements_under_load():
    rows = [{"workload": "bmm-bert", "foreign_cpus": {"TLM search": 0.05, "TLM@10": 0.97, "side by side": None}}]
    assert _under_load(rows) == [
        "",
        "measured under someone else's load (CPUs):",
        "  bmm-bert: other processes took CPUs during TLM@10 0.97",
    ]
    assert _under_load([{"workload": "x", "foreign_cpus": {"TLM search": 0.1}}]) == []
