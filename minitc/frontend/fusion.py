"""Fusion passes (TVM's FuseOps for minitc's graph): elementwise and injective nodes join the
kernel of what they read, anchors (dense, convolutions) take elementwise epilogues, a softmax
takes an elementwise prologue and a batch matmul the injective producers of its operands.

- `fuse_elementwise_regions`: elementwise nodes that read one value along several paths which
  meet again (the tanh GELU) become one kernel, with the value's producer; a dense result
  viewed to [batch, tokens, features] (GPT-2's MLP) takes the region as its epilogue in 2-D,
  and an anchor behind single-reader elementwise ops (conv -> + bias -> y * sigmoid(y)) takes
  those ops and the region.
- `fuse_elementwise`: elementwise consumers join their producer's kernel (a `fused` node): a
  chain of elementwise and injective ops becomes one kernel, also across a view that only
  splits axes (GPT-2's query, key and value: slice, view and permute read the product in
  place), a dense layer takes its consumers (the residual add, ...) as its epilogue, and a
  softmax takes its elementwise producer (attention's mask add) as a prologue.

Both run last in passes.run_all and take its target: on a GPU, depthwise convolutions and pools
take elementwise epilogues too (kernels.GPU_EPILOGUE_TAGS), which the CPU's NCHW templates do not.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from minitc.frontend.graph import ELEMENTWISE, Graph, Node, single_use
from minitc.frontend.kernels import EPILOGUE_TAGS, GPU_EPILOGUE_TAGS, split_groups
from minitc.target import is_gpu

INJECTIVE = ("permute", "expand", "slice", "roll", "mask")  # mask: dynamic shapes' padding (dynamic.py)
IN_PLACE = ("permute", "expand", "slice", "mask")  # what batch_matmul's template reads in place (affine index math)
EPILOGUE_ANCHORS = tuple(t for t in EPILOGUE_TAGS if t not in GPU_EPILOGUE_TAGS)  # anchors whose
# template applies a fused elementwise epilogue on every target; GPU targets add GPU_EPILOGUE_TAGS
PROLOGUE_TAKERS = ("softmax",)  # ops whose template inlines elementwise producers of their input
INDEX_PROLOGUE_TAKERS = ("batch_matmul",)  # ops whose template reads injective producers in place


def epilogue_anchors(target) -> tuple:
    """The ops whose kernels take elementwise epilogues on `target`."""
    return EPILOGUE_ANCHORS + (tuple(GPU_EPILOGUE_TAGS) if is_gpu(target) else ())


def _anchor(node, anchors: tuple = EPILOGUE_ANCHORS) -> str | None:
    ops = [b.op for b in node.body] if node.body else [node.op]
    return next((op for op in ops if op in anchors), None)


def _fusable_producer(node, anchors: tuple = EPILOGUE_ANCHORS) -> bool:
    """A node whose result an elementwise consumer can compute in the same kernel."""
    ops = [b.op for b in node.body] if node.body else [node.op]
    inside = ("view",) if node.body else ()  # in a fused kernel a view is index math, not a buffer
    return all(op in ELEMENTWISE + INJECTIVE + anchors + inside for op in ops)


def _prologue(g: Graph, src, users: dict) -> bool:
    """Whether `src` (None, or what a softmax reads) can run in the softmax's kernel: elementwise
    or injective ops only, without an anchor, read by nothing else."""
    return (
        src is not None
        and src.op != "view"
        and _fusable_producer(src)
        and _anchor(src) is None
        and single_use(g, src.name, users)
    )


def _through_view(g: Graph, name: str, current: dict, users: dict) -> tuple:
    """(producer, view) of the value `name`: the node now producing it, or, when `name` is a
    view read by nothing else, the node producing the view's source and that view (else None)."""
    src = current.get(name)
    if src is not None and src.op == "view" and single_use(g, name, users):
        return current.get(src.inputs[0]), src
    return src, None


