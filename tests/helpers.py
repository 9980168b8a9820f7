"""Shared test helpers: golden files, templates with explicit sizes, trace round trips,
interpreter checks and a hand-built kernel for the LLVM backend tests."""

from pathlib import Path

import numpy as np

import minitc as tc
from minitc.expr import Var, maximum
from minitc.interp import interpret
from minitc.ir import Buffer, For, Kernel, Load, Store
from minitc.verify import verify

GOLDEN = Path(__file__).parent / "golden"
HOSTS = Path(__file__).parent / "fixtures" / "hosts"  # recorded machines: python -m minitc.target --record


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.txt"
    if update or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with --update-golden if the change is intended"


def experiment(name: str, folder: str = "experiments"):
    """The script <folder>/<name>.py of the repository as a module (experiments/ and docs/ are
    not packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_record(fixture: str) -> dict:
    """A recorded machine of tests/fixtures/hosts (its cpuinfo, caches, LLVM's name, calibration)."""
    import json

    return json.loads((HOSTS / fixture).read_text())


def recorded_target(fixture: str, cores: int = 2):
    """An LLVM target for a recorded machine, with that machine's description (not this host's)."""
    from minitc.target import hardware, parse_target

    hw = hardware.from_record(host_record(fixture))
    target = parse_target(f"llvm -mcpu={hw.core} -num-cores={cores}")
    target.__dict__["hardware"] = hw  # a cached_property: set its cache
    return target


def table_target(cpu: str, extra: str = "", cores: int = 2):
    """`llvm -mcpu=CPU` described by the table of cpu names (target/cpus.py) on every host. A
    named cpu that is the host's own would otherwise be described by this host's calibration,
    so a test of what a description implies would follow the machine it runs on."""
    from minitc.target import hardware, parse_target

    target = parse_target(f"llvm -mcpu={cpu}{extra} -num-cores={cores}")
    target.__dict__["hardware"] = hardware.from_table(target.cpu, target.vector_bits, target.vector_registers)
    return target


def model_graph(model, inputs, target: str):
    """The graph `tc.compile(model, inputs, target=target)` runs, without building its kernels
    (which a host that lacks the target's features could not)."""
    from minitc.frontend import passes
    from minitc.frontend.importer import import_model

    return passes.run_all(import_model(model, tuple(inputs)), target, "auto")


def template_with(out, target, **params) -> tc.Schedule:
    """The template `tc.build` takes for `out` (templates.template_tag) with its defaults for
    `target` (a string or a target), overridden by `params`."""
    from minitc.target import parse_target
    from minitc.templates import DEFAULTS, TEMPLATES, template_tag

    target = parse_target(target)
    s = tc.Schedule(out)
    name = s.state.outputs[0]
    tag = template_tag(s, name)
    TEMPLATES[tag](s, name, target, **dict(DEFAULTS[tag](s, name, target), **params))
    return s


def roundtrip(s: tc.Schedule) -> tc.ir.Kernel:
    """Lower `s`, replay its trace (through JSON) on a fresh schedule and check both give the
    same IR; return the kernel."""
    kernel = tc.lower(s)
    verify(kernel)
    trace = tc.Trace.from_json(s.trace.to_json())
    assert trace == s.trace
    again = tc.Schedule(s.outputs).replay(trace)
    assert str(tc.lower(again)) == str(kernel)
    return kernel


def random_inputs(kernel, seed=0):
    rng = np.random.default_rng(seed)
    arrays = []
    for b in kernel.inputs:
        if b.dtype.startswith("float"):
            arrays.append(rng.standard_normal(b.shape).astype(b.dtype))
        else:
            arrays.append(rng.integers(-5, 6, b.shape).astype(b.dtype))
    return arrays


def interpret_outputs(kernel, inputs):
    outputs = [np.zeros(b.shape, b.dtype) for b in kernel.outputs]
    interpret(kernel, list(inputs) + outputs)
    return outputs


def relu_kernel(rows=16, cols=64, lanes=8):
    """Y = max(X * A + B, 0) over a rows x cols float32 matrix, columns in vectorized chunks of
    `lanes` (the LLVM backend tests, test_llvm_codegen.py and test_llvm_jit.py)."""
    X, Y = Buffer("X", (rows, cols), "float32"), Buffer("Y", (rows, cols), "float32")
    A, B = Buffer("A", (cols,), "float32"), Buffer("B", (cols,), "float32")
    i, jo, ji = Var("i"), Var("jo"), Var("ji")
    j = jo * lanes + ji
    value = maximum(Load(X, (i, j)) * Load(A, (j,)) + Load(B, (j,)), 0.0)
    inner = For(ji, lanes, "vectorized", Store(Y, (i, j), value))
    body = For(i, rows, "serial", For(jo, cols // lanes, "serial", inner))
    return Kernel("relu-affine", [X, A, B, Y], 3, body)


LOW_DTYPES = ["bfloat16", "float16", "int8", "uint8"]


def lowp_sample(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Values of `dtype` for the low-precision tests: int8 in [-100, 100), uint8 in [0, 250),
    floats standard normal rounded to the dtype."""
    rng = np.random.default_rng(seed)
    if dtype == "int8":
        return rng.integers(-100, 100, shape).astype(dtype)
    if dtype == "uint8":
        return rng.integers(0, 250, shape).astype(dtype)
    if dtype in ("int32", "int64"):
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)
