"""Running a graph: a static plan of steps over numpy buffers.

`Plan(graph, kernels)` lists one step per node in order: a minitc kernel writing a fresh
buffer, a view (the same buffer, another shape), or a `torch` node calling its ATen operator
on torch tensors that share the buffers (torch.from_numpy / .numpy(): no copies). Constants
stay numpy arrays for the life of the plan. Kernels write their intermediate results into one
arena planned by liveness (memory.py); `plan.arena_bytes` is its size.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from minitc.autotune.cost_model import torch_threads
from minitc.errors import DTypeError, ShapeError
from minitc.frontend.importer import Ref
from minitc.frontend.memory import nbytes, plan_arena


def _torch_args(tree, values):
    import torch

    if isinstance(tree, Ref):
        v = values[str(tree)]
        return torch.from_numpy(v) if isinstance(v, np.ndarray) else v
    if isinstance(tree, dict):
        return {k: _torch_args(v, values) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_torch_args(v, values) for v in tree)
    return tree


def _from_torch(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().contiguous().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_from_torch(v) for v in value)
    return value


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
        self.offsets, self.arena_bytes = plan_arena(graph)
        self._arena = None  # allocated on the first run, then reused (a plan runs one call at a time)
        self._views: dict = {}  # node name -> its array in the arena
        self._checked = False  # every kernel call of one whole run was checked
        self.steps = []
        for node in graph.nodes:
            if node.op == "view":
                self.steps.append(("view", node, None))
            elif node.op == "torch":
                self.steps.append(("torch", node, node.aten))
            else:
                self.steps.append(("kernel", node, kernels[node.name]))

    def check_inputs(self, arrays: list, shapes: bool = True) -> None:
        expected = self.graph.inputs
        if len(arrays) != len(expected):
            raise ShapeError(f"the model takes {len(expected)} input(s) ({_describe(expected)}), got {len(arrays)}")
        for a, v in zip(arrays, expected):
            if shapes and tuple(a.shape) != tuple(v.shape):
                raise ShapeError(f"input {v.name}: expected shape {list(v.shape)}, got {list(a.shape)}")
            if str(a.dtype) != v.dtype:
                raise DTypeError(f"input {v.name}: expected {v.dtype}, got {a.dtype}")

    def _buffer(self, node) -> np.ndarray:
        view = self._views.get(node.name)
        if view is None:
            if self._arena is None:
                self._arena = np.empty(self.arena_bytes, np.uint8)
            offset = self.offsets[node.name]
            view = self._arena[offset : offset + nbytes(node)].view(node.dtype).reshape(node.shape)
            self._views[node.name] = view
        return view

    @property
    def torch_nodes(self) -> set:
        return {node.name for kind, node, _ in self.steps if kind == "torch"}

    def run(self, arrays: list, times: dict | None = None) -> list:
        """Output arrays for the input `arrays` (numpy, already checked); with `times`, the
        seconds of each step go there by node name."""
        import torch

        values = dict(self.graph.constants)
        values.update({v.name: np.ascontiguousarray(a) for v, a in zip(self.graph.inputs, arrays)})
        clock = time.perf_counter
        # The first run checks every kernel call (shapes, dtypes, layout, aliasing); the shapes
        # are static and the arena's buffers fixed, so later runs call the kernels unchecked:
        # the checks cost ~5 us a call, a tenth of MobileNet-V2's time.
        unchecked = self._checked
        with torch.inference_mode(), one_torch_thread(bool(self.torch_nodes)):
            for kind, node, what in self.steps:
                start = clock() if times is not None else 0.0
                if kind == "kernel":
                    args = [values[i] for i in node.inputs]
                    if node.name not in self.offsets:
                        values[node.name] = what(*args)
                    elif unchecked:
                        out = values[node.name] = self._buffer(node)
                        what.run_unchecked([*args, out])
                    else:
                        values[node.name] = what(*args, out=self._buffer(node))
                elif kind == "view":
                    values[node.name] = values[node.inputs[0]].reshape(node.shape)
                else:
                    target, args, kwargs = what
                    values[node.name] = _from_torch(target(*_torch_args(args, values), **_torch_args(kwargs, values)))
                if times is not None:
                    times[node.name] = clock() - start
        self._checked = True
        return [values[o] for o in self.graph.outputs]


def _describe(values) -> str:
    return ", ".join(f"{v.name}: {v}" for v in values)