def _index_prologues(g: Graph, node, current: dict, users: dict, out: list) -> list:
    """The members of the injective producers (permutes, slices, broadcasts: no arithmetic)
    that `node` can read in place, each through a view that only splits axes or only reshapes
    the batch axes, taken out of `out`: attention's head permutes of q, k and v, which the
    batch matmul's template reads in place."""
    body = []
    for name in node.inputs:
        src, view = _through_view(g, name, current, users)
        if src is None or src.op == "view" or not single_use(g, src.name, users):
            continue
        if not all(m.op in IN_PLACE or (m.op == "view" and src.body) for m in _members(src)):
            continue
        if view is not None and split_groups(src.shape, view.shape) is None and view.shape[-2:] != src.shape[-2:]:
            continue  # index math inside the matrices (a view that only merges batch axes is outside them)
        body += _members(src)
        out.remove(src)
        if view is not None:
            body.append(view)
            out.remove(view)
    return body


def _group(name: str, body: list, shape, dtype) -> Node:
    produced = {b.name for b in body}
    inputs = dict.fromkeys(i for b in body for i in b.inputs if i not in produced)
    return Node(name, "fused", tuple(inputs), {}, tuple(shape), dtype, body=tuple(body))


def _members(node) -> list:
    return list(node.body) if node.body else [node]


def fuse_elementwise(graph: Graph, target="llvm") -> Graph:
    """Elementwise and injective nodes join the kernel of the producers they read when nothing
    else reads those (TVM's FuseOps, for elementwise and injective producers and the dense
    anchor; an injective node takes no anchor, whose template applies elementwise epilogues): a
    chain of elementwise ops is one kernel, and a dense layer's consumers (bias, activation,
    the residual add) become its epilogue. A dense result viewed as [batch, tokens, features]
    stays 2-D inside the kernel: the consumer's other operands are viewed to 2-D (free) and
    the kernel's result is viewed back."""
    anchors = epilogue_anchors(target)
    g = graph.copy()
    users = g.users()
    shapes = {name: v.shape for name, v in g.values().items()}
    current: dict = {}  # value name -> the node (possibly fused) that now produces it
    out: list = []

    def emit(node):
        current[node.name] = node
        shapes[node.name] = node.shape
        out.append(node)

    for node in g.nodes:
        src, view = _through_view(g, node.inputs[0], current, users) if node.op in PROLOGUE_TAKERS else (None, None)
        if view is not None and src is not None and split_groups(src.shape, view.shape) is None:
            src = None  # only a view that splits axes is index math in the prologue
        if _prologue(g, src, users):  # attention's scale or mask add: the template inlines it
            out.remove(src)
            if view is not None:
                out.remove(view)
            emit(_group(node.name, _members(src) + ([view] if view else []) + [node], node.shape, node.dtype))
            continue
        if node.op in INDEX_PROLOGUE_TAKERS:
            body = _index_prologues(g, node, current, users, out)
            emit(_group(node.name, body + [node], node.shape, node.dtype) if body else node)
            continue
        if node.op not in ELEMENTWISE + INJECTIVE:
            emit(node)
            continue
        body, inputs, flat = [], list(node.inputs), None  # flat: the anchor's 2-D shape
        for k in _anchors_first(g, node, current, users, anchors):
            name = node.inputs[k]
            src, view = _through_view(g, name, current, users)
            if src is None or not _fusable_producer(src, anchors) or not single_use(g, src.name, users):
                continue
            anchored = _anchor(src, anchors) is not None
            if anchored and (node.op in INJECTIVE or flat is not None or any(_anchor(b, anchors) for b in body)):
                continue  # one anchor per kernel, whose template takes elementwise epilogues only
            if flat is not None and len(shapes[name]) > 1:
                continue  # the kernel is 2-D: an operand of the full shape is read through a view
            if view is not None and not (
                _flattens(node, k, shapes, src.shape) if anchored else split_groups(src.shape, view.shape)
            ):
                continue  # across a view: an anchor computed in 2-D, or a view that only splits axes
            body.extend(_members(src))
            out.remove(src)
            if view is not None:
                out.remove(view)
                if anchored:
                    inputs, flat = [src.name if i == name else i for i in inputs], src.shape
                else:  # read through the view's index math (affine: kernels.split_groups)
                    body.append(view)
        if not body:
            emit(node)
        elif flat is None:
            emit(_group(node.name, body + [replace(node, inputs=tuple(inputs))], node.shape, node.dtype))
        else:
            for k, name in enumerate(inputs):
                if shapes[name] == node.shape:  # an operand of the full shape, read in 2-D
                    view = Node(f"{name}_2d", "view", (name,), {"shape": flat}, flat, node.dtype)
                    if view.name not in current:
                        emit(view)
                    inputs[k] = view.name
            member = replace(node, name=f"{node.name}_2d", inputs=tuple(inputs), shape=flat)
            emit(_group(member.name, body + [member], flat, node.dtype))
            emit(Node(node.name, "view", (member.name,), {"shape": node.shape}, node.shape, node.dtype))
            users[member.name] = [out[-1]]
    g.nodes = out
    return g.prune()


