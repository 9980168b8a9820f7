"""Running a graph: a static plan of steps over numpy buffers.

`Plan(graph, kernels)` lists one step per node in order: a minitc kernel writing a fresh
buffer, a view (the same buffer, another shape), or a `torch` node calling its ATen operator
on torch tensors that share the buffers (torch.from_numpy / .numpy(): no copies). Constants
stay numpy arrays for the life of the plan. Kernels write their intermediate results into one
arena planned by liveness (memory.py); `plan.arena_bytes` is its size. A torch node's result
that is a view of an arena buffer is copied out of it (the arena does not plan for aliases).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import time
import types

import numpy as np

from minitc.autotune.cost_model import torch_threads
from minitc.backends.function import BoundCall
from minitc.backends.llvm.runtime import running_note
from minitc.backends.llvm.step_chain import StepChain
from minitc.errors import BuildError, DTypeError, ShapeError
from minitc.frontend.checked import GUARD_BYTES, Checker
from minitc.frontend.checked import enabled as checked_mode
from minitc.frontend.importer import Ref, SymArg
from minitc.frontend.memory import nbytes, plan_arena


def _torch_args(tree, values, symbols=None):
    import torch

    if isinstance(tree, Ref):
        v = values[str(tree)]
        return torch.from_numpy(v) if isinstance(v, np.ndarray) else v
    if isinstance(tree, SymArg):
        return tree.value(symbols or {})
    if isinstance(tree, dict):
        return {k: _torch_args(v, values, symbols) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_torch_args(v, values, symbols) for v in tree)
    return tree


def _from_torch(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().contiguous().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_from_torch(v) for v in value)
    return value


def call_torch(aten, values: dict, symbols: dict | None = None):
    """A `torch` node's ATen call (target, args, kwargs) on the arrays in `values`, its result
    as numpy arrays (shared with torch's tensors where it can). `symbols`: the dynamic sizes of
    this call, for the integer arguments that depend on them."""
    target, args, kwargs = aten
    symbols = symbols or {}
    return _from_torch(target(*_torch_args(args, values, symbols), **_torch_args(kwargs, values, symbols)))


@contextlib.contextmanager
def one_torch_thread(active: bool):
    """Run torch's part of a plan on one thread: after a parallel call torch's OpenMP workers
    spin for milliseconds and would take the cores from the minitc kernel that follows, so the
    two thread pools must not both be live; the fallback operators are the small part."""
    with torch_threads(1 if active else 0):
        yield


class Plan:
    """The steps of a graph, given a compiled kernel for each node that has one."""

    def __init__(self, graph, kernels: dict):
        self.graph = graph
        self.checker = Checker(self) if checked_mode() else None  # MINITC_CHECK (checked.py)
        self.offsets, self.arena_bytes = plan_arena(graph, GUARD_BYTES if self.checker else 0)
        self._arena = None  # allocated on the first run, then reused (a plan runs one call at a time)
        self._views: dict = {}  # node name -> its array in the arena
        self._bound = None  # the steps of later runs, once a first run checked every call (_bind)
        self._chained = None  # the same with runs of bound calls as one native call (_chain)
        self._static: dict = {}
        self._notes = None  # RunningNotes, made by the first run
        self.label = "a compiled model"  # what a fault's report calls the model (CompiledModel names it)
        self.steps = []
        for node in graph.nodes:
            if node.op == "view":
                self.steps.append(("view", node, None))
            elif node.op == "torch":
                self.steps.append(("torch", node, node.aten))
            else:
                self.steps.append(("kernel", node, kernels[node.name]))
        # what runs: the steps, or in the checked mode the same with every kernel call checked
        self._run_steps = self.checker.wrap_steps(self.steps) if self.checker else self.steps

    def check_inputs(self, arrays: list, shapes: bool = True) -> None:
        check_inputs(self.graph.inputs, arrays, shapes)

    def _buffer(self, node) -> np.ndarray:
        view = self._views.get(node.name)
        if view is None:
            if self._arena is None:
                self._arena = np.empty(self.arena_bytes, np.uint8)
            offset = self.offsets[node.name]
            view = self._arena[offset : offset + nbytes(node)].view(node.dtype).reshape(node.shape)
            self._views[node.name] = view
        return view

    def call_torch(self, node, aten, values: dict):
        """A `torch` node's result (dynamic_runtime.DynamicPlan gives it the valid part of its inputs)."""
        return call_torch(aten, values)

    @property
    def torch_nodes(self) -> set:
        return {node.name for kind, node, _ in self.steps if kind == "torch"}

    def run(self, arrays: list, times: dict | None = None) -> list:
        """Output arrays for the input `arrays` (numpy, already checked); with `times`, the
        seconds of each step go there by node name."""
        import torch

        inputs = {v.name: np.asarray(a, order="C") for v, a in zip(self.graph.inputs, arrays)}
        first = self._bound is None
        values = {**(self.graph.constants if first else self._static), **inputs}
        if self.checker:
            self.checker.start(values)
        if self._notes is None:
            self._notes = RunningNotes(self)
        try:
            # low-precision dense layers (lowp.py) cast and quantize with torch calls too
            uses_torch = bool(self.torch_nodes) or any(n.op == "dense_lowp" for _, n, _ in self.steps)
            with torch.inference_mode(), one_torch_thread(uses_torch):
                if first:
                    values = self._execute(self._run_steps, values, times, checked=True)
                    self._bound, self._static = self._bind(values)
                    self._chained = self._chain(self._bound)
                else:  # timed step by step, or with the bound calls chained
                    steps = self._bound if times is not None else self._chained
                    values = self._execute(steps, values, times, checked=False)
        finally:
            self._notes.clear()
        return [values[o] for o in self.graph.outputs]

    def _execute(self, steps, values: dict, times: dict | None, checked: bool) -> dict:
        clock = time.perf_counter
        note, notes = self._notes.note, self._notes.addresses
        for kind, node, what in steps:
            start = clock() if times is not None else 0.0
            if kind == "chain":  # the chain sets the note itself
                what()
            elif kind == "bound":
                note.value = notes[node.name]  # what a fault's report names (RunningNotes)
                what()
            elif kind == "kernel":
                note.value = notes[node.name]
                args = [values[i] for i in node.inputs]
                if node.name not in self.offsets:  # a graph output: a fresh array for the caller
                    values[node.name] = what(*args)
                elif checked:
                    values[node.name] = what(*args, out=self._buffer(node))
                else:
                    out = values[node.name] = self._buffer(node)
                    what.run_unchecked([*args, out])
            elif kind == "view":
                values[node.name] = values[node.inputs[0]].reshape(node.shape)
            else:
                values[node.name] = self._own(self.call_torch(node, what, values))
            if times is not None:
                times[node.name] = clock() - start
        return values

    def _chain(self, steps: list) -> list:
        """`steps` with each run of bound kernel calls as one native call (step_chain.py): a
        step from Python costs 2-4 us, a chained one nothing."""
        out = []
        for bound, group in itertools.groupby(steps, key=lambda st: st[0] == "bound" and isinstance(st[2], BoundCall)):
            group = list(group)
            out.extend(self._chain_step(group) if bound and len(group) > 1 else group)
        return out

    def _chain_step(self, run: list) -> list:
        """One chain step for a run of bound steps, or the steps as they are where LLVM refuses
        the chain's module."""
        try:
            notes = [self._notes.addresses.get(node.name, 0) for _, node, _ in run]
            chain = StepChain([what for _, _, what in run], notes, running_note())
        except (BuildError, RuntimeError):
            return run
        return [("chain", run[-1][1], chain)]

    def _own(self, result):
        """A torch node's result, copied where it shares the arena (a view of its input, such as
        aten.select's): the arena planned its input's bytes free once that input's last reader
        ran, and the next kernel result placed there would overwrite this one (issue 55)."""
        if isinstance(result, np.ndarray):
            shares = self._arena is not None and np.may_share_memory(result, self._arena)
            return result.copy() if shares else result
        if isinstance(result, (list, tuple)):
            return type(result)(self._own(r) for r in result)
        return result

    def _bind(self, values: dict) -> tuple:
        """The steps of later runs, after a first run whose every kernel call was checked: the
        shapes are static and the constants and arena buffers stay where they are, so a kernel
        that reads and writes only those is bound to their addresses once (one ctypes call a
        step; the checks and argument lists cost ~5-8 us a step, a sixth of MobileNet-V2's
        time). Steps on what changes between runs (the inputs, what torch returns, the graph's
        outputs, views of them) run as before. Returns (steps, {name: array that stays})."""
        static = dict(self.graph.constants)
        changing = {v.name for v in self.graph.inputs}
        steps = []
        for kind, node, what in self._run_steps:
            reads_changing = any(i in changing for i in node.inputs)
            if kind == "kernel" and node.name in self.offsets:
                static[node.name] = values[node.name]
                if not reads_changing:
                    steps.append(("bound", node, what.bind([values[i] for i in node.inputs] + [values[node.name]])))
                    continue
            elif kind == "view" and not reads_changing:
                static[node.name] = values[node.name]
                continue
            else:
                changing.add(node.name)
            steps.append((kind, node, what))
        return steps, static


class RunningNotes:
    """What a fault's report says was running (backends/llvm/fault_ir.py): one C string per
    kernel step, "kernel K (node N, step S of T) of MODEL", whose address the plan stores in the
    runtime's note before the step; cleared when the run ends. One ctypes store a step."""

    def __init__(self, plan):
        kernels = [(node, what) for kind, node, what in plan.steps if kind == "kernel"]
        self._buffers = {
            node.name: ctypes.create_string_buffer(
                f"kernel {getattr(what, 'name', '?')} (node {node.name}, step {k + 1} of {len(kernels)}) "
                f"of {plan.label}".encode()
            )
            for k, (node, what) in enumerate(kernels)
        }
        self.addresses = {name: ctypes.addressof(b) for name, b in self._buffers.items()}
        note = running_note()  # a ctypes pointer, false while null: not `or`
        self.note = note if note is not None else types.SimpleNamespace(value=None)

    def clear(self) -> None:
        self.note.value = None


def check_inputs(expected: list, inputs: list, shapes: bool = True) -> None:
    """ShapeError or DTypeError unless `inputs` (numpy arrays or torch tensors) match the graph's
    input values `expected` in number, shape (when `shapes`) and dtype."""
    if len(inputs) != len(expected):
        raise ShapeError(f"the model takes {len(expected)} input(s) ({_describe(expected)}), got {len(inputs)}")
    for x, v in zip(inputs, expected):
        if shapes and tuple(x.shape) != tuple(v.shape):
            raise ShapeError(f"input {v.name}: expected shape {list(v.shape)}, got {list(x.shape)}")
        dtype = str(x.dtype).removeprefix("torch.")
        if dtype != v.dtype:
            raise DTypeError(f"input {v.name}: expected {v.dtype}, got {dtype}")


def _describe(values) -> str:
    return ", ".join(f"{v.name}: {v}" for v in values)
