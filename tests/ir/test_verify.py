"""The IR verifier: well-formed kernels pass, each malformed construct gets its own message."""

import pytest

from minitc.errors import IRError
from minitc.expr import Var, cast, const
from minitc.ir import Allocate, Buffer, For, IfThenElse, Kernel, Load, Store, seq
from minitc.verify import verify

A = Buffer("A", (8, 8), "float32")
B = Buffer("B", (8, 8), "float32")


def kernel(body, params=(A, B), num_inputs=1):
    return Kernel("k", list(params), num_inputs, body)


def copy(i, j, src=A, dst=B):
    return Store(dst, (i, j), Load(src, (i, j)))


def test_tiled_kernel_with_everything_verifies():
    """Parallel outer loop, a local tile allocated inside it, unrolled and vectorized loops,
    a guard and an else branch."""
    T = Buffer("T", (8,), "float32", "local")
    io, ii, j1, j2 = Var("io"), Var("ii"), Var("j"), Var("j")
    i = io * 4 + ii
    body = For(
        io,
        2,
        "parallel",
        For(
            ii,
            4,
            "unrolled",
            Allocate(
                T,
                seq(
                    For(j1, 8, "vectorized", Store(T, (j1,), Load(A, (i, j1)) * 2.0)),
                    For(
                        j2,
                        8,
                        "serial",
                        IfThenElse(j2 < 4, Store(B, (i, j2), Load(T, (j2,))), Store(B, (i, j2), const(0.0))),
                    ),
                ),
            ),
        ),
    )
    verify(kernel(body))


def test_same_var_in_sequential_loops_is_fine():
    i, j = Var("i"), Var("j")
    nest = For(i, 8, "serial", For(j, 8, "serial", copy(i, j)))
    verify(kernel(seq(nest, For(i, 8, "serial", For(j, 8, "serial", copy(i, j))))))


def test_unbound_variable():
    i, j = Var("i"), Var("j")
    with pytest.raises(IRError, match=r"kernel k, in loop i: variable j is used outside any loop that binds it"):
        verify(kernel(For(i, 8, "serial", copy(i, j))))


def test_variable_used_after_its_loop():
    i, j = Var("i"), Var("j")
    body = seq(For(i, 8, "serial", For(j, 8, "serial", copy(i, j))), Store(B, (i, const(0)), const(1.0)))
    with pytest.raises(IRError, match=r"at top level: variable i is used outside"):
        verify(kernel(body))


def test_nested_rebinding():
    i = Var("i")
    with pytest.raises(IRError, match=r"in loop i: loop variable i is already bound by an enclosing loop"):
        verify(kernel(For(i, 8, "serial", For(i, 8, "serial", copy(i, i)))))


def test_unknown_buffer():
    T = Buffer("T", (8, 8), "float32", "local")
    i, j = Var("i"), Var("j")
    with pytest.raises(IRError, match=r"in loop i > loop j: load from buffer T, which is neither a kernel parameter"):
        verify(kernel(For(i, 8, "serial", For(j, 8, "serial", copy(i, j, src=T)))))


def test_buffer_used_outside_its_allocate():
    T = Buffer("T", (8,), "float32", "local")
    i = Var("i")
    fill = Allocate(T, For(i, 8, "serial", Store(T, (i,), const(0.0))))
    body = seq(fill, For(i, 8, "serial", Store(B, (i, i), Load(T, (i,)))))
    with pytest.raises(IRError, match="load from buffer T, which is neither"):
        verify(kernel(body))


def test_index_count():
    i = Var("i")
    with pytest.raises(IRError, match=r"store to B with 1 indices, but the buffer has rank 2"):
        verify(kernel(For(i, 8, "serial", Store(B, (i,), const(0.0)))))


def test_float_index():
    i = Var("i")
    with pytest.raises(IRError, match=r"index 1 of load from A has dtype float32; indices must be integers"):
        verify(kernel(For(i, 8, "serial", Store(B, (i, i), Load(A, (i, cast(i, "float32")))))))


