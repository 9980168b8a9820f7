"""ATen operators to graph nodes: one converter per overload, in CONVERTERS.

A converter is called with the importer and the call's arguments, graph values given by name
(a str) and everything else as ATen passes it; it emits nodes with `im.emit` and returns the
name of the value the call produces (a tuple of names, None where an item is not produced, for
an operator that returns a tuple; such converters list the items they produce in `.items`). A
call beyond what minitc's kernels do (a grouped convolution, softmax over another axis,
operands of two dtypes) raises Unconvertible, and the importer runs that call through PyTorch.

KEEP_WHOLE names the operators the export keeps undecomposed because minitc has a kernel for
the whole operator (a `linear` is one dense kernel, not a transpose, a matmul and an add).

The converters live in one module per group, each registering its own in CONVERTERS:
aten_linalg (linear algebra), aten_nn (convolution, normalisation, pooling), aten_elementwise
(reductions and elementwise operators) and aten_layout (views, permutes, slices, pads); the
registry and the helpers they share are in aten_common.
"""

from __future__ import annotations

from minitc.frontend import aten_elementwise, aten_layout, aten_linalg, aten_nn  # noqa: F401  (they register themselves)
from minitc.frontend.aten_common import CONVERTERS, KEEP_WHOLE, Unconvertible, dims, ints

__all__ = ["CONVERTERS", "KEEP_WHOLE", "Unconvertible", "dims", "ints"]