def _anchors_first(g: Graph, node, current: dict, users: dict, anchors: tuple) -> list:
    """The positions of `node`'s operands to try to take into its kernel: each value once (x * x
    reads one), an anchor's first. Taking an anchor viewed to 3-D computes the kernel in the
    anchor's 2-D shape, where other producers of the full shape cannot join (doge's residual:
    add(mul(w, x), dense_view)); taken first, the anchor keeps its epilogue."""
    first = {}
    for k, name in enumerate(node.inputs):
        first.setdefault(name, k)

    def anchored(k: int) -> bool:
        src = _through_view(g, node.inputs[k], current, users)[0]
        return src is not None and _anchor(src, anchors) is not None

    return sorted(first.values(), key=lambda k: not anchored(k))


def fuse_elementwise_regions(graph: Graph, target="llvm") -> Graph:
    """A value that several elementwise nodes read, whose paths meet again in one elementwise
    node (the tanh GELU reads its input four times), is computed in one kernel with all of
    them: the region from the value to the meeting node becomes a `fused` node, which the
    value's producer joins when it could fuse at all and nothing else reads it. This is the
    post-dominator case of TVM's FuseOps that `fuse_elementwise`'s single-reader chains miss."""
    g = graph.copy()
    users = {name: {u.name for u in readers} for name, readers in g.users().items()}
    producers, shapes = g.producers(), {name: v.shape for name, v in g.values().items()}
    anchors, taken, groups = epilogue_anchors(target), set(), {}
    for node in g.nodes:
        if node.name in taken or len(users.get(node.name, ())) < 2:
            continue
        region = _region(g, node, users, taken)
        if region is None:
            continue
        taken.update(r.name for r in region)
        last = region[-1]
        lead = _lead(g, node, producers, users, taken, anchors) if node.name not in g.outputs else None
        if lead is not None and lead[0].op == "view":  # the chain and the region join a viewed dense in 2-D
            anchor = _viewed_anchor(g, lead[0], producers, users, shapes, lead[1:] + region)
            lead = None if anchor is None else [anchor, lead[0]] + lead[1:]
        if lead is not None:  # bias, ... -> y * sigmoid(y): one kernel with the anchor behind the chain
            taken.update(n.name for n in lead)
            groups[last.name] = _led_region(lead, region)
            continue
        anchor = _viewed_anchor(g, node, producers, users, shapes, region)
        if anchor is not None:  # a dense result viewed to 3-D: the region joins it in 2-D
            taken.update((node.name, anchor.name))
            groups[last.name] = _flat_region(anchor, node, region)
            continue
        joins = _fusable_producer(node, anchors) and node.name not in g.outputs
        body = ([node] if joins else []) + [m for r in region for m in _members(r)]
        if joins:
            taken.add(node.name)
        groups[last.name] = [_group(last.name, body, last.shape, last.dtype)]
    nodes = [n for n in g.nodes if n.name not in taken or n.name in groups]
    g.nodes = [m for n in nodes for m in groups.get(n.name, [n])]
    return g.prune()  # passes.run_all simplifies the views the regions leave behind


