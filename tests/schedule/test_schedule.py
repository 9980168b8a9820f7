"""Every schedule primitive: golden loop nest, trace round trip, and the interpreter's result
against numpy; illegal uses raise ScheduleError naming the loop and the reason."""

import numpy as np
import pytest
from helpers import check_golden, interpret_outputs, random_inputs, roundtrip

import minitc as tc

M, N, K = 10, 12, 6


def matmul():
    A = tc.placeholder((M, K), name="A")
    B = tc.placeholder((K, N), name="B")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def dense_relu():
    """matmul, then bias + relu as a separate (epilogue) stage."""
    A, B, C = matmul()
    bias = tc.placeholder((N,), name="bias")
    R = tc.compute((M, N), lambda i, j: tc.maximum(C[i, j] + bias[j], 0.0), name="R")
    return A, B, bias, C, R


def check(s, name, update_golden, reference):
    kernel = roundtrip(s)
    check_golden(name, str(kernel), update_golden)
    inputs = random_inputs(kernel)
    (out,) = interpret_outputs(kernel, inputs)
    np.testing.assert_allclose(out, reference(*inputs), rtol=1e-5, atol=1e-5)
    return kernel


def ref_matmul(a, b):
    return a @ b


def ref_dense_relu(a, b, bias):
    return np.maximum(a @ b + bias, 0)


def test_naive(update_golden):
    *_, C = matmul()
    check(tc.Schedule(C), "naive_matmul", update_golden, ref_matmul)


def test_split_factor_non_divisible(update_golden):
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    io, ii = s.split(i, factor=4)
    assert (io.name, ii.name) == ("i_o", "i_i")
    kernel = check(s, "split_factor", update_golden, ref_matmul)
    assert "if i_o * 4 + i_i < 10" in str(kernel)


def test_split_nparts(update_golden):
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.split(j, nparts=5)
    check(s, "split_nparts", update_golden, ref_matmul)


def test_reorder(update_golden):
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.reorder(k, j, i)
    check(s, "reorder", update_golden, ref_matmul)


def test_fuse(update_golden):
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    f = s.fuse(i, j)
    fo, fi = s.split(f, factor=16)
    check(s, "fuse", update_golden, ref_matmul)


def test_loop_kinds(update_golden):
    """The issue's quickstart schedule, on a shape with partial tiles."""
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, kk = s.loops(C)
    io, ii = s.split(i, factor=4)
    jo, ji = s.split(j, factor=8)
    s.reorder(io, jo, kk, ii, ji)
    s.vectorize(ji)
    s.unroll(ii)
    s.parallel(io)
    kernel = check(s, "loop_kinds", update_golden, ref_matmul)
    text = str(kernel)
    assert "parallel(3)" in text and "vectorized(8)" in text and "unrolled(4)" in text


def test_cache_write_compute_at(update_golden):
    *_, C = matmul()
    s = tc.Schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s.loops(C)
    io, ii = s.split(i, factor=4)
    jo, ji = s.split(j, factor=8)
    s.reorder(io, jo, ii, ji)
    s.compute_at(CL, jo)
    ci, cj, ck = s.loops(CL)
    s.reorder(ck, ci, cj)
    s.unroll(ci)
    s.vectorize(cj)
    kernel = check(s, "cache_write_compute_at", update_golden, ref_matmul)
    assert 'alloc("local", float32[4, 8]) as C_local' in str(kernel)


def test_cache_read(update_golden):
    A, B, C = matmul()
    s = tc.Schedule(C)
    BL = s.cache_read(B, "local", [C])
    i, j, k = s.loops(C)
    jo, ji = s.split(j, factor=4)
    s.reorder(jo, i, k, ji)
    s.compute_at(BL, jo)  # pack a K x 4 panel of B per jo
    kernel = check(s, "cache_read", update_golden, ref_matmul)
    assert 'alloc("local", float32[6, 4]) as B_local' in str(kernel)


def test_reverse_compute_at(update_golden):
    A, B, bias, C, R = dense_relu()
    s = tc.Schedule(R)
    i, j, k = s.loops(C)
    io, ii = s.split(i, factor=4)
    s.reorder(io, j, k, ii)
    s.reverse_compute_at(R, io)
    check(s, "reverse_compute_at", update_golden, ref_dense_relu)


def test_compute_at_epilogue_producer(update_golden):
    A, B, bias, C, R = dense_relu()
    s = tc.Schedule(R)
    i, j = s.loops(R)
    jo, ji = s.split(j, factor=4)
    s.reorder(jo, i, ji)
    s.compute_at(C, jo)
    check(s, "compute_at", update_golden, ref_dense_relu)


