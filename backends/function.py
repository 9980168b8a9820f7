"""`Function`: a compiled kernel as a Python callable that checks its arguments.

The generated code trusts its arguments completely (no bounds checks, no aliasing), so every
check happens here, before the call: count, shape, dtype, contiguity, and that outputs do not
overlap inputs.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from minitc import dtypes
from minitc.errors import DTypeError, LayoutError, ShapeError
from minitc.ir import Kernel


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


@functools.lru_cache(maxsize=None)
def numpy_dtype(name: str) -> np.dtype:
    return np.dtype(dtypes.check(name))  # minitc.dtypes registers ml_dtypes' "bfloat16"


@functools.lru_cache(maxsize=None)
def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def check_torch_dtype(x, buf, role: str) -> None:
    """Raise DTypeError unless torch tensor `x` has the dtype of `buf`. Checked before any
    conversion, because torch has dtypes (bfloat16, ...) that numpy and CuPy cannot represent."""
    if x.dtype != torch_dtype(buf.dtype):
        got = str(x.dtype).removeprefix("torch.")
        raise DTypeError(
            f"{role} {buf.name} is a torch tensor of dtype {got}, expected {buf.dtype}; "
            f"convert with .to(torch.{buf.dtype})"
        )


def _torch_as_array(x, buf, role: str) -> np.ndarray:
    """The numpy view of a CPU torch tensor, after the checks."""
    if x.device.type != "cpu":
        raise LayoutError(f"{role} {buf.name} is a torch tensor on {x.device}; this kernel runs on the CPU")
    check_torch_dtype(x, buf, role)
    if not x.is_contiguous():
        raise LayoutError(f"{role} {buf.name} is a non-contiguous torch tensor; call .contiguous() first")
    if buf.dtype == "bfloat16":  # torch's .numpy() refuses bfloat16: share the bits instead
        import torch

        return x.detach().view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
    return x.detach().numpy()


def to_torch(array: np.ndarray):
    """A CPU torch tensor sharing `array`'s memory (ml_dtypes' bfloat16 included)."""
    import torch

    if array.dtype == numpy_dtype("bfloat16"):
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _as_array(x, buf, role: str) -> np.ndarray:
    if is_torch(x):
        x = _torch_as_array(x, buf, role)
    if not isinstance(x, np.ndarray):
        raise LayoutError(f"{role} {buf.name} must be a numpy array or a CPU torch tensor, got {type(x).__name__}")
    if x.shape != buf.shape:
        raise ShapeError(f"{role} {buf.name} has shape {x.shape}, expected {buf.shape}")
    if x.dtype != numpy_dtype(buf.dtype):  # not x.dtype.name: that costs ~4 us per argument
        got = x.dtype.name if x.dtype.isnative else f"{x.dtype.str} (non-native byte order)"
        raise DTypeError(
            f"{role} {buf.name} has dtype {got}, expected {buf.dtype}; convert with .astype('{buf.dtype}')"
        )
    if not x.flags.c_contiguous:
        raise LayoutError(f"{role} {buf.name} is not C-contiguous; pass np.ascontiguousarray(...)")
    return x


def split_arguments(kernel: Kernel, args: tuple, out) -> tuple:
    """(inputs, given outputs or None) of a call written `f(*inputs)`, `f(*inputs, *outputs)`
    or `f(*inputs, out=...)`, after checking how many arrays there are."""
    n_in, n_out = kernel.num_inputs, len(kernel.outputs)
    if out is None and len(args) == n_in + n_out:
        args, out = args[:n_in], args[n_in:]
    if len(args) != n_in:
        names = ", ".join(b.name for b in kernel.inputs)
        raise ShapeError(f"{kernel.name} takes {n_in} input(s) ({names}), got {len(args)}")
    if out is None:
        return args, None
    given = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(given) != n_out:
        raise ShapeError(f"{kernel.name} has {n_out} output(s), got {len(given)} in out=")
    return args, given


class HostCallable:
    """The calling conventions of a kernel run on host arrays: `f(*inputs)` allocates and
    returns the outputs, `f(*inputs, out=...)` / `f(*inputs, *outputs)` writes into existing
    arrays. Inputs may be numpy arrays or contiguous CPU torch tensors; torch inputs give torch
    outputs. Subclasses set `self.kernel` and define `_run(arrays)`."""

    kernel: Kernel

    def _new_output(self, buf):
        return np.empty(buf.shape, buf.dtype)

    def _run(self, arrays: list) -> None:
        raise NotImplementedError

    def run_unchecked(self, arrays: list) -> None:
        """Run on `arrays` (inputs, then outputs) without the checks of a call: for a caller
        whose calls were checked once and whose shapes, dtypes and buffers cannot change since
        (a model's static plan). A wrong array here is memory corruption, not an error."""
        self._run(arrays)

    def bind(self, arrays: list):
        """A call with no arguments that runs the kernel on `arrays` (inputs, then outputs),
        unchecked as run_unchecked: for arrays that stay where they are for as long as the
        call is kept (a model's constants and arena buffers)."""
        return functools.partial(self._run, list(arrays))

    @property
    def name(self) -> str:
        return self.kernel.name

    def __call__(self, *args, out=None):
        k = self.kernel
        args, given = split_arguments(k, args, out)
        use_torch = any(is_torch(a) for a in args)
        inputs = [_as_array(a, b, "input") for a, b in zip(args, k.inputs)]
        if given is None:
            outputs = [self._new_output(b) for b in k.outputs]
        else:
            outputs = [_as_array(o, b, "output") for o, b in zip(given, k.outputs)]
            for o, b in zip(outputs, k.outputs):
                if not o.flags.writeable:
                    raise LayoutError(f"output {b.name} is read-only")
                for i, ib in zip(inputs, k.inputs):
                    if np.may_share_memory(o, i):
                        raise LayoutError(f"output {b.name} overlaps input {ib.name}; kernels assume no aliasing")
        self._run(inputs + outputs)
        if given is not None:
            result = given
        elif use_torch:
            result = [to_torch(o) for o in outputs]
        else:
            result = outputs
        return result[0] if len(result) == 1 else tuple(result)


@dataclass(frozen=True)
class BoundCall:
    """A compiled kernel (`void f(void*...)` at `address`) with its arguments' addresses fixed;
    calling it runs the kernel through its ctypes function `cfunc` (a model plan chains them:
    backends/llvm/step_chain.py)."""

    address: int
    args: tuple
    cfunc: object

    def __call__(self) -> None:
        self.cfunc(*self.args)


class Function(HostCallable):
    """A kernel compiled for the CPU (see HostCallable for how to call it)."""

    def __init__(self, kernel: Kernel, compiled):
        self.kernel = kernel
        self.compiled = compiled
        n = len(kernel.params)
        self._cfunc = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n))(compiled.address)

    @property
    def llvm_ir(self) -> str:
        return self.compiled.llvm_ir

    @property
    def asm(self) -> str:
        return self.compiled.asm

    def _run(self, arrays: list) -> None:
        self._cfunc(*_addresses(arrays))

    def bind(self, arrays: list) -> BoundCall:
        # the addresses taken once: a model step then costs one ctypes call, or none in a chain
        return BoundCall(self.compiled.address, tuple(_addresses(arrays)), self._cfunc)

    def __repr__(self):
        return f"<minitc.Function {self.kernel.name}({', '.join(b.name for b in self.kernel.params)})>"


def _addresses(arrays: list) -> list:
    return [a.__array_interface__["data"][0] for a in arrays]
