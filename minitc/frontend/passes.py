"""Graph passes: each takes a graph and returns the rewritten graph (the input is not changed).

- `eliminate_common_subexpressions`: a node that computes what an earlier one computes (the same
  operator, inputs and attributes) reads the earlier one's value instead (BERT's and GPT-2's
  attention masks are rebuilt by every layer, a dozen small PyTorch calls each).
- `fold_constants` (constants.py): a node that reads only constants, or nothing, is computed at
  compile time (position ids, the input-independent part of attention masks).
- `fold_batch_norm`: a per-channel scale and shift (inference batch norm) after a convolution
  with constant weights becomes new weights and a bias: w' = w * scale, b' = b * scale + shift.
- `pack_conv_weights` (weights.py, needs the target): a convolution whose constant weight the channel-vector
  template runs better (minitc/templates/conv_channels.py) gets the weight repacked once into
  [C, R, S, K] (`weight_layout="CRSK"`).
- `pack_dense_weights` (weights.py, needs the target): a dense layer's constant weight is packed once into
  blocks of a vector's worth of output features (`weight_block`), read in place by the template.
- `winograd_convolutions` (weights.py, GPU targets): a 3x3 stride-1 convolution with a constant weight
  and enough channels becomes `conv2d_winograd`, its weight transformed once.
- `fuse_dense_activation`: an activation applied to a dense layer's output, and read by nothing
  else, becomes the dense kernel's epilogue (`dense(..., activation=gelu)`), looking through
  the views that put a [batch * tokens, features] product back into [batch, tokens, features].
- `simplify_views`: views to the same shape disappear; a view of a view reads the source.
- `hoist_operand_scales`: a batch matmul operand scaled by a constant is read unscaled and the
  product is scaled instead (attention's q and k scales).
- `fold_transposes`: a batch matmul reads a transposed operand through its transpose flag.
- `fuse_elementwise_regions`, `fuse_elementwise` (fusion.py): elementwise and injective nodes
  join the kernel of what they read; dense layers and convolutions take elementwise epilogues,
  a softmax an elementwise prologue, a batch matmul its operands' head permutes.

`run_all` applies them in order and prunes what no output needs.
"""

from __future__ import annotations

from dataclasses import replace

from minitc.frontend.constants import fold_constants
from minitc.frontend.fallback import Fallback, error_text
from minitc.frontend.fusion import PROLOGUE_TAKERS, fuse_elementwise, fuse_elementwise_regions
from minitc.frontend.graph import ELEMENTWISE, Graph, Node, is_pure, single_use, verify
from minitc.frontend.importer import Ref
from minitc.frontend.layout import block_channels
from minitc.frontend.lowp import lower_dense
from minitc.frontend.rolls import roll_index_selects
from minitc.frontend.weights import pack_conv_weights, pack_dense_weights, winograd_convolutions

ACTIVATIONS = ("relu", "gelu", "sigmoid", "tanh")
CONVOLUTIONS = ("conv2d", "depthwise_conv2d")


def _renamed(node: Node, alias: dict) -> None:
    """Point `node`'s inputs (and a `torch` node's call arguments) at the values in `alias`."""
    node.inputs = tuple(alias.get(i, i) for i in node.inputs)
    if node.aten is not None:
        target, args, kwargs = node.aten
        node.aten = (target, _renamed_tree(args, alias), _renamed_tree(kwargs, alias))


def _renamed_tree(tree, alias: dict):
    if isinstance(tree, Ref):
        return Ref(alias.get(tree, tree))
    if type(tree) in (list, tuple):
        return type(tree)(_renamed_tree(t, alias) for t in tree)
    if isinstance(tree, dict):
        return {k: _renamed_tree(v, alias) for k, v in tree.items()}
    return tree


def _frozen(tree):
    """A hashable form of attributes and call arguments (a Ref stays apart from a plain string)."""
    if isinstance(tree, Ref):
        return ("%", str(tree))
    if isinstance(tree, (list, tuple)):
        return tuple(_frozen(t) for t in tree)
    if isinstance(tree, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in tree.items()))
    try:
        hash(tree)
        return tree
    except TypeError:
        return repr(tree)


def _computation(node: Node):
    """What a node computes, as a key equal for nodes that compute the same value; None for a
    node never merged (a fused kernel, a random or uninitialised PyTorch result)."""
    if node.op == "fused" or not is_pure(node):
        return None
    call = node.aten[1:] if node.op == "torch" else ()
    return (node.op, node.inputs, _frozen(node.attrs), _frozen(call), node.shape, node.dtype)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    g, alias, seen, nodes = graph.copy(), {}, {}, []
    for node in g.nodes:
        _renamed(node, alias)
        key = _computation(node)
        if key is not None and key in seen:
            alias[node.name] = seen[key]
            continue
        if key is not None:
            seen[key] = node.name
        nodes.append(node)
    g.nodes = nodes
    g.outputs = [alias.get(o, o) for o in g.outputs]
    return g.prune()


