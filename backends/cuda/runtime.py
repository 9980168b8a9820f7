"""Compile a `GpuProgram` with NVRTC (through CuPy) and run it: `GpuFunction`.

    f = build_program(program, target)   # CUDA C -> cupy.RawModule, one RawKernel per launch
    y = f(x)                             # cupy in -> cupy out; torch CUDA in -> torch out;
                                         # numpy in -> copied to the GPU and back -> numpy out
    f(x, out=y)                          # or write into existing arrays
    f.time_ms(x, number=10, repeat=5)    # ms per call of the whole launch sequence, per repeat

Compiled modules are cached in-process by a hash of the source and options. CuPy picks the
architecture (`-arch`) of the visible GPU itself and refuses a second one, so `target.arch` is
not passed on; CuPy also adds `-ftz=true` (float32 denormals flush to zero, unlike numpy).
Kernels are launched on CuPy's current stream, or torch's current stream for torch tensors.
"""

from __future__ import annotations

import contextlib
import hashlib
import re

import numpy as np

from minitc.backends.cuda.codegen import render_program, sanitize
from minitc.backends.cuda.device import current_device, import_cupy
from minitc.backends.function import check_torch_dtype, is_torch, numpy_dtype, split_arguments
from minitc.errors import BuildError, DTypeError, LayoutError, ShapeError
from minitc.lowering.gpu import GpuProgram

OPTIONS = ("-std=c++17",)
_MODULES: dict = {}  # sha256 of (source, options) -> cupy.RawModule


def build_program(program: GpuProgram, target=None) -> "GpuFunction":
    """Render, compile and load every launch of `program` for the current GPU."""
    cupy = import_cupy()
    device = current_device()  # BuildError if no GPU is visible
    source = render_program(program)
    module = _module(cupy, source)
    kernels = []
    for launch in program.launches:
        name = sanitize(launch.name)
        try:
            kernel = module.get_function(name)  # compiles the module on first use
        except Exception as e:
            raise compile_error(e, source, program) from None
        limit = getattr(kernel, "max_threads_per_block", None)
        if isinstance(limit, int) and 0 < limit < launch.threads_per_block:
            raise BuildError(
                f"kernel {name} needs {launch.threads_per_block} threads per block but uses too many registers "
                f"for more than {limit} on {device.name}; use fewer threads per block or smaller register tiles"
            )
        kernels.append(kernel)
    return GpuFunction(program, source, kernels, target, device)


def module_key(source: str) -> str:
    return hashlib.sha256((source + "\0" + " ".join(OPTIONS)).encode()).hexdigest()


def has_module(key: str) -> bool:
    return key in _MODULES


def preload_module(key: str, cubin_path: str, kernel: str) -> bool:
    """Use the cubin at `cubin_path` (nvrtc.compile_cubin of a source whose module_key is
    `key`) when that source is next built here, instead of compiling it; False (and nothing
    kept) if CuPy cannot load it or it lacks `kernel`."""
    cupy = import_cupy()
    module = cupy.RawModule(path=cubin_path)
    try:
        module.get_function(kernel)  # loads the file now: it may be deleted afterwards
    except Exception:  # noqa: BLE001  (a cubin this driver cannot load: the source compiles as before)
        return False
    _MODULES[key] = module
    return True


def _module(cupy, source: str):
    key = module_key(source)
    module = _MODULES.get(key)
    if module is None:
        try:
            module = cupy.RawModule(code=source, options=OPTIONS, backend="nvrtc")
        except Exception as e:  # older CuPy versions compile eagerly
            raise compile_error(e, source, None) from None
        _MODULES[key] = module
    return module


def compile_error(e: Exception, source: str, program) -> BuildError:
    """A BuildError with the NVRTC log and the source lines it points at."""
    log = str(e).strip()
    lines = source.splitlines()
    quoted = []
    for n in dict.fromkeys(int(m) for m in re.findall(r"\((\d+)\): (?:error|catastrophic)", log)):
        if 1 <= n <= len(lines):
            quoted.append(f"  line {n}: {lines[n - 1].strip()}")
    what = f"the CUDA C of {program.kernel.name!r}" if program is not None else "the CUDA C"
    text = f"NVRTC failed to compile {what}:\n{log}"
    if quoted:
        text += "\nat:\n" + "\n".join(quoted[:5])
    return BuildError(text)