def _lead(g: Graph, node, producers: dict, users: dict, taken: set, anchors: tuple) -> list | None:
    """[anchor, e1, ..., node] when the elementwise `node` (a region's start) reads an anchor's
    result through a chain of elementwise ops of its shape, each read by nothing but the next
    (a bias add before y * sigmoid(y)); [view, e1, ..., node] when the chain starts at a view
    (a dense result viewed to 3-D, which `_viewed_anchor` checks); else None."""
    if node.op not in ELEMENTWISE:
        return None
    for name in node.inputs:
        p = producers.get(name)
        if p is None or p.name in taken or p.name in g.outputs or users.get(name) != {node.name}:
            continue
        if p.shape != node.shape or p.body:
            continue
        if p.op in anchors or p.op == "view":
            return [p, node]
        chain = _lead(g, p, producers, users, taken, anchors)
        if chain is not None:
            return chain + [node]
    return None


def _led_region(lead: list, region: list) -> list:
    """The anchor, its chain and the region as one kernel; a viewed dense ([anchor, view, ...])
    computes the chain and the region in its 2-D shape."""
    if lead[1].op == "view":
        return _flat_region(lead[0], lead[1], lead[2:] + region)
    last = region[-1]
    return [_group(last.name, lead + [m for r in region for m in _members(r)], last.shape, last.dtype)]


def _viewed_anchor(g: Graph, view, producers: dict, users: dict, shapes: dict, region: list):
    """The anchor (a dense layer) behind `view` when the region can be computed in the anchor's
    2-D shape instead: the view only regroups the leading axes, nothing else reads the anchor,
    and the region's nodes read nothing but the view, each other and constants of one element
    or of the last axis."""
    src = producers.get(view.inputs[0]) if view.op == "view" else None
    if src is None or _anchor(src) is None or users.get(src.name) != {view.name} or src.name in g.outputs:
        return None
    if view.shape[-1:] != src.shape[-1:]:
        return None
    inside = {view.name} | {r.name for r in region}
    ok = all(i in inside or len(shapes[i]) <= 1 for r in region for i in r.inputs)
    return src if ok and not any(r.body for r in region) else None


def _flat_region(anchor: Node, view: Node, region: list) -> list:
    """The anchor and the region as one kernel of the anchor's 2-D shape, then a view of its
    result back to the region's shape."""
    flat, last = anchor.shape, region[-1]
    members = [
        replace(
            r,
            name=f"{r.name}_2d" if r is last else r.name,
            inputs=tuple(anchor.name if i == view.name else i for i in r.inputs),
            shape=flat,
        )
        for r in region
    ]
    fused = _group(f"{last.name}_2d", [anchor] + members, flat, last.dtype)
    return [fused, Node(last.name, "view", (fused.name,), {"shape": last.shape}, last.shape, last.dtype)]


def _region(g: Graph, start, users: dict, taken: set) -> list | None:
    """The elementwise nodes from `start`'s value to the first node where all its paths meet,
    in graph order; None when a path leaves elementwise ops (or the shape) first, or an
    intermediate value is an output of the graph."""
    open_reads = {start.name: set(users[start.name])}  # value -> its readers not yet in the region
    region = []
    for node in g.nodes[g.nodes.index(start) + 1 :]:
        read = [i for i in dict.fromkeys(node.inputs) if i in open_reads]
        if not read:
            continue
        if node.op not in ELEMENTWISE or node.name in taken or node.shape != start.shape:
            return None
        region.append(node)
        for i in read:
            open_reads[i].discard(node.name)
            if not open_reads[i]:
                del open_reads[i]
        if not open_reads:
            return region if len(region) >= 2 else None
        if node.name in g.outputs or not users.get(node.name):
            return None
        open_reads[node.name] = set(users[node.name])
    return None


def _flattens(node, k: int, shapes: dict, flat: tuple) -> bool:
    """Whether `node` can be computed in the 2-D shape `flat` of the anchor behind its k-th
    operand: the same elements in the same order, and every other operand of the node's full
    shape (viewed to 2-D) or a vector along the last axis or a scalar."""
    if node.shape[-1:] != flat[-1:] or int(np.prod(node.shape)) != int(np.prod(flat)):
        return False
    read = node.inputs[k]
    return all(i == read or shapes[i] == node.shape or len(shapes[i]) <= 1 for i in node.inputs)
