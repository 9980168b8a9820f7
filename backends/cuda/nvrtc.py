"""CUDA C to a cubin with NVRTC, without a GPU: what the tuner's builder processes do, so that
the measuring process only loads each candidate (runtime.preload_module).

    cubin = compile_cubin(source, "sm_90")   # bytes, or None where NVRTC is not installed

The options are those CuPy's RawModule gives NVRTC (runtime.OPTIONS, `-ftz=true`,
`--device-as-default-execution-space`, `-arch=sm_XX`), so a loaded cubin is the program the
measuring process would have compiled itself. NVRTC comes with CuPy's wheels
(`cupy_backends.cuda.libs.nvrtc`); it needs no driver.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CUPY_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")
CACHE_ENV = "MINITC_CUBIN_CACHE"  # a folder of cubins by source, shared by a builder's processes


def _nvrtc():
    """CuPy's NVRTC binding, or None where CuPy or the NVRTC library is missing."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()  # loads the library
    except Exception:  # noqa: BLE001  (ImportError, or the library not found: no cubin here)
        return None
    return nvrtc


def compile_cubin(source: str, arch: str, options: tuple = ()) -> bytes | None:
    """The cubin of `source` for `arch` ("sm_90"); None where NVRTC is not installed or does
    not know the architecture (the measuring process then compiles the source itself). A
    program NVRTC rejects is a BuildError with its log and the lines it points at. With
    CACHE_ENV set (a LocalBuilder's processes share a folder), a source compiled before is read
    back: the final re-measurement builds the best programs again."""
    nvrtc = _nvrtc()
    number = int(arch.removeprefix("sm_").rstrip("a") or 0)
    if nvrtc is None or number not in nvrtc.getSupportedArchs():
        return None
    from minitc.backends.cuda.runtime import OPTIONS, compile_error

    flags = [*OPTIONS, *CUPY_OPTIONS, f"-arch={arch}", *options]
    cached = _cache_path(source, flags, nvrtc.getVersion())
    if cached is not None and cached.exists():
        return cached.read_bytes()
    program = nvrtc.createProgram(source, "minitc.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(program, flags)
        except nvrtc.NVRTCError as e:
            raise compile_error(RuntimeError(f"{e}\n{nvrtc.getProgramLog(program)}"), source, None) from None
        cubin = nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    if cached is not None:
        cached.parent.mkdir(exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}")
        partial.write_bytes(cubin)
        partial.replace(cached)  # whole or absent, for the other processes
    return cubin


def _cache_path(source: str, flags: list, version) -> Path | None:
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return None
    key = hashlib.sha256("\0".join([source, *flags, str(version)]).encode()).hexdigest()
    return Path(folder) / f"{key}.cubin"
