"""Worker processes (minitc/autotune/worker.py): a worker ends with its parent, even mid-job."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to see the worker")

PARENT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import sleeper  # registers the "sleep" handler
    from minitc.autotune.worker import Worker

    worker = Worker(env={"PYTHONPATH": os.pathsep.join([sys.argv[1], os.environ.get("PYTHONPATH", "")])})
    worker.post("sleep", 120)
    print(worker.proc.pid, flush=True)
    time.sleep(120)
    """
)


def test_a_worker_mid_job_ends_when_its_parent_is_killed(tmp_path):
    (tmp_path / "sleeper.py").write_text(
        "import time\nfrom minitc.autotune.worker import register_handler\n\n\n"
        "def sleep(seconds):\n    time.sleep(seconds)\n\n\nregister_handler('sleep', sleep)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        time.sleep(1.0)  # the worker is inside its 120 s job
        assert os.path.exists(f"/proc/{worker}")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{worker}") and _state(worker) != "Z" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{worker}") or _state(worker) == "Z", "the worker outlived its parent"
    finally:
        parent.kill()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
