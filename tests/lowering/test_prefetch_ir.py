"""Prefetch requests as loop properties (issue 41): `Loop.prefetch` in the schedule, `For.prefetch`
in the IR, what split, fuse and the loop kinds do with a request, and how the printer and the
verifier read requests and `Prefetch` statements. The LLVM side is tests/templates/test_prefetch.py."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import interpret_outputs, random_inputs, roundtrip

import minitc as tc
from minitc.arith import bounds
from minitc.backends.llvm.prefetch import expand_prefetches
from minitc.errors import IRError, ScheduleError
from minitc.expr import Cast, Var, const
from minitc.ir import Buffer, For, Kernel, Load, Prefetch, PrefetchRequest, Store, seq, walk_stmts
from minitc.lowering.index_check import check_indices
from minitc.printer import format_kernel, format_stmt
from minitc.verify import verify

AVX2 = "llvm -mcpu=x86-64-v3 -num-cores=2"
ph = tc.placeholder


def _setup(M=24, K=20, N=24):
    C = tc.ops.matmul(ph((M, K), name="A"), ph((K, N), name="B"))
    s = tc.Schedule(C)
    BL = s.cache_read(s.tensor("B"), "local", [C])
    i, j, k = s.loops(C)
    s.reorder(i, k, j)
    return s, C, BL, k


def _requests(kernel) -> dict:
    return {f.var.name: f.prefetch for f in walk_stmts(kernel.body) if isinstance(f, For) and f.prefetch}


def _check_numbers(s) -> None:
    kernel = roundtrip(s)  # verified, replayed through JSON, the same IR
    inputs = random_inputs(kernel)
    (want,) = interpret_outputs(kernel, inputs)
    np.testing.assert_allclose(want, inputs[0] @ inputs[1], rtol=1e-5, atol=1e-5)
    got = np.zeros_like(want)
    tc.build(s, AVX2)(*inputs, got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- the schedule: the request is a field of the loop, lowered to a field of the For -------------


def test_the_request_rides_on_the_loop_and_its_for():
    s, C, BL, k = _setup()
    s.unroll(k)
    s.prefetch(k, BL, ahead=2)
    s.prefetch(k, BL, ahead=3)  # the same buffer again: the last request wins
    loop = s.state.stage("matmul").loop("k")
    assert loop.kind == "unrolled" and loop.prefetch == (PrefetchRequest("B_local", 3, 3),)
    assert _requests(tc.lower(s, target=AVX2)) == {"k": (PrefetchRequest("B_local", 3, 3),)}
    _check_numbers(s)


def test_unroll_after_the_prefetch_keeps_it():
    s, C, BL, k = _setup()
    s.prefetch(k, BL, ahead=2)
    s.unroll(k)
    assert s.state.stage("matmul").loop("k").prefetch == (PrefetchRequest("B_local", 2, 3),)


@pytest.mark.parametrize("split", [dict(factor=4), dict(factor=6), dict(nparts=3)])
def test_a_split_moves_the_request_to_the_inner_loop(split):
    """k = k_o * f + k_i is linear in k_i with k's coefficient: k_i + ahead addresses iteration
    k + ahead, so prefetch-then-split is the program of split-then-prefetch-the-inner-loop
    (factor 6 leaves a guarded tail; nparts=3 gives k_i 7 iterations)."""
    s, C, BL, k = _setup()
    s.prefetch(k, BL, ahead=2)
    ko, ki = s.split(k, **split)
    assert s.state.stage("matmul").loop(ko.name).prefetch == ()
    assert s.state.stage("matmul").loop(ki.name).prefetch == (PrefetchRequest("B_local", 2, 3),)

    t, C2, BL2, k2 = _setup()
    ko2, ki2 = t.split(k2, **split)
    t.prefetch(ki2, BL2, ahead=2)
    assert s.state.stage("matmul").loops == t.state.stage("matmul").loops
    assert str(tc.lower(s, target=AVX2)) == str(tc.lower(t, target=AVX2))
    assert tc.codegen(s, AVX2) == tc.codegen(t, AVX2)
    assert "llvm.prefetch" in tc.codegen(s, AVX2)
    _check_numbers(s)


@pytest.mark.parametrize("which", [0, 1])
def test_a_fuse_of_a_prefetching_loop_says_to_prefetch_after_it(which):
    """The fused loop's index is a div / mod of each loop's: no iteration to shift by ahead."""
    C = tc.ops.matmul(ph((24, 20), name="A"), ph((20, 24), name="B"))
    s = tc.Schedule(C)
    BL = s.cache_read(s.tensor("B"), "local", [C])
    i, j, k = s.loops(C)
    ko, ki = s.split(k, factor=4)
    s.reorder(i, j, ko, ki)
    s.prefetch((ko, ki)[which], BL, ahead=1)
    name = (ko, ki)[which].name
    with pytest.raises(ScheduleError, match=rf"loop {name} of stage matmul carries a prefetch of B_local.*fuse first"):
        s.fuse(ko, ki)


@pytest.mark.parametrize(
    "kind, match",
    [
        (lambda s, i: s.parallel(i), "cannot make loop i of stage matmul parallel"),
        (lambda s, i: s.vectorize(i), "cannot make loop i of stage matmul vectorized"),
        (lambda s, i: s.bind(i, "threadIdx.x"), "cannot bind loop i of stage matmul"),
    ],
)
def test_kinds_without_an_iteration_order_refuse_a_prefetching_loop(kind, match):
    C = tc.ops.matmul(ph((24, 20), name="A"), ph((20, 8), name="B"))
    s = tc.Schedule(C)
    BL = s.cache_read(s.tensor("B"), "local", [C])
    i, j, k = s.loops(C)
    s.prefetch(i, BL, ahead=1)
    with pytest.raises(ScheduleError, match=match):
        kind(s, i)


# -- the printer ---------------------------------------------------------------------------------


def _hand():
    s, C, BL, k = _setup()
    ko, ki = s.split(k, factor=4)
    s.unroll(ki)
    s.prefetch(ki, BL, ahead=3)
    return s


def test_the_printer_shows_a_loops_requests_and_the_prefetch_statements():
    kernel = tc.lower(_hand(), target=AVX2)
    text = format_kernel(kernel)
    assert "for k_i in unrolled(4):  # prefetch(B_local, +3, L1)\n" in text
    assert text.count("prefetch(") == 1
    expanded = format_kernel(Kernel(kernel.name, kernel.params, kernel.num_inputs, expand_prefetches(kernel.body)))
    assert "for k_i in unrolled(4):\n" in expanded  # the request is now statements
    assert "prefetch(B_local[k_o * 4 + (k_i + 3), j_pf * 16], L1)" in expanded
    i, pf = Var("i"), Var("i", "int32")
    buf = Buffer("X", (8,), "float32")
    loop = For(pf, 4, "serial", Store(buf, (Cast("int64", pf),), const(0.0, "float32")), (PrefetchRequest("X", 1, 2),))
    assert format_stmt(loop).startswith("for i in range(4):  # int32; prefetch(X, +1, L2)\n")
    assert format_stmt(Prefetch(buf, (i,), 0)) == "prefetch(X[i], nontemporal)"


# -- the verifier --------------------------------------------------------------------------------


def test_the_verifier_accepts_requests_and_prefetches_past_the_end():
    kernel = tc.lower(_hand(), target=AVX2)
    verify(kernel)
    body = expand_prefetches(kernel.body)
    expanded = Kernel(kernel.name, kernel.params, kernel.num_inputs, body)
    verify(expanded)
    check_indices(expanded)  # not an error either
    ranges = {f.var: (0, f.extent - 1) for f in walk_stmts(body) if isinstance(f, For)}
    (pf,) = [st for st in walk_stmts(body) if isinstance(st, Prefetch)]
    assert bounds(pf.indices[0], ranges) == (3, 22) and pf.buffer.shape[0] == 20  # rows 20-22: past the end


def _kernel(stmt, buf):
    return Kernel("k", [buf], 0, stmt)


def test_the_verifier_checks_prefetches():
    X = Buffer("X", (4, 8), "float32")
    i = Var("i")
    verify(_kernel(For(i, 4, "serial", Prefetch(X, (i + 9, const(0)))), X))  # rows past the end: fine
    bad = {
        "dtype int32": For(i, 4, "serial", Prefetch(X, (Cast("int32", i), const(0)))),
        "rank 2": For(i, 4, "serial", Prefetch(X, (i,))),
        "locality 4": For(i, 4, "serial", Prefetch(X, (i, const(0)), 4)),
        "variable j is used outside": For(i, 4, "serial", Prefetch(X, (i, Var("j")))),
        "neither a kernel parameter": For(i, 4, "serial", Prefetch(Buffer("Y", (4,), "float32"), (i,))),
    }
    for match, stmt in bad.items():
        with pytest.raises(IRError, match=match):
            verify(_kernel(stmt, X))


def test_the_verifier_checks_a_loops_requests():
    X = Buffer("X", (8,), "float32")
    i = Var("i")
    store = Store(X, (i,), Load(X, (i,)))
    verify(_kernel(For(i, 8, "unrolled", store, (PrefetchRequest("X", 2),)), X))
    with pytest.raises(IRError, match="parallel loop i carries prefetch requests"):
        verify(_kernel(For(i, 8, "parallel", store, (PrefetchRequest("X", 2),)), X))
    with pytest.raises(IRError, match="0 iterations ahead"):
        verify(_kernel(For(i, 8, "serial", store, (PrefetchRequest("X", 0),)), X))
    with pytest.raises(IRError, match="must be an ir.PrefetchRequest"):
        verify(_kernel(For(i, 8, "serial", seq(store), ("X",)), X))
