"""Matrix products: matmul, batch_matmul and dense (torch.nn.Linear with a fusable epilogue).

Stage naming: the product stage carries the operator's name (`matmul`, `batch_matmul`,
`dense`); dense's epilogue (bias and/or activation) is one more stage named
`<name>_<parts>`, e.g. `dense_bias`, `dense_relu`, `dense_bias_gelu`.
"""

from __future__ import annotations

from minitc import te
from minitc.errors import ShapeError
from minitc.ops import _util
from minitc.ops.elementwise import ACTIVATIONS
from minitc.ops.elementwise import activation as apply_activation
from minitc.te import Tensor, compute, reduce_axis


def matmul(A, B, transpose_a: bool = False, transpose_b: bool = False, name: str | None = None) -> Tensor:
    """C[i, j] = sum_k A[i, k] * B[k, j] for 2-D A [M, K] and B [K, N].

    With transpose_a, A is given as [K, M]; with transpose_b, B is given as [N, K].
    One stage, named `matmul` (or `name`), reduce axis `k`.
    """
    op = "matmul"
    _util.rank(op, "A", A, 2, "[M, K]" if not transpose_a else "[K, M] with transpose_a")
    _util.rank(op, "B", B, 2, "[K, N]" if not transpose_b else "[N, K] with transpose_b")
    M, K = A.shape[::-1] if transpose_a else A.shape
    K2, N = B.shape[::-1] if transpose_b else B.shape
    if K != K2:
        raise ShapeError(
            f"{op}: inner dimensions differ: A {A.shape}{' (transposed)' if transpose_a else ''} gives K={K}, "
            f"B {B.shape}{' (transposed)' if transpose_b else ''} gives K={K2}"
        )
    _util.numeric(op, A, B)
    k = reduce_axis(K, name="k")

    def body(i, j):
        a = A[k, i] if transpose_a else A[i, k]
        b = B[j, k] if transpose_b else B[k, j]
        return te.sum(a * b, axis=k)

    return compute(
        (M, N), body, name=name or op, tag=op, attrs={"transpose_a": transpose_a, "transpose_b": transpose_b}
    )


def batch_matmul(A, B, transpose_a: bool = False, transpose_b: bool = False, name: str | None = None) -> Tensor:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] for A [batch, M, K] and B [batch, K, N].

    Transposes swap the last two axes of the given operand. The batch extents must be equal,
    or one of them 1 (broadcast). One stage, named `batch_matmul` (or `name`).
    """
    op = "batch_matmul"
    _util.rank(op, "A", A, 3, "[batch, M, K]" if not transpose_a else "[batch, K, M] with transpose_a")
    _util.rank(op, "B", B, 3, "[batch, K, N]" if not transpose_b else "[batch, N, K] with transpose_b")
    M, K = A.shape[:0:-1] if transpose_a else A.shape[1:]
    K2, N = B.shape[:0:-1] if transpose_b else B.shape[1:]
    if K != K2:
        raise ShapeError(f"{op}: inner dimensions differ: A {A.shape} gives K={K}, B {B.shape} gives K={K2}")
    if A.shape[0] != B.shape[0] and 1 not in (A.shape[0], B.shape[0]):
        raise ShapeError(f"{op}: batch extents differ: A {A.shape} and B {B.shape} (they must match or one be 1)")
    _util.numeric(op, A, B)
    batch = max(A.shape[0], B.shape[0])
    k = reduce_axis(K, name="k")

    def body(b, i, j):
        ba = 0 if A.shape[0] == 1 else b
        bb = 0 if B.shape[0] == 1 else b
        x = A[ba, k, i] if transpose_a else A[ba, i, k]
        y = B[bb, j, k] if transpose_b else B[bb, k, j]
        return te.sum(x * y, axis=k)

    return compute(
        (batch, M, N), body, name=name or op, tag=op, attrs={"transpose_a": transpose_a, "transpose_b": transpose_b}
    )


def _dense_weight(W, weight_in_out: bool, block: int, out_features) -> tuple:
    """(in features, out features, layout text) of dense's weight W, checked."""
    op = "dense"
    if not block:
        if out_features is not None:
            raise ShapeError(f"{op}: out_features is for a weight in blocks (weight_block) whose last one is padded")
        layout = "[in_features, out_features]" if weight_in_out else "[out_features, in_features]"
        _util.rank(op, "W", W, 2, layout if weight_in_out else f"{layout}, like torch.nn.Linear.weight")
        return (*((W.shape[0], W.shape[1]) if weight_in_out else (W.shape[1], W.shape[0])), layout)
    if weight_in_out or isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ShapeError(f"{op}: weight_block must be a positive int, without weight_in_out; got {block!r}")
    layout = f"[out_features / {block}, in_features, {block}]"
    _util.rank(op, "W", W, 3, layout)
    if W.shape[2] != block:
        raise ShapeError(f"{op}: W {W.shape} is not in blocks of {block} output features {layout}")
    features_out = out_features or W.shape[0] * block
    if not (W.shape[0] - 1) * block < features_out <= W.shape[0] * block:
        raise ShapeError(f"{op}: W {W.shape} holds {W.shape[0]} blocks of {block}, not {features_out} outputs")
    return W.shape[1], features_out, layout