def fold_batch_norm(graph: Graph) -> Graph:
    g = graph.copy()
    producers, users = g.producers(), g.users()
    for i, node in enumerate(g.nodes):
        if node.op != "scale_shift":
            continue
        x, scale_name, shift_name = node.inputs
        scale, shift = g.constants.get(scale_name), g.constants.get(shift_name)
        bias = None
        src = producers.get(x)
        if src is not None and src.op == "add" and len(src.inputs) == 2 and single_use(g, x, users):
            bias = g.constants.get(src.inputs[1])
            conv_name = src.inputs[0] if bias is not None else None
        else:
            conv_name = x
        conv = producers.get(conv_name) if conv_name else None
        if scale is None or shift is None or conv is None or conv.op not in CONVOLUTIONS:
            continue
        weight = g.constants.get(conv.inputs[1])
        if weight is None or not single_use(g, conv.name, users):
            continue
        k = weight.shape[0]
        flat_scale = scale.reshape(k)
        new_weight = (weight * flat_scale.reshape((k,) + (1,) * (weight.ndim - 1))).astype(weight.dtype)
        new_bias = shift.reshape(k) + (bias.reshape(k) * flat_scale if bias is not None else 0)
        w_name = g.add_constant(f"{conv.inputs[1]}_folded", new_weight)
        b_name = g.add_constant(f"{node.name}_bias", new_bias.astype(weight.dtype).reshape(shift.shape))
        conv.inputs = (conv.inputs[0], w_name)
        g.nodes[i] = replace(node, op="add", inputs=(conv.name, b_name), attrs={})
    return g.prune()


def fuse_dense_activation(graph: Graph) -> Graph:
    g = graph.copy()
    producers, users = g.producers(), g.users()
    for i, node in enumerate(g.nodes):
        if node.op not in ACTIVATIONS:
            continue
        src = producers.get(node.inputs[0])
        while src is not None and src.op == "view" and single_use(g, src.name, users):
            src = producers.get(src.inputs[0])
        chain_ok = src is not None and src.op == "dense" and "activation" not in src.attrs
        if not chain_ok or not single_use(g, src.name, users):
            continue
        src.attrs["activation"] = node.op
        g.nodes[i] = replace(node, op="view", inputs=(node.inputs[0],), attrs={"shape": node.shape})
    return g.prune()


def simplify_views(graph: Graph) -> Graph:
    """Views are free, but each is a step: a view to the same shape goes, and a view of a view
    reads the first view's source."""
    g, alias, producers, nodes = graph.copy(), {}, {}, []
    shapes = {name: v.shape for name, v in g.values().items()}
    for node in g.nodes:
        _renamed(node, alias)
        if node.op == "view":
            src = producers.get(node.inputs[0])
            if src is not None and src.op == "view":
                node.inputs = src.inputs
            if node.shape == shapes[node.inputs[0]]:
                alias[node.name] = node.inputs[0]
                continue
        producers[node.name] = node
        nodes.append(node)
    g.nodes = nodes
    g.outputs = [alias.get(o, o) for o in g.outputs]
    return g.prune()


def _scale(node) -> float | None:
    """The constant factor of a multiplication or division by a scalar, else None."""
    if node.op not in ("mul", "div") or len(node.inputs) != 1 or node.attrs.get("scalar") is None:
        return None
    return node.attrs["scalar"] if node.op == "mul" else 1.0 / node.attrs["scalar"]


def _elementwise_reader(g: Graph, name: str, users: dict) -> bool:
    """Whether the one reader of `name`, through views, is an elementwise op or a softmax (so a
    scale applied to `name` joins that reader's kernel)."""
    while single_use(g, name, users):
        (reader,) = users[name]
        if reader.op != "view":
            return reader.op in ELEMENTWISE + PROLOGUE_TAKERS
        name = reader.name
    return False


