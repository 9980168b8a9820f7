"""The runtime's workspace cache (backends/llvm/workspace_ir.py): kernels' heap buffers are
reused from call to call, never shared by two kernels running at once."""

import ctypes
import threading

import numpy as np

import minitc as tc
from minitc.backends.llvm import runtime
from minitc.backends.llvm.workspace_ir import SLOTS


def _entry_points():
    symbols = runtime.runtime_symbols()
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(symbols["minitc_workspace_alloc"])
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(symbols["minitc_workspace_free"])
    return alloc, free


def test_a_freed_buffer_is_reused_and_a_held_one_is_not():
    alloc, free = _entry_points()
    runtime.release_workspace()
    a = alloc(1 << 20)
    assert a and a % 64 == 0
    b = alloc(1 << 20)  # a is held: another buffer
    assert b and b != a
    free(a)
    c = alloc(4096)  # the idle one
    assert c == a
    free(b)
    free(c)
    runtime.release_workspace()


def test_the_smallest_idle_buffer_that_fits_is_taken():
    alloc, free = _entry_points()
    runtime.release_workspace()
    small, large = alloc(64 * 1024), alloc(4 << 20)
    free(small)
    free(large)
    assert alloc(32 * 1024) == small
    assert alloc(2 << 20) == large
    free(small)
    free(large)
    runtime.release_workspace()


def test_more_buffers_than_slots_fall_back_to_the_heap():
    alloc, free = _entry_points()
    held = [alloc(4096) for _ in range(SLOTS + 4)]
    assert all(p and p % 64 == 0 for p in held) and len(set(held)) == len(held)
    for p in held:
        ctypes.memset(p, 1, 4096)  # every buffer is writable memory
        free(p)
    runtime.release_workspace()


def test_kernels_running_at_once_each_get_their_own_buffer():
    # a Winograd convolution's transformed input and channel products are heap buffers
    X = tc.placeholder((1, 2, 40, 40, 8), "float32", name="X")
    U = tc.placeholder((4, 4, 2, 2, 8, 8), "float32", name="U")
    f = tc.build(tc.ops.conv2d_winograd_nchwc(X, U, padding=1))
    assert "@minitc_workspace_alloc" in f.llvm_ir
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(4):
        x = rng.standard_normal((1, 16, 40, 40), dtype=np.float32)
        w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
        expected = tc.ops.reference.to_nchwc(tc.ops.reference.conv2d(x, w, padding=1), 8)
        cases.append((tc.ops.reference.to_nchwc(x, 8), tc.ops.winograd_weights(w, 8, 8), expected))
    wrong = []

    def run(x, u, expected):
        for _ in range(20):
            if not np.allclose(f(x, u), expected, rtol=1e-4, atol=1e-4):
                wrong.append(1)

    threads = [threading.Thread(target=run, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
