"""`block_channels`: a CNN's activations in channel-blocked layout, NCHW[c] (minitc/ops/nchwc.py).

A convolution whose output channels fill whole vectors runs as `conv2d_nchwc`: its constant
weight is repacked once into [K/c, C/cb, R, S, cb, c], and its result stays blocked for every
reader that can take it: the next convolution, elementwise ops (a bias or batch-norm constant
per channel is reshaped to the blocked layout once), pooling, depthwise convolution and the
global average pool. Only where a value leaves that region (a graph output, an op without a
blocked kernel) is it converted back, by a `permute` kernel; a network input is converted on
the way in. ONNX Runtime's NCHWc transformer does the same; the gain is that no kernel
transposes between NCHW and the vector-of-channels order its micro-kernel computes in.

A value's block is the target's vector lanes for the dtype when they divide its channels. Where
only half of them (at least 8) do, as MobileNet-V2's 24 channels with 16-lane AVX-512 vectors,
the value is padded with zero channels to whole vectors (24 -> 32): half-width vectors ran its
1x1 convolutions at half the FMA rate, and padding adds at most a third (8 channels, which
padding would double, keep blocks of 8). The padded channels of
a weight, bias or per-channel constant are 0 (a divisor's 1), so the padded channels of a value
stay finite and the next convolution reads them with zero weights; where the value leaves the
blocked region, a slice drops them. A value whose channels fill neither stays NCHW, and a
network's input of a few colours is one block of its channels.

    %relu = fused[conv2d, add, relu](%x, %w, %b)           float32[1, 64, 56, 56]
becomes
    %x_nchwc = permute(%x_blocks, dims=[0, 1, 3, 4, 2])    float32[1, 1, 224, 224, 3]
    %relu_nchwc = fused[conv2d_nchwc, add, relu](%x_nchwc, %w_nchwc, %b_nchwc)   float32[1, 4, 56, 56, 16]
"""

from __future__ import annotations

import numpy as np

from minitc.frontend.fallback import Fallback, error_text
from minitc.frontend.graph import ELEMENTWISE, Graph, Node
from minitc.ops.reference import to_blocked_weight
from minitc.ops.winograd import tiles as winograd_tiles
from minitc.ops.winograd import winograd_weights
from minitc.target import is_gpu, parse_target

POOLS = ("max_pool2d", "avg_pool2d")
REDUCTIONS = ("mean", "sum", "max")
SUFFIX = "_nchwc"


def block_of(channels: int, lanes: int) -> int | None:
    """The channels per block of a value with `channels` channels: the lanes when they divide the
    channels, or when half of them (at least 8) do and the value has more than one vector of
    channels (then padded: padded_channels); half the lanes for fewer channels, whose padding
    would double the work; None when neither divides the channels."""
    if channels % lanes == 0:
        return lanes
    half = lanes // 2
    if half >= 8 and channels % half == 0:
        return lanes if channels > lanes else half
    return None


def padded_channels(channels: int, lanes: int) -> int:
    """The channels of a value's blocked layout: whole blocks of block_of(channels, lanes)."""
    block = block_of(channels, lanes) or channels
    return -(-channels // block) * block


def _pad_axis(array, axis: int, size: int, fill: float = 0.0):
    """`array` with its `axis` extended to `size` by `fill`."""
    extra = size - array.shape[axis]
    if extra == 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, extra)
    return np.pad(array, widths, constant_values=fill)


WINOGRAD_MIN_TILES = 32


def winograd_pays(weight_shape, attrs: dict, in_block: int, lanes: int, out_hw: tuple) -> bool:
    """Whether a convolution runs as conv2d_winograd_nchwc: 3x3, stride 1, no dilation, on input
    blocks of whole vectors (not a network's few colours), with at least WINOGRAD_MIN_TILES 2x2
    output tiles. Its transformed weights are 16/9 the direct ones and are read once per tile:
    with fewer tiles, fetching them from memory costs what the 2.25x fewer FMAs save (measured
    inside ResNet-50: docs/models.md)."""
    unit = tuple(attrs.get("stride", (1, 1))) == (1, 1) and tuple(attrs.get("dilation", (1, 1))) == (1, 1)
    tiles = winograd_tiles(out_hw[0]) * winograd_tiles(out_hw[1])
    return unit and tuple(weight_shape[2:]) == (3, 3) and in_block == lanes and tiles >= WINOGRAD_MIN_TILES


