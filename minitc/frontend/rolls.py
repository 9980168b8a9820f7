"""`roll_index_selects`: torch.roll, which torch.export decomposes into `index_select` along the
axis with the constant index `(arange(n) + shift) % n`, becomes a `roll` node: index math that
fuses into the kernels around it, instead of a gather run through PyTorch (on one thread,
between two hand-offs of the thread pools).

Swin's shifted windows roll the tokens by half a window before the window partition and back
after it, along the height and the width:

    %index_select = torch(%ln_view, %fmod, target=aten.index_select.default)   float32[1, 56, 56, 96]
    %index_select_1 = torch(%index_select, %fmod, target=aten.index_select.default)
becomes
    %index_select = roll(%ln_view, axis=1, shift=3)                             float32[1, 56, 56, 96]
    %index_select_1 = roll(%index_select, axis=2, shift=3)

and fuse_elementwise joins the two and the window partition's permute into one kernel.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from minitc.frontend.graph import Graph


def roll_index_selects(graph: Graph) -> Graph:
    """The graph with every `index_select` of a constant index that is a rotation of its axis
    as a `roll` node (out[..., i, ...] = x[..., (i + shift) % n, ...]); other gathers stay."""
    g = graph.copy()
    g.nodes = [_as_roll(node, g.constants) or node for node in g.nodes]
    return g.prune()


def _as_roll(node, constants: dict):
    if node.op != "torch" or node.attrs.get("target") != "aten.index_select.default" or node.aten is None:
        return None
    _, args, kwargs = node.aten
    if kwargs or len(args) != 3 or not isinstance(args[1], int) or len(node.inputs) != 2:
        return None
    x, index = node.inputs
    if index not in constants or x in constants:
        return None
    axis = args[1] % len(node.shape)
    shift = rotation(constants[index], node.shape[axis])
    if shift is None:
        return None
    attrs = {"axis": axis, "shift": shift}
    return replace(node, op="roll", inputs=(x,), attrs=attrs, aten=None)


def rotation(index, n: int) -> int | None:
    """`s` when `index` is (arange(n) + s) % n with 0 < s < n (a roll), else None."""
    index = np.asarray(index)
    if index.shape != (n,) or index.dtype.kind not in "iu" or n < 2:
        return None
    shift = int(index[0]) % n
    if shift == 0 or not np.array_equal(index, (np.arange(n) + shift) % n):
        return None
    return shift
