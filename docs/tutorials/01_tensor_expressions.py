# %% [markdown]
# # 1. Tensor expressions and the loop nests they lower to
#
# A tensor compiler separates *what* to compute from *how* to compute it. In minitc the "what"
# is a tensor expression: each output element written as a formula over input elements. The
# "how" is a schedule (tutorial 2). This tutorial stays with the "what": it defines an
# elementwise op, a row sum, a matmul and a fused `relu(A + B)`, prints the naive loop nest
# each one lowers to, checks that minitc's two numpy oracles agree with the compiled code, and
# peeks at the LLVM IR. At the end it shows the errors you will meet first.
#
# Run it from the repository root: `python docs/tutorials/01_tensor_expressions.py`
# (`MINITC_TUTORIAL_FAST=1` for small shapes).

# %%
import os

import numpy as np

import minitc as tc
from minitc.interp import interpret
from minitc.te_eval import evaluate

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
rng = np.random.default_rng(0)

# %% [markdown]
# ## Placeholders and an elementwise compute
#
# `tc.placeholder(shape, dtype, name)` declares an input: a tensor with no formula. `tc.compute`
# declares an output by a shape and a function from an index to a value. The lambda is called
# once, with symbolic index variables `i` and `j`, so its result is an expression tree, not a
# number. Lowering the naive schedule (`tc.Schedule(C)` with no primitives applied) turns every
# axis of the output into one loop, outermost first, and the formula into one store per
# element. The printout is pseudo-Python: inputs are the parameters, outputs come after `->`.

# %%
A = tc.placeholder((4, 8), "float32", name="A")
B = tc.placeholder((4, 8), "float32", name="B")
C = tc.compute((4, 8), lambda i, j: A[i, j] + B[i, j], name="C")
print(C)
print(tc.lower(tc.Schedule(C)))

# %% [markdown]
# ## A reduction: row sums
#
# A reduction needs an axis that is *not* an axis of the output: `tc.reduce_axis(extent)`. Used
# inside `tc.sum(..., axis=k)` it says "add up over k". The loop nest shows how a reduction
# maps to loops: the spatial loop `i` of the output, then the reduction loop `k` inside it.
# Each output element gets an **init** statement (`R[i] = 0.0`, the identity of `+`) before
# the reduction loop and an **update** (`R[i] = R[i] + A[i, k]`) inside it. `tc.max` and
# `tc.min` start from `-inf` and `+inf` instead.

# %%
k = tc.reduce_axis(8, name="k")
R = tc.compute((4,), lambda i: tc.sum(A[i, k], axis=k), name="R")
print(tc.lower(tc.Schedule(R)))

# %% [markdown]
# ## A matmul
#
# Matrix multiply is a reduction too: `C[i, j] = sum_k A[i, k] * B[k, j]`. The naive loop nest
# has the two spatial loops of the output and the reduction loop innermost. This order is the
# textbook one and a slow one: the inner loop walks `B` down a column, one cache line per
# element. Tutorial 2 reorders and tiles these loops; the formula never changes.

# %%
M, N, K = 4, 6, 8
MA = tc.placeholder((M, K), "float32", name="MA")
MB = tc.placeholder((K, N), "float32", name="MB")
kk = tc.reduce_axis(K, name="k")
MC = tc.compute((M, N), lambda i, j: tc.sum(MA[i, kk] * MB[kk, j], axis=kk), name="MC")
print(tc.lower(tc.Schedule(MC)))

# %% [markdown]
# ## A producer and its consumer: `relu(A + B)`
#
# A compute may read another compute. Here `S = A + B` is the producer and `Y = relu(S)` its
# consumer. Naively each stage gets its own loop nest, and `S` gets a buffer of its own:
# `alloc("global", float32[4, 8])` is a full-size temporary, written by one loop nest and read
# back by the next. For a large tensor that is a round trip through memory for every element.
#
# `s.compute_inline(S)` substitutes `S`'s formula into every place that reads it. The
# temporary and its loop nest disappear: one pass, one load of each input, one store.
# (Inlining needs an elementwise producer: a reduction cannot be substituted into a formula.)