ALIGNMENT = 16  # bytes: a float4; CuPy and torch allocations are 256-byte aligned


class GpuFunction:
    """A compiled GPU program, called like `minitc.Function`: `f(*inputs)` returns new outputs,
    `f(*inputs, out=...)` or `f(*inputs, *outputs)` writes into given ones. Arrays may be CuPy
    arrays, torch CUDA tensors (shared through DLPack, no copies; torch in gives torch out), or
    numpy arrays / CPU torch tensors (copied to the GPU and back). Temporaries are allocated
    once per GpuFunction, so one GpuFunction must not run on two streams at once."""

    def __init__(self, program: GpuProgram, source: str, kernels: list, target=None, device=None):
        self.program, self.source, self.kernels = program, source, kernels
        self.target, self.device = target, device
        self._temps = None
        self._current = None  # the current device's id, read once per call

    @property
    def kernel(self):
        return self.program.kernel

    @property
    def name(self) -> str:
        return self.program.kernel.name

    def __repr__(self):
        k = self.program.kernel
        return f"<minitc.GpuFunction {k.name}({', '.join(b.name for b in k.params)}), {len(self.kernels)} launch(es)>"

    # -- calling ---------------------------------------------------------------------------------

    def __call__(self, *args, out=None):
        cupy = import_cupy()
        k = self.kernel
        inputs, given, host, use_torch = self._arguments(cupy, args, out)
        if given is None:
            outputs = [cupy.empty(b.shape, b.dtype) for b in k.outputs]
        else:
            outputs = [self._device_array(cupy, o, b, "output")[0] for o, b in zip(given, k.outputs)]
            self._check_overlap(inputs, outputs)
        with self._stream(cupy, args, given):
            self._launch(cupy, inputs, outputs)
            if given is not None:
                for o, dev in zip(given, outputs):
                    if not self._on_device(o):  # numpy or CPU torch: copy the result back
                        dev.get(out=o.numpy() if is_torch(o) else o)
                result = list(given)
            elif host:
                result = [o.get() for o in outputs]
                if use_torch:
                    import torch

                    result = [torch.from_numpy(o) for o in result]
            elif use_torch:
                import torch

                result = [torch.from_dlpack(o) for o in outputs]
            else:
                result = outputs
        return result[0] if len(result) == 1 else tuple(result)

    def time_ms(self, *args, number: int = 10, repeat: int = 5, warmup: int = 1) -> list:
        """Milliseconds per run of the whole launch sequence, one figure per repeat (each the
        mean of `number` back-to-back runs between two CUDA events), after `warmup` runs."""
        cupy = import_cupy()
        k = self.kernel
        inputs, given, _, _ = self._arguments(cupy, args, None)
        outputs = (
            [cupy.empty(b.shape, b.dtype) for b in k.outputs]
            if given is None
            else [self._device_array(cupy, o, b, "output")[0] for o, b in zip(given, k.outputs)]
        )
        with self._stream(cupy, args, given):
            stream = cupy.cuda.get_current_stream()
            for _ in range(max(0, warmup)):
                self._launch(cupy, inputs, outputs)
            times = []
            for _ in range(max(1, repeat)):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                for _ in range(max(1, number)):
                    self._launch(cupy, inputs, outputs)
                end.record(stream)
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, end) / max(1, number))
        return times

    def _launch(self, cupy, inputs: list, outputs: list) -> None:
        if self._temps is None:
            self._temps = [cupy.empty(b.shape, b.dtype) for b in self.program.temporaries]
        arrays = dict(zip(map(id, self.program.buffers), inputs + outputs + self._temps))
        for launch, kernel in zip(self.program.launches, self.kernels):
            args = tuple(arrays[id(b)] for b in launch.params)
            try:
                kernel(tuple(launch.grid), tuple(launch.block), args)
            except Exception as e:  # CUDADriverError: too many resources requested, ...
                raise BuildError(f"launching kernel {launch.name} of {self.name} failed: {e}") from None

    # -- arguments -------------------------------------------------------------------------------

    def _arguments(self, cupy, args, out):
        k = self.kernel
        args, given = split_arguments(k, args, out)
        self._current = cupy.cuda.Device().id  # arrays must live on the device the kernels run on
        converted = [self._device_array(cupy, a, b, "input") for a, b in zip(args, k.inputs)]
        inputs = [c[0] for c in converted]
        host = any(not c[1] for c in converted) and not any(c[1] for c in converted)
        use_torch = any(is_torch(a) for a in args)
        return inputs, given, host, use_torch

    def _on_device(self, x) -> bool:
        return (is_torch(x) and x.device.type == "cuda") or type(x).__module__.startswith("cupy")

    def _device_array(self, cupy, x, buf, role: str):
        """(a CuPy array for `x`, whether `x` already lived on the GPU), after the checks."""
        on_device = self._on_device(x)
        if is_torch(x):
            if x.device.type not in ("cuda", "cpu"):
                raise LayoutError(f"{role} {buf.name} is a torch tensor on {x.device}; use a CUDA or CPU tensor")
            check_torch_dtype(x, buf, role)
            if not x.is_contiguous():
                raise LayoutError(f"{role} {buf.name} is a non-contiguous torch tensor; call .contiguous() first")
            if on_device and x.device.index not in (None, self._current):
                raise LayoutError(f"{role} {buf.name} is on {x.device}, but the kernel runs on cuda:{self._current}")
            x = cupy.from_dlpack(x.detach()) if on_device else x.detach().numpy()
        elif on_device and x.device.id != self._current:
            raise LayoutError(f"{role} {buf.name} is on GPU {x.device.id}, but the kernel runs on GPU {self._current}")
        if not on_device and not isinstance(x, np.ndarray):
            raise LayoutError(
                f"{role} {buf.name} must be a CuPy array, a CUDA torch tensor or a numpy array, got {type(x).__name__}"
            )
        if tuple(x.shape) != buf.shape:
            raise ShapeError(f"{role} {buf.name} has shape {tuple(x.shape)}, expected {buf.shape}")
        if x.dtype != numpy_dtype(buf.dtype):
            got = x.dtype.name if x.dtype.isnative else f"{x.dtype.str} (non-native byte order)"
            raise DTypeError(
                f"{role} {buf.name} has dtype {got}, expected {buf.dtype}; convert with .astype('{buf.dtype}')"
            )
        if not x.flags.c_contiguous:
            fix = "cupy.ascontiguousarray(...)" if on_device else "np.ascontiguousarray(...)"
            raise LayoutError(f"{role} {buf.name} is not C-contiguous; pass {fix}")
        if not on_device:
            if role == "output" and not x.flags.writeable:
                raise LayoutError(f"output {buf.name} is read-only")
            x = cupy.asarray(x) if role == "input" else cupy.empty(x.shape, x.dtype)  # results copied back
        elif x.data.ptr % ALIGNMENT:  # vectorized (float4) accesses assume aligned buffers
            raise LayoutError(
                f"{role} {buf.name} starts at an address that is not {ALIGNMENT}-byte aligned (a view into another "
                "array?); pass a fresh copy (.copy())"
            )
        return x, on_device

    def _check_overlap(self, inputs: list, outputs: list) -> None:
        k = self.kernel
        for o, ob in zip(outputs, k.outputs):
            for i, ib in zip(inputs, k.inputs):
                a0, b0 = o.data.ptr, i.data.ptr
                if a0 < b0 + i.nbytes and b0 < a0 + o.nbytes:
                    raise LayoutError(f"output {ob.name} overlaps input {ib.name}; kernels assume no aliasing")

    def _stream(self, cupy, args, given):
        """torch's current stream when torch CUDA tensors take part, else CuPy's current one."""
        tensors = [a for a in list(args) + list(given or []) if is_torch(a) and a.device.type == "cuda"]
        if tensors:
            import torch

            return cupy.cuda.ExternalStream(torch.cuda.current_stream(tensors[0].device).cuda_stream)
        return contextlib.nullcontext()  # CuPy's current stream, as it is