def test_compute_inline(update_golden):
    x = tc.placeholder((M, N), name="x")
    y = tc.compute((M, N), lambda i, j: x[i, j] * 2.0, name="y")
    z = tc.compute((M, N), lambda i, j: tc.exp(y[i, j]) + 1.0, name="z")
    s = tc.Schedule(z)
    s.compute_inline(y)
    kernel = check(s, "compute_inline", update_golden, lambda a: np.exp(a * 2) + 1)
    assert "y" not in [b.name for b in kernel.params]


def test_softmax_stages(update_golden):
    x = tc.placeholder((M, N), name="x")
    k1 = tc.reduce_axis(N, name="k")
    mx = tc.compute((M,), lambda i: tc.max(x[i, k1], axis=k1), name="mx")
    e = tc.compute((M, N), lambda i, j: tc.exp(x[i, j] - mx[i]), name="e")
    k2 = tc.reduce_axis(N, name="k")
    sm = tc.compute((M,), lambda i: tc.sum(e[i, k2], axis=k2), name="sm")
    y = tc.compute((M, N), lambda i, j: e[i, j] / sm[i], name="y")
    s = tc.Schedule(y)
    i, j = s.loops(y)
    s.parallel(i)
    s.compute_at(mx, i)
    s.compute_at(e, i)
    s.compute_at(sm, i)

    def ref(a):
        ex = np.exp(a - a.max(1, keepdims=True))
        return ex / ex.sum(1, keepdims=True)

    kernel = check(s, "softmax_stages", update_golden, ref)
    assert str(kernel).count("alloc(") == 3


def test_multiple_outputs():
    x = tc.placeholder((M,), name="x")
    a = tc.compute((M,), lambda i: x[i] + 1.0, name="a")
    b = tc.compute((M,), lambda i: a[i] * 2.0, name="b")
    s = tc.Schedule([a, b])
    kernel = roundtrip(s)
    assert [p.name for p in kernel.outputs] == ["a", "b"]
    xin = random_inputs(kernel)
    oa, ob = interpret_outputs(kernel, xin)
    np.testing.assert_allclose(oa, xin[0] + 1, rtol=1e-6)
    np.testing.assert_allclose(ob, (xin[0] + 1) * 2, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# illegal schedules


def test_vectorize_reduction_loop_is_illegal():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="cannot vectorize loop k of stage C: it is a reduction loop"):
        s.vectorize(k)


def test_parallel_reduction_loop_is_illegal():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="cannot parallelize loop k"):
        s.parallel(k)


def test_vectorize_needs_innermost():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.vectorize(j)
    with pytest.raises(tc.ScheduleError, match="vectorized loop j of C is not innermost: loop k"):
        tc.lower(s)


def test_vectorize_too_wide():
    *_, C = matmul()
    s = tc.Schedule(tc.compute((100,), lambda i: C[i % M, i % N] * 1.0, name="D"))
    (i,) = s.loops("D")
    with pytest.raises(tc.ScheduleError, match="extent 100 exceeds 64 lanes"):
        s.vectorize(i)


def test_fuse_not_adjacent():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="loops i and k of stage C are not adjacent"):
        s.fuse(i, k)


def test_fuse_spatial_with_reduction():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="cannot fuse spatial and reduction loops"):
        s.fuse(j, k)


def test_split_bad_factor():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="split of loop i: factor must be a positive int, got 0"):
        s.split(i, factor=0)
    with pytest.raises(tc.ScheduleError, match="exactly one of factor= or nparts="):
        s.split(i, factor=2, nparts=2)


def test_stale_loop_handle():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.split(i, factor=2)
    with pytest.raises(tc.ScheduleError, match="loop i of C no longer exists"):
        s.unroll(i)


def test_compute_at_non_consumer():
    A, B, bias, C, R = dense_relu()
    other = tc.compute((M, N), lambda i, j: A[i, j % K] * 1.0, name="other")
    s = tc.Schedule([R, other])
    with pytest.raises(tc.ScheduleError, match="other does not read C"):
        s.compute_at(C, s.loops(other)[0])


def test_compute_at_consumer_outside_loop():
    x = tc.placeholder((M,), name="x")
    a = tc.compute((M,), lambda i: x[i] + 1.0, name="a")
    b = tc.compute((M,), lambda i: a[i] * 2.0, name="b")
    c = tc.compute((M,), lambda i: a[i] + b[i], name="c")
    s = tc.Schedule(c)
    s.compute_at(a, s.loops(b)[0])
    with pytest.raises(tc.ScheduleError, match="its consumer c runs outside that loop"):
        tc.lower(s)


def test_reverse_compute_at_inside_reduction():
    A, B, bias, C, R = dense_relu()
    s = tc.Schedule(R)
    i, j, k = s.loops(C)
    with pytest.raises(tc.ScheduleError, match="inside its reduction loop k"):
        s.reverse_compute_at(R, k)


