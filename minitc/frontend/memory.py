"""Static memory planning: the kernels' intermediate results share one arena.

Each kernel's result lives from the step that writes it to the last step that reads it or a
view of it. Results are placed in a byte arena, largest first, each at the lowest offset
(aligned) that overlaps no result whose lifetime overlaps its own: the greedy best-fit TVM's
StaticPlanBlockMemory and tinygrad's arenas use. The graph's outputs are not placed (they are
handed to the caller), nor what torch nodes return (torch allocates those).
"""

from __future__ import annotations

import math

import numpy as np

ALIGN = 64  # bytes: a cache line, and a full AVX-512 vector


def lifetimes(graph) -> dict:
    """{kernel result name: (first step, last step)}, counting reads through views."""
    root = {}  # a view's name -> the result whose buffer it shares
    life = {}
    for step, node in enumerate(graph.nodes):
        for name in node.inputs:
            source = root.get(name, name)
            if source in life:
                life[source] = (life[source][0], step)
        if node.op == "view" and node.inputs[0] in root | life.keys():
            root[node.name] = root.get(node.inputs[0], node.inputs[0])
        elif node.op != "torch" and node.op != "view":
            life[node.name] = (step, step)
    outputs = {root.get(o, o) for o in graph.outputs}
    return {name: span for name, span in life.items() if name not in outputs}


def nbytes(node) -> int:
    return math.prod(node.shape) * np.dtype(node.dtype).itemsize


def plan_arena(graph, guard: int = 0) -> tuple:
    """({result name: byte offset}, arena size in bytes). `guard`: bytes kept free after each
    result (the checked mode's guard words, minitc/frontend/checked.py)."""
    spans = lifetimes(graph)
    sizes = {n.name: nbytes(n) + guard for n in graph.nodes if n.name in spans}
    placed: list = []  # (offset, end, first, last)
    offsets = {}
    for name in sorted(spans, key=lambda n: (-sizes[n], spans[n])):
        first, last = spans[name]
        busy = sorted((lo, hi) for lo, hi, start, end in placed if start <= last and first <= end)
        offset = 0
        for lo, hi in busy:
            if offset + sizes[name] <= lo:
                break
            offset = max(offset, -(-hi // ALIGN) * ALIGN)
        offsets[name] = offset
        placed.append((offset, offset + sizes[name], first, last))
    return offsets, max((e for _, e, _, _ in placed), default=0)