# %%
S = tc.compute((4, 8), lambda i, j: A[i, j] + B[i, j], name="S")
Y = tc.compute((4, 8), lambda i, j: tc.maximum(S[i, j], 0.0), name="Y")
s = tc.Schedule(Y)
print("before compute_inline:")
print(tc.lower(s))
s.compute_inline(S)
print("after compute_inline:")
print(tc.lower(s))

# %% [markdown]
# ## What a loop nest means: the reference interpreter
#
# `tc.lower` returns a `Kernel`, a tree of loops, stores and loads. Its meaning is defined by a
# reference interpreter, `minitc.interp.interpret(kernel, arrays)`: it runs the loop nest with
# numpy scalars, serially, in the printed order, raising on any out-of-bounds access. Every
# backend must compute what the interpreter computes. It is slow (a Python call per element)
# and is meant for small shapes.
#
# A second, independent oracle is `minitc.te_eval.evaluate(outputs, inputs)`: it evaluates the
# *tensor expression* with whole-array numpy calls (a contraction goes to `np.einsum`),
# without lowering at all. The tuner checks every candidate program against it.
#
# The arrays are passed in the kernel's parameter order: inputs, then outputs, which the
# interpreter fills in place.

# %%
ma = rng.standard_normal((M, K)).astype("float32")
mb = rng.standard_normal((K, N)).astype("float32")
kernel = tc.lower(tc.Schedule(MC))
print("parameters:", [p.name for p in kernel.params])
mc_interp = np.zeros((M, N), "float32")
interpret(kernel, [ma, mb, mc_interp])
(mc_eval,) = evaluate(MC, {MA: ma, MB: mb})
np.testing.assert_allclose(mc_interp, ma @ mb, rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(mc_eval, ma @ mb, rtol=1e-5, atol=1e-5)
print("interpreter and te_eval both match numpy's a @ b")

# %% [markdown]
# ## Building and checking against numpy
#
# `tc.build(schedule)` lowers the schedule, renders LLVM IR, optimises it for this CPU and
# compiles it to machine code; the result is a callable. It takes numpy arrays (or contiguous
# CPU torch tensors), checks their shapes and dtypes, and returns a fresh output, or writes
# into `out=`. `tc.build(tc.Schedule(T))` always gives the naive loop nest; `tc.build(T)` on a
# tensor of `tc.ops` would use the operator's hand-written template instead (tutorial 4).
#
# Every kernel below is compiled and compared with numpy. The shapes are larger than the ones
# printed above: the loop nests are the same, with bigger extents.

# %%
n = 64 if FAST else 512


def kernels(n):
    """The four tensor expressions of this tutorial at size n, with numpy twins."""
    A = tc.placeholder((n, n), "float32", name="A")
    B = tc.placeholder((n, n), "float32", name="B")
    k = tc.reduce_axis(n, name="k")
    add = tc.compute((n, n), lambda i, j: A[i, j] + B[i, j], name="add")
    rowsum = tc.compute((n,), lambda i: tc.sum(A[i, k], axis=k), name="rowsum")
    k2 = tc.reduce_axis(n, name="k")
    matmul = tc.compute((n, n), lambda i, j: tc.sum(A[i, k2] * B[k2, j], axis=k2), name="matmul")
    S = tc.compute((n, n), lambda i, j: A[i, j] + B[i, j], name="S")
    relu = tc.compute((n, n), lambda i, j: tc.maximum(S[i, j], 0.0), name="relu")
    return {
        "add": (add, [A, B], lambda a, b: a + b),
        "rowsum": (rowsum, [A], lambda a: a.sum(axis=1)),
        "matmul": (matmul, [A, B], lambda a, b: a @ b),
        "relu(A+B)": (relu, [A, B], lambda a, b: np.maximum(a + b, 0)),
    }


for name, (out, inputs, reference) in kernels(n).items():
    s = tc.Schedule(out)
    if name == "relu(A+B)":
        s.compute_inline("S")  # a stage can be named by its name
    f = tc.build(s)
    arrays = [rng.standard_normal(t.shape).astype("float32") for t in inputs]
    got = f(*arrays)
    np.testing.assert_allclose(got, reference(*arrays), rtol=1e-4, atol=1e-4)
    print(f"{name:10s} {str(out.shape):12s} matches numpy")

# %% [markdown]
# The tolerance is not zero because float addition is not associative: numpy sums a row in a
# different order (pairwise, in vector lanes) than the naive loop (left to right), and the
# results differ in the last bits. Tutorial 4 comes back to this when it vectorizes a
# reduction.
#
# ## A look at the LLVM IR
#
# `tc.codegen(schedule)` returns the LLVM IR that a build would compile, without compiling it
# (`f.llvm_ir` and `f.asm` hold the same for a built kernel). Each loop becomes a block with a
# `phi` node for its counter; each `A[i, j]` becomes an address computation (`i * 8 + j`), a
# `getelementptr` and a `load`. The parameters are plain pointers marked `noalias`, which
# tells LLVM's optimiser that the output never overlaps an input, so it may vectorize freely.
# The lines below are the start of the elementwise `C = A + B` from the first cell.

# %%
ir = tc.codegen(tc.Schedule(C))
body = ir[ir.index("define void") :]
print("\n".join(body.splitlines()[:27]))

# %% [markdown]
# ## Errors you will meet
#
# Mistakes are caught as early as possible, each with a `tc.MinitcError` subclass whose
# message says what to fix. Index the wrong number of dimensions, and `tc.compute` refuses at
# definition time. Mix shapes in an operator of `tc.ops`, and it says which axis disagrees.
# Mix dtypes, and it asks for an explicit `tc.cast`.

# %%
X3 = tc.placeholder((3, 8), "float32", name="X3")
Ints = tc.placeholder((4, 8), "int32", name="Ints")
attempts = {
    "index with too few indices": lambda: tc.compute((4, 8), lambda i, j: A[i] + B[i, j]),
    "shapes that do not broadcast": lambda: tc.ops.add(A, X3),
    "float32 plus int32": lambda: tc.compute((4, 8), lambda i, j: A[i, j] + Ints[i, j]),
}
for what, attempt in attempts.items():
    try:
        attempt()
        raise AssertionError(f"{what}: expected an error")
    except tc.MinitcError as e:
        print(f"{what}:\n  {type(e).__name__}: {e}")

# %% [markdown]
# An index that runs off the end of a tensor is legal to *write*: `B[i, j + 1]` is a fine
# formula for a tensor one column wider. It is caught when lowering, before any code exists:
# minitc proves every load and store in bounds over the loop ranges, and otherwise names the
# tensor, the index and its range. Reads that really go past an edge (padding) are guarded
# with `tc.select(condition, value, pad)`.

# %%
shifted = tc.compute((4, 8), lambda i, j: A[i, j] + B[i, j + 1], name="shifted")
try:
    tc.lower(tc.Schedule(shifted))
    raise AssertionError("expected an out-of-bounds error")
except tc.ShapeError as e:
    print(f"ShapeError: {e}")

padded = tc.compute((4, 8), lambda i, j: A[i, j] + tc.select(j + 1 < 8, B[i, j + 1], 0.0), name="p")
a = rng.standard_normal((4, 8)).astype("float32")
b = rng.standard_normal((4, 8)).astype("float32")
expected = a + np.pad(b[:, 1:], ((0, 0), (0, 1)))
np.testing.assert_allclose(tc.build(tc.Schedule(padded))(a, b), expected, rtol=1e-6)
print("guarded with tc.select: builds, and matches numpy")

# %% [markdown]
# Finally, a compiled kernel checks what you call it with: the shapes and dtypes of the
# arrays must be exactly those of the placeholders (no silent broadcasting or conversion).

# %%
f = tc.build(tc.Schedule(C))
for what, args in {
    "wrong shape": (np.zeros((4, 7), "float32"), b),
    "wrong dtype": (a.astype("float64"), b),
}.items():
    try:
        f(*args)
        raise AssertionError(f"{what}: expected an error")
    except tc.MinitcError as e:
        print(f"{what}:\n  {type(e).__name__}: {e}")

# %% [markdown]
# Next: tutorial 2 keeps these formulas and changes only the loop nest, one schedule primitive
# at a time.