def dense(
    X,
    W,
    bias=None,
    activation=None,
    name: str | None = None,
    weight_in_out: bool = False,
    weight_block: int = 0,
    out_features: int | None = None,
) -> Tensor:
    """Y = act(X @ W.T + bias), like torch.nn.Linear: X [M, IN], W [OUT, IN], bias [OUT].

    `weight_in_out=True` takes W stored transposed, [IN, OUT] (a constant weight pre-transposed
    once, or GPT-2's Conv1D weight): the template then packs it into panels by plain copies.
    `weight_block=B` takes W in blocks of B output features, [OUT/B, IN, B] (a constant weight
    packed once): the template reads its vectors in place, each block one contiguous stream.
    Where B does not divide OUT, the last block is padded and `out_features` says OUT.

    `activation` is None, "relu", "gelu" (exact erf form), "sigmoid" or "tanh". Stages: the
    product `dense` (or `name`), then, only when there is a bias or an activation, a single
    elementwise epilogue stage `dense_bias`, `dense_relu`, `dense_bias_gelu`, ... that a
    schedule can fuse into the product.
    """
    op = "dense"
    _util.rank(op, "X", X, 2, "[batch, in_features]")
    features_in, features_out, layout = _dense_weight(W, weight_in_out, weight_block, out_features)
    if X.shape[1] != features_in:
        raise ShapeError(
            f"{op}: X {X.shape} has {X.shape[1]} input features but W {W.shape} expects {features_in} (W is {layout})"
        )
    if activation is not None and activation not in ACTIVATIONS:
        raise ShapeError(
            f"{op}: unknown activation {activation!r}; use None or one of {', '.join(map(repr, ACTIVATIONS))}"
        )
    if bias is not None:
        _util.rank(op, "bias", bias, 1, "[out_features]")
        if bias.shape[0] != features_out:
            raise ShapeError(f"{op}: bias has {bias.shape[0]} elements but W {W.shape} has {features_out} outputs")
        _util.numeric(op, X, W, bias)
    else:
        _util.numeric(op, X, W)
    base = name or op
    k = reduce_axis(X.shape[1], name="k")

    def product(i, j):
        if weight_block:
            return te.sum(X[i, k] * W[j // weight_block, k, j % weight_block], axis=k)
        return te.sum(X[i, k] * (W[k, j] if weight_in_out else W[j, k]), axis=k)

    Y = compute((X.shape[0], features_out), product, name=base, tag="dense")
    if bias is None and activation is None:
        return Y
    parts = (["bias"] if bias is not None else []) + ([activation] if activation is not None else [])

    def epilogue(i, j):
        y = Y[i, j] if bias is None else Y[i, j] + bias[j]
        return y if activation is None else apply_activation(op, activation, y)

    attrs = {"bias": bias is not None, "activation": activation, "producer": base}
    return compute(Y.shape, epilogue, name="_".join([base] + parts), tag="dense_epilogue", attrs=attrs)
