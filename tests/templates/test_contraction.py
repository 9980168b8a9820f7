"""The GEMM structure of computations written by hand (templates/contraction.py, issue 52):
batch, M, N and K axes and the vector operand on each operand layout, convolutions written by
hand as implicit GEMMs, and the computations that are no contraction. The generic default
takes its register tile's rows from the M axes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import table_target

import minitc as tc
from minitc.autotune.rule_defaults import register_tile
from minitc.schedule import Schedule
from minitc.templates.contraction import find_contraction

ph = tc.placeholder


def _stage(out):
    return Schedule(out).state.stage(out.name)


def einsum(spec: str, size: int = 4):
    """C = einsum(spec) of placeholders A and B written with tc.compute (every extent `size`);
    output axes are named i0, i1, ... by position, reduction axes by their letter."""
    operands, out = spec.split("->")
    a_letters, b_letters = operands.split(",")
    A, B = ph((size,) * len(a_letters), name="A"), ph((size,) * len(b_letters), name="B")
    reduced = [ch for ch in dict.fromkeys(a_letters + b_letters) if ch not in out]
    rs = {ch: tc.reduce_axis(size, ch) for ch in reduced}

    def body(*axes):
        at = {**dict(zip(out, axes)), **rs}
        return tc.sum(
            A[tuple(at[ch] for ch in a_letters)] * B[tuple(at[ch] for ch in b_letters)], axis=list(rs.values())
        )

    C = tc.compute((size,) * len(out), body, name="C")
    return C, {ch: f"i{n}" for n, ch in enumerate(out)}


# spec: (the operand loaded as vectors, batch, M, N, the vector axis), in the spec's letters
LAYOUTS = {
    "ik,kj->ij": ("B", "", "i", "j", "j"),  # A.B
    "ki,kj->ij": ("B", "", "i", "j", "j"),  # At.B
    "ik,jk->ij": ("B", "", "i", "j", None),  # A.Bt: neither reads an N axis contiguously
    "ki,jk->ij": ("A", "", "j", "i", None),  # At.Bt: A reads i contiguously, so A takes B's role
    "bhqd,bhkd->bhqk": ("B", "bh", "q", "k", None),  # attention's scores
    "bhqk,bhkd->bhqd": ("B", "bh", "q", "d", "d"),  # attention's weighted values
    "bsk,kn->bsn": ("B", "", "bs", "n", "n"),  # a 3-D tensor times a matrix
    "bsk,nk->bsn": ("B", "", "bs", "n", None),  # a linear layer's weight [N, K]
}


@pytest.mark.parametrize("spec", LAYOUTS)
def test_contraction_roles_on_each_layout(spec):
    C, name = einsum(spec)
    c = find_contraction(_stage(C))
    b, batch, m, n, vector = LAYOUTS[spec]
    assert (c.b, c.a) == ((b, "A") if b == "B" else (b, "B"))
    assert (c.batch, c.m, c.n) == tuple(tuple(name[ch] for ch in axes) for axes in (batch, m, n))
    assert c.vector == (name[vector] if vector else None) and c.windows == ()
    assert set(c.k) == set(spec.split("->")[0].replace(",", "")) - set(spec.split("->")[1])


def _conv(layout: str):
    rh, rw, rc = tc.reduce_axis(3, "rh"), tc.reduce_axis(3, "rw"), tc.reduce_axis(4, "rc")
    if layout == "nhwc":
        X, W = ph((1, 7, 7, 4), name="X"), ph((3, 3, 4, 8), name="W")
        return tc.compute(
            (1, 5, 5, 8),
            lambda n, y, x, o: tc.sum(X[n, y + rh, x + rw, rc] * W[rh, rw, rc, o], axis=[rh, rw, rc]),
            name="Y",
        )
    if layout == "nchw":
        X, W = ph((1, 4, 7, 7), name="X"), ph((8, 4, 3, 3), name="W")
        return tc.compute(
            (1, 8, 5, 5),
            lambda n, o, y, x: tc.sum(X[n, rc, y + rh, x + rw] * W[o, rc, rh, rw], axis=[rc, rh, rw]),
            name="Y",
        )
    X, W = ph((1, 4, 7, 7), name="X"), ph((4, 3, 3), name="W")  # depthwise
    return tc.compute(
        (1, 4, 5, 5), lambda n, c, y, x: tc.sum(X[n, c, y + rh, x + rw] * W[c, rh, rw], axis=[rh, rw]), name="Y"
    )


CONVS = {
    "nhwc": ("X", "W", (), ("n", "y", "x"), ("o",), "o"),
    "nchw": ("X", "W", (), ("n", "y", "x"), ("o",), None),
    "depthwise": ("X", "W", ("c",), ("n", "y", "x"), (), None),
}


@pytest.mark.parametrize("layout", CONVS)
def test_convolutions_written_by_hand_are_implicit_gemms(layout):
    c = find_contraction(_stage(_conv(layout)))
    assert (c.a, c.b, c.batch, c.m, c.n, c.vector) == CONVS[layout]
    assert set(c.windows) == {("y", "rh"), ("x", "rw")} and set(c.k) >= {"rh", "rw"}


def test_what_is_no_contraction():
    X, m = ph((4, 8), name="X"), ph((4,), name="m")
    r = tc.reduce_axis(8, "r")
    squares = tc.compute((4,), lambda i: tc.sum((X[i, r] - m[i]) * (X[i, r] - m[i]), axis=r), name="S")
    largest = tc.compute((4,), lambda i: tc.max(X[i, r] * X[i, r], axis=r), name="M")
    plain = tc.compute((4,), lambda i: tc.sum(X[i, r], axis=r), name="P")
    relu = tc.ops.relu(X)
    for out in (squares, largest, plain, relu):
        assert find_contraction(_stage(out)) is None, out.name


def test_the_register_tile_rows_are_an_m_axis():
    """C[i, j1, j2] = sum_r A[i, r] * B[r, j1, j2]: rows on j1 would load a vector of B per
    row; on i, each vector of B serves every row. The result matches numpy."""
    A, B = ph((64, 32), name="A"), ph((32, 8, 64), name="B")
    r = tc.reduce_axis(32, "r")
    C = tc.compute((64, 8, 64), lambda i, j1, j2: tc.sum(A[i, r] * B[r, j1, j2], axis=r), name="C")
    tile = register_tile(_stage(C), table_target("skylake-avx512"), 64)
    assert tile.of("i") > 1 and tile.of("j1") == 1 and tile.of("j2") % 16 == 0
    a, b = np.random.rand(64, 32).astype("float32"), np.random.rand(32, 8, 64).astype("float32")
    np.testing.assert_allclose(tc.build(C, "llvm")(a, b), np.einsum("ir,rjk->ijk", a, b), rtol=1e-4)