def test_store_dtype():
    i = Var("i")
    with pytest.raises(IRError, match=r"store to B of a float64 value; the buffer is float32"):
        verify(kernel(For(i, 8, "serial", Store(B, (i, i), const(1.0, "float64")))))


@pytest.mark.parametrize("extent", [0, -4, 2.5, True])
def test_bad_extent(extent):
    i = Var("i")
    with pytest.raises(IRError, match=r"loop i has extent .*; extents must be positive ints"):
        verify(kernel(For(i, extent, "serial", copy(i, i))))


def test_unknown_loop_kind():
    i = Var("i")
    with pytest.raises(IRError, match=r"loop i has unknown kind 'pipelined'"):
        verify(kernel(For(i, 8, "pipelined", copy(i, i))))


def test_if_condition_not_bool():
    i = Var("i")
    with pytest.raises(IRError, match=r"in loop i: if condition has dtype int64; it must be bool"):
        verify(kernel(For(i, 8, "serial", IfThenElse(i + 1, copy(i, i)))))


def test_vectorized_containing_loop():
    i, j = Var("i"), Var("j")
    with pytest.raises(IRError, match=r"vectorized loop i contains loop j"):
        verify(kernel(For(i, 8, "vectorized", For(j, 8, "serial", copy(i, j)))))


def test_vectorized_containing_allocate():
    T = Buffer("T", (1,), "float32", "local")
    i = Var("i")
    body = For(i, 8, "vectorized", Allocate(T, Store(T, (const(0),), const(0.0))))
    with pytest.raises(IRError, match=r"vectorized loop i contains an allocation of T"):
        verify(kernel(body))


def test_vectorized_too_wide():
    W = Buffer("W", (128,), "float32")
    i = Var("i")
    with pytest.raises(IRError, match=r"vectorized loop i has extent 128 > 64"):
        verify(kernel(For(i, 128, "vectorized", Store(W, (i,), const(0.0))), params=(W,), num_inputs=0))


def test_nested_parallel():
    i, j = Var("i"), Var("j")
    with pytest.raises(IRError, match=r"in loop i: parallel loop j is nested inside another parallel loop"):
        verify(kernel(For(i, 8, "parallel", For(j, 8, "parallel", copy(i, j)))))


def test_local_store_race_in_parallel_loop():
    T = Buffer("T", (8,), "float32", "local")
    i, j = Var("i"), Var("j")
    body = Allocate(T, For(i, 8, "parallel", For(j, 8, "serial", Store(T, (j,), Load(A, (i, j))))))
    message = r"in alloc T > loop i > loop j: store to local buffer T inside a parallel loop.*data race"
    with pytest.raises(IRError, match=message):
        verify(kernel(body))


def test_global_intermediate_outside_parallel_loop_is_fine():
    G = Buffer("G", (8, 8), "float32", "global")
    i, j = Var("i"), Var("j")
    produce = For(i, 8, "parallel", For(j, 8, "serial", copy(i, j, dst=G)))
    consume = For(i, 8, "parallel", For(j, 8, "serial", copy(i, j, src=G)))
    body = Allocate(G, seq(produce, consume))
    verify(kernel(body))


def test_allocate_of_parameter():
    i = Var("i")
    with pytest.raises(IRError, match=r"at top level: Allocate of B, which is a kernel parameter"):
        verify(kernel(Allocate(B, For(i, 8, "serial", copy(i, i)))))


def test_first_error_wins():
    """Two problems: the one met first in printing order is reported."""
    i, j = Var("i"), Var("j")
    body = seq(For(i, 8, "serial", Store(B, (i,), const(0.0))), For(j, 0, "serial", copy(j, j)))
    with pytest.raises(IRError, match="store to B with 1 indices"):
        verify(kernel(body))