def hoist_operand_scales(graph: Graph) -> Graph:
    """A batch matmul operand scaled by a constant, through views, permutes and slices read by
    nothing else (torch's attention scales q and k each by d^-1/4), is read unscaled, and the
    product is scaled once: (a A)(b B) = ab (A B). The operands are then pure index maps of
    their sources, which the matmul reads in place (fold_transposes, fuse_elementwise), and the
    product's scale joins its reader's kernel (the softmax's prologue): only done where the
    product's one reader is elementwise or a softmax."""
    g = graph.copy()
    producers, users = g.producers(), g.users()
    nodes = []
    for node in g.nodes:
        scale = 1.0
        for k in range(2 if node.op == "batch_matmul" and _elementwise_reader(g, node.name, users) else 0):
            reader, position = node, k
            while True:
                name = reader.inputs[position]
                src = producers.get(name)
                if src is None or not single_use(g, name, users):
                    break
                factor = _scale(src)
                if factor is not None:
                    scale *= factor
                    inputs = list(reader.inputs)
                    inputs[position] = src.inputs[0]
                    reader.inputs = tuple(inputs)
                    break
                if src.op not in ("view", "permute", "slice"):
                    break
                reader, position = src, 0
        if scale == 1.0:
            nodes.append(node)
            continue
        unscaled = replace(node, name=f"{node.name}_unscaled")
        nodes += [unscaled, Node(node.name, "mul", (unscaled.name,), {"scalar": scale}, node.shape, node.dtype)]
    g.nodes = nodes
    return g.prune()


def _swaps_last_two(dims) -> bool:
    n = len(dims)
    return n >= 2 and tuple(dims) == tuple(range(n - 2)) + (n - 1, n - 2)


def fold_transposes(graph: Graph) -> Graph:
    """A batch matmul operand that is a transpose of the last two axes (`k.transpose(-1, -2)`
    in attention), possibly viewed to 3-D (a view that only regroups the batch axes), is read in
    place with the matmul's transpose flag instead of being copied."""
    g = graph.copy()
    producers, users = g.producers(), g.users()
    for node in g.nodes:
        if node.op != "batch_matmul":
            continue
        inputs = list(node.inputs)
        for k, flag in ((0, "transpose_a"), (1, "transpose_b")):
            view, src = None, producers.get(inputs[k])
            if src is not None and src.op == "view" and single_use(g, src.name, users):
                view, src = src, producers.get(src.inputs[0])
            if src is None or src.op != "permute" or not _swaps_last_two(src.attrs["dims"]):
                continue
            if not single_use(g, src.name, users):
                continue
            if view is not None and view.shape[-2:] != src.shape[-2:]:
                continue  # the view regroups the matrices' own axes (ConvBERT's span convolution)
            read = (view or src).shape
            shape = (*read[:-2], read[-1], read[-2])  # the untransposed operand, as the matmul reads it
            name = f"{src.inputs[0]}_t{k}"
            g.nodes.insert(
                g.nodes.index(node), Node(name, "view", (src.inputs[0],), {"shape": shape}, shape, node.dtype)
            )
            inputs[k] = name
            node.attrs[flag] = not node.attrs.get(flag, False)
        node.inputs = tuple(inputs)
    return simplify_views(g.prune())


PASSES = (
    eliminate_common_subexpressions,
    fold_constants,
    roll_index_selects,
    fold_batch_norm,
    block_channels,
    pack_conv_weights,
    pack_dense_weights,
    winograd_convolutions,
    fuse_dense_activation,
    simplify_views,
    hoist_operand_scales,
    fold_transposes,
    fuse_elementwise_regions,
    simplify_views,
    fuse_elementwise,
)


LAYOUTS = ("auto", "nchw")


def run_all(
    graph: Graph, target="llvm", layout: str = "auto", fallbacks: list | None = None, dtype: str = "float32"
) -> Graph:
    """The passes in order; `layout="nchw"` leaves out block_channels. Each result is checked
    (graph.verify). With a `fallbacks` list, a pass that raises or breaks the graph is skipped
    (each pass works on a copy, so its input stays whole) and noted there
    (fallback.Fallback); block_channels skips only the node it fails on. Without, the error is
    raised. `dtype` "bfloat16" or "int8": dense layers with constant weights become low-precision
    GEMMs (lowp.lower_dense) before the float32 ones are packed."""
    for p in PASSES:
        if p is block_channels and layout == "nchw":
            continue
        if p is pack_dense_weights:
            graph = lower_dense(graph, dtype, target)
        takes_target = p in (
            block_channels,
            pack_conv_weights,
            pack_dense_weights,
            winograd_convolutions,
            fuse_elementwise_regions,  # GPU targets fuse more epilogues (fusion.epilogue_anchors)
            fuse_elementwise,
        )
        source = graph if fallbacks is None else graph.copy()
        noted = None if fallbacks is None else []  # block_channels' nodes, kept if its graph is
        try:
            if p is block_channels:  # skips a failing node, not the whole pass
                out = p(source, target, noted)
            else:
                out = p(source, target) if takes_target else p(source)
            verify(out)
        except Exception as e:
            if fallbacks is None:
                raise
            fallbacks.append(Fallback("pass", p.__name__, error_text(e)))
            continue
        graph = out
        if noted:
            fallbacks.extend(noted)
    return graph