def block_channels(graph: Graph, target="llvm", fallbacks: list | None = None) -> Graph:
    """`graph` with its CNN activations blocked. With a `fallbacks` list, a node whose blocked
    form fails to build (minitc's bug) is read in NCHW instead, noted there; the rest stays
    blocked. Without, the error is raised."""
    if is_gpu(target) or not any(n.op == "conv2d" and n.dtype == "float32" for n in graph.nodes):
        return graph
    return _Blocker(graph, parse_target(target).lanes("float32"), fallbacks).run()


class _Blocker:
    def __init__(self, graph: Graph, lanes: int, fallbacks: list | None = None):
        self.g = Graph(list(graph.inputs), dict(graph.constants), [], list(graph.outputs), dict(graph.symbols))
        self.source, self.lanes, self.fallbacks = graph, lanes, fallbacks
        self.blocked: dict = {}  # NCHW value name -> its blocked value's name
        self.nchw: set = {v.name for v in graph.inputs} | set(graph.constants)  # values present in NCHW
        self.shapes = {name: v.shape for name, v in graph.values().items()}
        self.dtypes = {name: v.dtype for name, v in graph.values().items()}

    # -- conversions -----------------------------------------------------------------------------

    def _emit(self, node: Node) -> str:
        self.g.nodes.append(node)
        self.shapes[node.name], self.dtypes[node.name] = node.shape, node.dtype
        return node.name

    def _fresh(self, name: str) -> str:
        """`name`, numbered where a value of that name exists: a reduction's blocked result is
        `{name}_nchwc` and so was the blocked conversion of its NCHW value (an SE block's mean
        read by a convolution); the plan keys kernels by name, so one node ran the other's
        kernel (issue 55's ShapeError)."""
        fresh, k = name, 2
        while fresh in self.shapes:
            fresh, k = f"{name}_{k}", k + 1
        return fresh

    def to_blocks(self, name: str, block: int) -> str:
        """The blocked value of `name` (converting it once); `block` divides its channels."""
        if name in self.blocked:
            return self.blocked[name]
        n, c, h, w = self.shapes[name]
        dtype = self.dtypes[name]
        if h * w == 1:  # one pixel per channel (a pooled value): the same order blocked, a view
            shape = (n, c // block, 1, 1, block)
            node = Node(self._fresh(f"{name}{SUFFIX}"), "view", (name,), {"shape": shape}, shape, dtype)
            self.blocked[name] = self._emit(node)
            return self.blocked[name]
        split = (n, c // block, block, h, w)
        view = self._emit(Node(self._fresh(f"{name}_blocks"), "view", (name,), {"shape": split}, split, dtype))
        shape = (n, c // block, h, w, block)
        self.blocked[name] = self._emit(
            Node(self._fresh(f"{name}{SUFFIX}"), "permute", (view,), {"dims": (0, 1, 3, 4, 2)}, shape, dtype)
        )
        return self.blocked[name]

    def to_nchw(self, name: str) -> str:
        """`name` in NCHW (converting its blocked value back once, under the original name)."""
        if name in self.nchw or name not in self.blocked:
            return name
        src = self.blocked[name]
        n, cb, h, w, c = self.shapes[src]
        dtype = self.dtypes[src]
        shape = (n, cb * c, h, w)
        if h * w > 1:
            src = self._emit(
                Node(self._fresh(f"{name}_nchw"), "permute", (src,), {"dims": (0, 1, 4, 2, 3)}, (n, cb, c, h, w), dtype)
            )
        self._emit_unpadded(name, src, shape, self.shapes[name])
        self.nchw.add(name)
        return name

    def _emit_unpadded(self, name: str, src: str, shape: tuple, want: tuple) -> None:
        """`name`: `src` viewed as `shape`, its padded channels (axis 1, past want[1]) sliced off."""
        if shape[1] == want[1]:
            self._emit(Node(name, "view", (src,), {"shape": want}, want, self.dtypes[src]))
            return
        view = self._emit(
            Node(self._fresh(f"{name}_padded"), "view", (src,), {"shape": shape}, shape, self.dtypes[src])
        )
        self._emit(Node(name, "slice", (view,), {"axis": 1, "start": 0, "step": 1}, want, self.dtypes[src]))

    def _constant(self, base: str, array) -> str:
        name = self.g.add_constant(f"{base}{SUFFIX}", array, taken=self.shapes)
        self.shapes[name], self.dtypes[name] = array.shape, str(array.dtype)
        return name

    def _per_channel(self, name: str, channels: int, fill: float = 0.0):
        """A constant that broadcasts per channel over [N, C, H, W] ([C, 1, 1], [1, C, 1, 1]) or
        a single element, in the blocked layout, its padded channels `fill`; None for anything
        else."""
        array = self.g.constants.get(name)
        if array is None:
            return None
        if array.size == 1:
            return name
        shape = array.shape
        if len(shape) < 3 or shape[-3:] != (channels, 1, 1) or any(d != 1 for d in shape[:-3]):
            return None
        block, padded = block_of(channels, self.lanes), padded_channels(channels, self.lanes)
        array = _pad_axis(array, array.ndim - 3, padded, fill)
        blocked = array.reshape(shape[:-3] + (padded // block, block, 1, 1))
        return self._constant(name, np.moveaxis(blocked, -3, -1))

    # -- nodes -------------------------------------------------------------------------------------

    def _conv(self, node: Node) -> bool:
        weight = self.g.constants.get(node.inputs[1])
        x = node.inputs[0]
        K, C = node.shape[1], self.shapes[x][1]
        kb = block_of(K, self.lanes)
        if weight is None or weight.ndim != 4 or node.dtype != "float32" or kb is None:
            return False
        if x in self.blocked:
            xb = self.blocked[x]
        elif padded_channels(C, self.lanes) == C and block_of(C, self.lanes):
            xb = self.to_blocks(x, block_of(C, self.lanes))
        elif C < self.lanes:  # a network's input: one block of its few channels
            xb = self.to_blocks(x, C)
        else:
            return False
        cb = self.shapes[xb][-1]
        # zero weights for the padded output channels and for the input's padded channels
        weight = _pad_axis(_pad_axis(weight, 0, padded_channels(K, self.lanes)), 1, self.shapes[xb][1] * cb)
        if winograd_pays(weight.shape, node.attrs, cb, self.lanes, node.shape[2:]):
            u = self._constant(node.inputs[1], winograd_weights(weight, cb, kb))
            self._blocked_node(node, "conv2d_winograd_nchwc", (xb, u), node.attrs)
            return True
        wb = self._constant(node.inputs[1], to_blocked_weight(weight, cb, kb))
        self._blocked_node(node, "conv2d_nchwc", (xb, wb), node.attrs)
        return True

    def _depthwise(self, node: Node) -> bool:
        weight = self.g.constants.get(node.inputs[1])
        x = node.inputs[0]
        if weight is None or weight.shape[0] != self.shapes[x][1]:
            return False  # only a multiplier of 1
        C = self.shapes[x][1]
        if x not in self.blocked:
            # an NCHW input whose channels fill whole vectors (ConvNeXt's first stage: a permute
            # back from its channel-last layer norm) is converted: the conversion fuses with that
            # permute, and the NCHW depthwise template is the slower one (docs/models.md)
            if node.dtype != "float32" or not block_of(C, self.lanes) or padded_channels(C, self.lanes) != C:
                return False
            self.to_blocks(x, block_of(C, self.lanes))
        w = weight.reshape(weight.shape[0], weight.shape[-2], weight.shape[-1])
        _, R, S = w.shape
        blocks, _, _, block = self.shapes[self.blocked[x]][1:]
        w = _pad_axis(w, 0, blocks * block)  # zero filters for padded channels
        wb = np.ascontiguousarray(w.reshape(blocks, block, R, S).transpose(0, 2, 3, 1))
        self._blocked_node(
            node, "depthwise_conv2d_nchwc", (self.blocked[x], self._constant(node.inputs[1], wb)), node.attrs
        )
        return True

    def _elementwise(self, node: Node) -> bool:
        if len(node.shape) != 4 or not any(i in self.blocked for i in node.inputs):
            return False
        channels, block = node.shape[1], block_of(node.shape[1], self.lanes)
        padded = padded_channels(channels, self.lanes) != channels
        divisor = node.inputs[1] if node.op == "div" and len(node.inputs) > 1 else None
        if padded and (node.op == "exp" or (divisor is not None and divisor not in self.g.constants)):
            return False  # padded channels must stay finite: no division by their zeros, no exp overflow
        if block is None:  # channels no vector divides (a value blocked as a network's few colours)
            return False
        inputs = []
        for n, i in enumerate(node.inputs):
            if i in self.blocked:
                if self.shapes[self.blocked[i]][-1] != block or self.shapes[i][1] != channels:
                    return False  # blocked otherwise than this node's result
                inputs.append(self.blocked[i])
            elif i in self.g.constants:
                converted = self._per_channel(i, channels, fill=1.0 if (node.op, n) == ("div", 1) else 0.0)
                if converted is None:
                    return False
                inputs.append(converted)
            else:
                converted = self._broadcast_blocks(i, node.shape, block)
                if converted is None:
                    return False
                inputs.append(converted)
        self._blocked_node(node, node.op, tuple(inputs), node.attrs)
        return True

    def _broadcast_blocks(self, name: str, shape: tuple, block: int) -> str | None:
        """A computed NCHW value that an elementwise node of `shape` reads, blocked: a value of
        that shape (not padded); a per-channel one, (N, C, 1, 1) (a squeeze-excitation gate),
        padded with zero channels; or one of a single channel, (N, 1, H, W), viewed as
        (N, 1, H, W, 1), which broadcasts over the blocks. None for anything else."""
        mine = self.shapes[name]
        if len(mine) != 4 or any(m not in (1, s) for m, s in zip(mine, shape)):
            return None
        n, c, h, w = mine
        if c == 1:
            view = (n, 1, h, w, 1)
            return self._emit(
                Node(self._fresh(f"{name}_bcast"), "view", (name,), {"shape": view}, view, self.dtypes[name])
            )
        if mine == shape and padded_channels(c, self.lanes) == c:
            return self.to_blocks(name, block)
        if h * w != 1:
            return None
        padded, source = padded_channels(c, self.lanes), name
        if padded != c:  # zero channels to whole blocks, as every blocked value has
            wide = (n, padded, 1, 1)
            attrs = {"before": (0, 0, 0, 0), "value": 0.0}
            name = self._emit(Node(self._fresh(f"{name}_padded"), "pad", (name,), attrs, wide, self.dtypes[name]))
        self.blocked[source] = self.to_blocks(name, block)
        return self.blocked[source]

    def _reduction(self, node: Node) -> bool:
        """A reduction over the spatial axes (the global average pool): blocked, its result of one
        pixel per channel is already in NCHW order, so a view gives the NCHW value."""
        x = node.inputs[0]
        if x not in self.blocked or tuple(node.attrs.get("axis") or ()) != (2, 3):
            return False
        src = self.blocked[x]
        n, cb, _, _, c = self.shapes[src]
        shape = (n, cb, 1, 1, c) if node.attrs["keepdims"] else (n, cb, c)
        reduced = self._emit(
            Node(self._fresh(f"{node.name}{SUFFIX}"), node.op, (src,), dict(node.attrs), shape, node.dtype)
        )
        self._emit_unpadded(node.name, reduced, (n, cb * c) + node.shape[2:], node.shape)
        self.nchw.add(node.name)
        if node.attrs["keepdims"]:  # a pooled value (squeeze-excitation's): blocked readers read it as it is
            self.blocked[node.name] = reduced
        return True

    def _blocked_node(self, node: Node, op: str, inputs: tuple, attrs: dict) -> None:
        n, k, h, w = node.shape
        block = block_of(k, self.lanes)
        shape = (n, padded_channels(k, self.lanes) // block, h, w, block)
        self.blocked[node.name] = self._emit(
            Node(self._fresh(f"{node.name}{SUFFIX}"), op, inputs, dict(attrs), shape, node.dtype)
        )

    def _blocked_form(self, node: Node) -> bool:
        """Emit `node` blocked; False where it is read in NCHW."""
        return (
            (node.op == "conv2d" and self._conv(node))
            or (node.op == "depthwise_conv2d" and self._depthwise(node))
            or (node.op in POOLS and self._pool(node))
            or (node.op in ELEMENTWISE and self._elementwise(node))
            or (node.op in REDUCTIONS and self._reduction(node))
        )

    def _guarded(self, node: Node) -> bool:
        """_blocked_form, and where it raises (a bug) with a fallbacks list: what it emitted and
        recorded taken back (the handlers only add entries, so the ones past the marks go),
        the error noted, and the node read in NCHW."""
        marks = len(self.g.nodes), len(self.blocked), len(self.g.constants)
        try:
            return self._blocked_form(node)
        except Exception as e:
            if self.fallbacks is None:
                raise
            removed = {n.name for n in self.g.nodes[marks[0] :]}
            del self.g.nodes[marks[0] :]
            for entries, mark in ((self.blocked, marks[1]), (self.g.constants, marks[2])):
                for key in list(entries)[mark:]:
                    del entries[key]
            self.nchw -= removed
            self.fallbacks.append(Fallback("pass", f"block_channels at node {node.name}", error_text(e)))
            return False

    def run(self) -> Graph:
        for node in self.source.nodes:
            if not self._guarded(node):  # read in NCHW, which keeps each value's original name
                for i in node.inputs:
                    self.to_nchw(i)
                self._emit(node)
                self.nchw.add(node.name)
        self.g.outputs = [self.to_nchw(o) for o in self.g.outputs]
        return self.g.prune()

    def _pool(self, node: Node) -> bool:
        if node.inputs[0] not in self.blocked:
            return False
        self._blocked_node(node, f"{node.op}_nchwc", (self.blocked[node.inputs[0]],), node.attrs)
        return True
