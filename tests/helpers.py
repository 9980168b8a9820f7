"""Shared test helpers: golden files, trace round trips and interpreter checks."""
from pathlib import Path

import numpy as np

import minitc as tc
from minitc.interp import interpret
from minitc.verify import verify

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.txt"
    if update or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with --update-golden if the change is intended"


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