def test_reverse_compute_at_non_elementwise():
    A, B, C = matmul()
    T = tc.compute((N, M), lambda j, i: C[i, j] * 2.0, name="T")
    s = tc.Schedule(T)
    s.reverse_compute_at(T, s.loops(C)[0])  # a transpose is still axis + constant per dim
    kernel = roundtrip(s)
    inputs = random_inputs(kernel)
    (out,) = interpret_outputs(kernel, inputs)
    np.testing.assert_allclose(out, (inputs[0] @ inputs[1]).T * 2, rtol=1e-5)
    S = tc.compute((M,), lambda i: C[i, i % N] + C[i, 0], name="S")
    s = tc.Schedule(S)
    with pytest.raises(tc.ScheduleError, match="not of the form axis \\+ constant"):
        s.reverse_compute_at(S, s.loops(C)[0])


def test_inline_reduction_is_illegal():
    A, B, bias, C, R = dense_relu()
    s = tc.Schedule(R)
    with pytest.raises(tc.ScheduleError, match="C is a reduction; only elementwise stages can be inlined"):
        s.compute_inline(C)


def test_inline_output_is_illegal():
    *_, C = matmul()
    s = tc.Schedule(tc.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D"))
    with pytest.raises(tc.ScheduleError, match="D is an output"):
        s.compute_inline("D")


def test_cache_write_after_split():
    *_, C = matmul()
    s = tc.Schedule(C)
    s.split(s.loops(C)[0], factor=2)
    with pytest.raises(tc.ScheduleError, match="cache_write on C must come before any other primitive"):
        s.cache_write(C, "local")


def test_nested_parallel_is_illegal():
    *_, C = matmul()
    s = tc.Schedule(C)
    i, j, k = s.loops(C)
    s.parallel(i)
    s.parallel(j)
    with pytest.raises(tc.ScheduleError, match="parallel loop j is nested inside parallel loop i"):
        tc.lower(s)


def test_malformed_trace():
    with pytest.raises(tc.ScheduleError, match="trace is not valid JSON"):
        tc.Trace.from_json("[{")
    with pytest.raises(tc.ScheduleError, match="malformed trace step"):
        tc.Trace.from_json('[{"kind": "explode", "stage": "C"}]')
    *_, C = matmul()
    bad = tc.Trace.from_json('[{"kind": "split", "stage": "C", "loops": ["zz"], "decisions": [2]}]')
    with pytest.raises(tc.ScheduleError, match="stage C has no loop 'zz'"):
        tc.Schedule(C).replay(bad)


def test_reverse_compute_at_shifted_consumer_is_illegal():
    """A padded consumer has elements that read nothing of the producer; fused into the
    producer's loops they would never be computed."""
    x = tc.placeholder((8,), name="x")
    pad = tc.compute((10,), lambda i: tc.select((i >= 1) & (i < 9), x[i - 1], 0.0), name="pad")
    s = tc.Schedule(pad)
    xl = s.cache_read(x, "local", [pad])
    with pytest.raises(tc.ScheduleError, match="reads x_local shifted or over a different range along axis i"):
        s.reverse_compute_at(pad, s.loops(xl)[0])


def test_cache_read_with_layout(update_golden):
    """Pack a transposed tile of W (dense's [out, in] weights) so that j is contiguous."""
    X = tc.placeholder((M, K), name="X")
    W = tc.placeholder((N, K), name="W")
    D = tc.ops.dense(X, W)
    s = tc.Schedule(D)
    WT = s.cache_read(W, "local", [D], layout=(1, 0))
    i, j, k = s.loops(D)
    jo, ji = s.split(j, factor=4)
    s.reorder(jo, i, k, ji)
    s.compute_at(WT, jo)
    kernel = check(s, "cache_read_layout", update_golden, lambda x, w: x @ w.T)
    assert 'alloc("local", float32[6, 4]) as W_local' in str(kernel)
    with pytest.raises(tc.ScheduleError, match="layout \\(0, 0\\) is not a permutation"):
        tc.Schedule(D).cache_read(W, "local", [D], layout=(0, 0))


def test_cache_write_with_layout(update_golden):
    """An accumulator tile stored [j, i]: the copy-out transposes it back into C[i, j]."""
    *_, C = matmul()
    s = tc.Schedule(C)
    CT = s.cache_write(C, "local", layout=(1, 0))
    i, j = s.loops(C)
    io, ii = s.split(i, factor=5)
    s.compute_at(CT, io)
    kernel = check(s, "cache_write_layout", update_golden, ref_matmul)
    assert f'alloc("local", float32[{N}, 5]) as C_local' in str(kernel)
    assert s.trace.steps[0].args == ("local", (1, 0))
    assert str(tc.lower(tc.Schedule(C).replay(tc.Trace.from_json(s.trace.to_json())))) == str(kernel)
    with pytest.raises(tc.ScheduleError, match="layout \\(1, 1\\) is not a permutation"):
        tc.Schedule(C).cache_write(C, "local", layout=(1, 1))
