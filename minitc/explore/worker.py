"""What the explorer does with the code typed into the page. Runs only inside a sandboxed child
process (sandbox.py), one job per process: execute the expression and schedule code, then
render a view (loop nest, LLVM IR, assembly, CUDA C), write schedule code, or compile and time
the kernel (measure.py).

    run_job("view", {"expression": "...", "schedule": "...", "view": "loops"})
    -> {"ok": True, "text": "def matmul_kernel(...", "seconds": 0.02}
    -> {"ok": False, "error": {"kind": "ScheduleError", "message": "...", "part": "schedule", "line": 4}}

A mistake in the user's code (a syntax error, an illegal schedule, a NameError) comes back as
an error with its message and the line of the user's code it came from, never as a traceback.
"""

from __future__ import annotations

import builtins
import time
import traceback
from dataclasses import dataclass

import numpy as np

import minitc as tc
from minitc.explore import ops
from minitc.explore.schedule_code import naive_code, parameter_comments, trace_code
from minitc.ops.calls import OpCall
from minitc.te import ComputeOp
from minitc.templates import template_schedule

MAX_TEXT = 2_000_000  # characters of a view sent back to the page
PARTS = ("expression", "schedule")


class UserCodeError(Exception):
    """A problem with the code typed into the page that is not an exception of minitc's."""

    def __init__(self, kind: str, message: str, part: str | None = None, line: int | None = None):
        super().__init__(message)
        self.kind, self.part, self.line = kind, part, line


@dataclass
class Program:
    namespace: dict  # the variables of the expression (and schedule) code
    output: tc.Tensor
    output_var: str
    call: OpCall | None  # the operator call, when the expression is the page's code for it
    schedule: tc.Schedule | None = None


def run_source(source: str, part: str, namespace: dict) -> None:
    try:
        code = compile(source, f"<{part}>", "exec")
    except SyntaxError as e:
        raise UserCodeError("SyntaxError", e.msg, part, e.lineno) from None
    exec(code, namespace)


def output_variable(namespace: dict) -> str:
    """The last variable the expression code assigned a computed tensor to."""
    found = [n for n, v in namespace.items() if isinstance(v, tc.Tensor) and isinstance(v.op, ComputeOp)]
    if not found:
        raise UserCodeError(
            "ExpressionError",
            "the expression code defines no computed tensor; end it with e.g. "
            "C = tc.compute((M, N), lambda i, j: A[i, j] * 2, name='C')",
            "expression",
        )
    return found[-1]


def load(payload: dict, with_schedule: bool = True) -> Program:
    """Run the expression code (and the schedule code, which must set `s`)."""
    expression = payload.get("expression") or ""
    ns = {"tc": tc, "np": np, "__name__": "__explore__", "__builtins__": builtins}
    run_source(expression, "expression", ns)
    var = output_variable(ns)
    program = Program(ns, ns[var], var, _op_call(payload, expression))
    if with_schedule:
        run_source(payload.get("schedule") or "", "schedule", ns)
        s = ns.get("s")
        if not isinstance(s, tc.Schedule):
            got = "nothing" if s is None else f"a {type(s).__name__}"
            raise UserCodeError(
                "ScheduleCodeError",
                f"the schedule code must set s to a tc.Schedule (s = tc.Schedule({var})); got {got}",
                "schedule",
            )
        program.schedule = s
    return program


def _op_call(payload: dict, expression: str):
    """The OpCall the page chose, if the expression is still the code generated for it."""
    op = payload.get("op")
    if not op:
        return None
    call = ops.op_call(op, payload.get("shape") or "", payload.get("options") or "")
    return call if ops.expression_code(call).strip() == expression.strip() else None


def error_info(exc: BaseException) -> dict:
    """Kind, message and the line of the user's code (the innermost frame in it)."""
    part = line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in ("<expression>", "<schedule>"):
            part, line = frame.filename[1:-1], frame.lineno
    if isinstance(exc, UserCodeError):
        return {"kind": exc.kind, "message": str(exc), "part": exc.part or part, "line": exc.line or line}
    if isinstance(exc, SystemExit):
        message = "the code called exit(); the explorer runs the code, it does not end it"
    elif isinstance(exc, MemoryError):
        message = "out of memory: the job passed the explorer's memory limit; use smaller shapes"
    else:
        message = str(exc) or type(exc).__name__
    return {"kind": type(exc).__name__, "message": message, "part": part, "line": line}


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n... ({len(text) - MAX_TEXT:,} more characters not shown)\n"


# ---------------------------------------------------------------------------------------------
# jobs


def job_ping(payload: dict) -> dict:
    return {}


def job_op(payload: dict) -> dict:
    """The expression code (and the naive schedule) for an operator, shape and options."""
    call = ops.op_call(payload.get("op") or "", payload.get("shape") or "", payload.get("options") or "")
    code = ops.expression_code(call)
    program = load({"expression": code}, with_schedule=False)
    return {"expression": code, "schedule": naive_code(program.output, program.output_var), "label": call.label()}


def job_schedule(payload: dict) -> dict:
    """Schedule code for the expression: "naive" (with hints) or the "template" for a target."""
    program = load(payload, with_schedule=False)
    if payload.get("kind") == "template":
        target = payload.get("target") or "llvm"
        s = template_schedule(program.output, target)
        code = trace_code(s, program.output_var, program.namespace)
        return {"schedule": parameter_comments(program.output, target) + code}
    return {"schedule": naive_code(program.output, program.output_var)}


VIEWS = ("loops", "llvm", "asm", "cuda")


def job_view(payload: dict) -> dict:
    view = payload.get("view") or "loops"
    if view not in VIEWS:
        raise UserCodeError("RequestError", f"unknown view {view!r}; views: {', '.join(VIEWS)}")
    s = load(payload).schedule
    start = time.perf_counter()
    if view == "loops":
        text = str(tc.lower(s))
    elif view == "cuda":
        text = tc.codegen(s, "cuda")
    else:
        f = tc.build(s, payload.get("target") or "llvm")
        text = f.llvm_ir if view == "llvm" else f.asm
    return {"text": _clip(text), "seconds": time.perf_counter() - start, "steps": len(s.trace)}


def job_run(payload: dict) -> dict:
    from minitc.explore.measure import run_kernel

    return run_kernel(load(payload), payload)


def job_machine(payload: dict) -> dict:
    from minitc.benchmarks.machine import measure_machine

    threads = tc.get_num_threads()
    m = measure_machine(threads=(threads,))
    return {
        "cpu": m.cpu,
        "llvm_cpu": m.llvm_cpu,
        "threads": threads,
        "fma_gflops": m.fma_gflops[threads],
        "triad_gbps": m.triad_gbps[threads],
    }


JOBS = {
    "ping": job_ping,
    "op": job_op,
    "schedule": job_schedule,
    "view": job_view,
    "run": job_run,
    "machine": job_machine,
}


def run_job(name: str, payload: dict) -> dict:
    """Run one job; its result with ok=True, or ok=False and the error."""
    try:
        return {"ok": True, **JOBS[name](payload)}
    except BaseException as e:  # noqa: BLE001 - whatever the user's code raises (exit() too) is shown on the page
        return {"ok": False, "error": error_info(e)}
