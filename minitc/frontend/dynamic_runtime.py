"""Running a graph compiled for a bucket of dynamic sizes (minitc/frontend/dynamic.py).

`DynamicPlan` wraps the bucket's static `Plan`, whose buffers have the bucket's largest sizes:
a call copies its inputs into padded buffers, writes its sizes into the extents constant that
the kernels read, gives each PyTorch node the valid part of its inputs (and pads its result),
and returns the valid part of the outputs.
"""

from __future__ import annotations

import numpy as np

from minitc.errors import ShapeError
from minitc.frontend.dynamic import extents_arrays, set_extents
from minitc.frontend.runtime import Plan, call_torch, check_inputs


def valid_part(array: np.ndarray, dims: dict, extents: tuple) -> np.ndarray:
    """The view of a padded `array` that holds its valid elements: each dynamic dimension cut
    to its extent."""
    if not dims:
        return array
    index = tuple(slice(0, extents[dims[d]]) if d in dims else slice(None) for d in range(array.ndim))
    return array[index]


class DynamicPlan(Plan):
    """A Plan over padded buffers, called on inputs of any sizes in its bucket."""

    def __init__(self, graph, kernels: dict, dims: dict, shapes):
        super().__init__(graph, kernels)
        self.dims = dims  # value name -> {dim: slot}
        self.shapes = shapes  # dynamic.DynamicShapes: the sizes of a call, from its inputs
        self.extents: tuple = ()
        self._extents_arrays = extents_arrays(graph)  # what the kernels read the extents from
        self._padded = [np.zeros(v.shape, v.dtype) for v in graph.inputs]

    def check_inputs(self, arrays: list, shapes: bool = True) -> None:
        """Count and dtypes (runtime.check_inputs), then ranks and static dimensions, whatever
        `shapes` says (dynamic.py checks the dynamic dimensions against their range)."""
        check_inputs(self.graph.inputs, arrays, shapes=False)
        for k, (v, a) in enumerate(zip(self.graph.inputs, arrays)):
            dynamic = self.dims.get(v.name, {})
            if a.ndim != len(v.shape) or any(a.shape[d] != v.shape[d] for d in range(a.ndim) if d not in dynamic):
                want = ", ".join("*" if d in dynamic else str(v.shape[d]) for d in range(len(v.shape)))
                raise ShapeError(f"input {k} ({v.name}) must have shape [{want}] (* dynamic), got {list(a.shape)}")

    def run(self, arrays: list, times: dict | None = None) -> list:
        """The valid part of the outputs for `arrays` (of sizes within this plan's bucket)."""
        self.extents = self.shapes.extents([a.shape for a in arrays])
        set_extents(self._extents_arrays, self.extents)  # read by the kernels (bound to their addresses)
        for v, buf, a in zip(self.graph.inputs, self._padded, arrays):
            valid_part(buf, self.dims.get(v.name, {}), self.extents)[...] = a
        outs = super().run(self._padded, times)
        return [
            np.asarray(valid_part(o, self.dims.get(name, {}), self.extents), order="C")
            for o, name in zip(outs, self.graph.outputs)
        ]

    def call_torch(self, node, aten, values: dict):
        """PyTorch computes on the valid part of the inputs, as in eager; its result is padded."""
        sliced = {i: valid_part(values[i], self.dims.get(i, {}), self.extents) for i in node.inputs}
        result = call_torch(aten, {**values, **sliced}, self.shapes.env(self.extents[: len(self.shapes.symbols)]))
        dims = self.dims.get(node.name)
        if not dims or not isinstance(result, np.ndarray):
            return result
        padded = np.zeros(node.shape, result.dtype)
        valid_part(padded, dims, self.extents)[...] = result
        return padded
