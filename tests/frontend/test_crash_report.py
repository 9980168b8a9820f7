"""A fault in generated code never takes the process down silently (issue 55): the runtime's
handler (backends/llvm/fault_ir.py) names the kernel and model that were running, and the pool's
workers leave the fault signals unblocked, so that it and faulthandler run on a worker too.
Each crash happens in a subprocess."""

import os
import subprocess
import sys
import textwrap

import pytest

CRASH_IN_A_MODEL = """
import dataclasses
import torch
from torch import nn
import minitc as tc

class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        hidden = [m for _ in range(2) for m in (nn.Linear(256, 256), nn.ReLU())]
        self.net = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), *hidden, nn.Linear(256, 8))

    def forward(self, x):
        return self.net(x)

x = torch.randn(64, 16)
compiled = tc.compile(Mlp().eval(), (x,), db=False)
compiled(x)  # binds the kernels of later runs to their buffers' addresses
plan = compiled.plan
k = next(k for k, (kind, node, _) in enumerate(plan._bound) if kind == "bound" and node.name == "linear_1")
kind, node, call = plan._bound[k]
plan._bound[k] = (kind, node, dataclasses.replace(call, args=(0x81,) * len(call.args)))  # a stray pointer
plan._chained = plan._chain(plan._bound)  # linear_1 and linear_2 run as one native call
assert any(kind == "chain" for kind, _, _ in plan._chained)
print("calling", flush=True)
compiled(x)
print("survived", flush=True)
"""

# A task that faults on a pool worker: task 0 keeps the launching thread busy for ~0.2 s while
# task 1, claimed by the worker, reads address 0x81.
CRASH_ON_A_WORKER = """
import ctypes
import llvmlite.binding as llvm
from minitc.backends.llvm.runtime import ensure_runtime, running_note, set_num_threads

ensure_runtime()
set_num_threads(2)
ir = '''
declare void @minitc_parallel_launch(ptr, ptr, i64)
declare void @llvm.x86.sse2.pause()
define internal void @task(ptr %c, i64 %t, i64 %n) {
entry:
  %first = icmp eq i64 %t, 0
  br i1 %first, label %spin, label %fault
spin:
  %i = phi i64 [0, %entry], [%i1, %spin]
  call void @llvm.x86.sse2.pause()
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, 20000000
  br i1 %more, label %spin, label %done
fault:
  %v = load volatile <16 x float>, ptr inttoptr (i64 129 to ptr), align 4
  store volatile <16 x float> %v, ptr %c, align 4
  br label %done
done:
  ret void
}
define void @run(ptr %c) {
  call void @minitc_parallel_launch(ptr @task, ptr %c, i64 2)
  ret void
}
'''
mod = llvm.parse_assembly(ir)
mod.triple = llvm.get_process_triple()
engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_triple(mod.triple).create_target_machine())
engine.finalize_object()
note = ctypes.create_string_buffer(b"kernel faulty_task of a test")
running_note().value = ctypes.addressof(note)
space = ctypes.create_string_buffer(64)
print("calling", flush=True)
ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address("run"))(ctypes.addressof(space))
print("survived", flush=True)
"""


def crash(script: str, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "MINITC_NUM_THREADS": "2", "MINITC_CHECK": "0", **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=environment, capture_output=True, text=True, timeout=300
    )


def test_a_fault_in_a_model_names_the_kernel_and_the_model():
    pytest.importorskip("torch")
    done = crash(CRASH_IN_A_MODEL, PYTHONFAULTHANDLER="1")
    assert "calling" in done.stdout and "survived" not in done.stdout, done.stdout + done.stderr
    assert done.returncode == -11, done.stderr  # SIGSEGV, not caught and ignored
    assert "minitc: fatal signal 11 in this process; running: kernel " in done.stderr, done.stderr
    assert "(node linear_1, step 2 of 4) of model Mlp" in done.stderr, done.stderr
    assert "Fatal Python error: Segmentation fault" in done.stderr  # faulthandler still runs after it


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the task's spin uses x86's pause")
def test_a_fault_on_a_pool_worker_is_reported():
    """Before the workers unblocked the fault signals, the kernel killed the process at once:
    neither this report nor faulthandler's printed anything."""
    done = crash(CRASH_ON_A_WORKER, PYTHONFAULTHANDLER="1")
    assert "calling" in done.stdout and "survived" not in done.stdout, done.stdout + done.stderr
    assert done.returncode == -11, done.stderr
    assert "minitc: fatal signal 11 in this process; running: kernel faulty_task of a test" in done.stderr, done.stderr
    assert "Fatal Python error: Segmentation fault" in done.stderr, done.stderr
    assert "Current thread" not in done.stderr  # faulthandler: the faulting thread runs no Python


def test_the_report_can_be_turned_off():
    pytest.importorskip("torch")
    done = crash(CRASH_IN_A_MODEL, MINITC_FAULT_REPORT="0")
    assert done.returncode == -11 and "minitc: fatal signal" not in done.stderr, done.stderr
