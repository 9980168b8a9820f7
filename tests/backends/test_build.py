"""End to end: tc.build for the CPU. Every operator of tc.ops against its numpy reference, the
quickstart schedule, calling conventions and argument errors."""

import numpy as np
import pytest

import minitc as tc

pytestmark = pytest.mark.avx2


def _tolerance(name):
    return dict(rtol=2e-4, atol=2e-4) if name not in ("gelu", "layer_norm") else dict(rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", sorted(tc.ops.OPS))
def test_every_op_naive(name):
    rng = np.random.default_rng(1)
    for _ in range(2):
        inst = tc.ops.OPS[name].instantiate("small", rng)
        f = tc.build(tc.Schedule(inst.output), args=list(inst.placeholders) + [inst.output])
        np.testing.assert_allclose(f(*inst.arrays), inst.expected(), **_tolerance(name))


def _tiled(s, tensor):
    """A generic schedule: tile the two innermost spatial loops, vectorize, parallelize."""
    loops = [lp for lp in s.loops(tensor)]
    stage = s.state.stage(s.stage_name(tensor))
    spatial = [lp for lp, st in zip(loops, stage.loops) if not st.reduce]
    if len(spatial) >= 2:
        yo, yi = s.split(spatial[-2], factor=4)
        xo, xi = s.split(spatial[-1], factor=8)
        s.reorder(yo, xo, yi, xi)
        outer = spatial[:-2] + [yo]
        s.parallel(s.fuse(*outer) if len(outer) > 1 else outer[0])
        return
    xo, xi = s.split(spatial[-1], factor=8)
    s.parallel(xo)


@pytest.mark.parametrize("name", sorted(tc.ops.OPS))
def test_every_op_tiled(name):
    rng = np.random.default_rng(2)
    inst = tc.ops.OPS[name].instantiate("small", rng)
    s = tc.Schedule(inst.output)
    _tiled(s, inst.output)
    f = tc.build(s, args=list(inst.placeholders) + [inst.output])
    np.testing.assert_allclose(f(*inst.arrays), inst.expected(), **_tolerance(name))


def test_quickstart_as_written():
    M, N, K = 512, 512, 512
    A = tc.placeholder((M, K), "float32", name="A")
    B = tc.placeholder((K, N), "float32", name="B")
    k = tc.reduce_axis(K, name="k")
    C = tc.compute((M, N), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.Schedule(C)
    i, j, kk = s.loops(C)
    io, ii = s.split(i, factor=32)
    jo, ji = s.split(j, factor=8)
    s.reorder(io, jo, kk, ii, ji)
    s.vectorize(ji)
    s.unroll(ii)
    s.parallel(io)
    assert "for ji" not in str(tc.lower(s))
    f = tc.build(s, target="llvm")
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = f(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    c[:] = 0
    f(a, b, out=c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    assert "<8 x float>" in f.llvm_ir
    assert "vfmadd" in f.asm and "ymm" in f.asm


def _small_matmul():
    A = tc.placeholder((6, 5), name="A")
    B = tc.placeholder((5, 7), name="B")
    return A, B, tc.ops.matmul(A, B)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    A, B, C = _small_matmul()
    f = tc.build(C)
    a, b = torch.rand(6, 5), torch.rand(5, 7)
    c = f(a, b)
    assert isinstance(c, torch.Tensor)
    torch.testing.assert_close(c, a @ b)
    out = torch.empty(6, 7)
    f(a, b, out=out)
    torch.testing.assert_close(out, a @ b)
    with pytest.raises(tc.LayoutError, match="non-contiguous torch tensor"):
        f(a.t().contiguous().t(), b)


def test_argument_errors():
    A, B, C = _small_matmul()
    f = tc.build(C)
    a = np.random.rand(6, 5).astype("float32")
    b = np.random.rand(5, 7).astype("float32")
    with pytest.raises(tc.ShapeError, match=r"takes 2 input\(s\) \(A, B\), got 1"):
        f(a)
    with pytest.raises(tc.ShapeError, match=r"input B has shape \(7, 5\), expected \(5, 7\)"):
        f(a, b.T.copy())
    with pytest.raises(tc.DTypeError, match="input A has dtype float64, expected float32"):
        f(a.astype("float64"), b)
    with pytest.raises(tc.LayoutError, match="input B is not C-contiguous"):
        f(a, np.asfortranarray(b))
    with pytest.raises(tc.LayoutError, match="must be a numpy array"):
        f([[1.0]], b)
    with pytest.raises(tc.LayoutError, match="output matmul overlaps input"):
        big = np.zeros(100, "float32")
        f(big[:30].reshape(6, 5), b, out=big[:42].reshape(6, 7))


def test_positional_outputs_and_multiple_outputs():
    x = tc.placeholder((16,), name="x")
    a = tc.compute((16,), lambda i: x[i] + 1.0, name="a")
    b = tc.compute((16,), lambda i: a[i] * 2.0, name="b")
    f = tc.build([a, b])
    xs = np.arange(16, dtype="float32")
    ra, rb = f(xs)
    np.testing.assert_allclose(ra, xs + 1)
    np.testing.assert_allclose(rb, (xs + 1) * 2)
    oa, ob = np.empty(16, "float32"), np.empty(16, "float32")
    f(xs, oa, ob)
    np.testing.assert_allclose(ob, (xs + 1) * 2)


def test_dtypes_int_and_float64():
    x = tc.placeholder((9, 4), "int32", name="x")
    y = tc.compute((9, 4), lambda i, j: x[i, j] * 3 + (x[i, j] // 2) % 3, name="y")
    z = tc.placeholder((9, 4), "float64", name="z")
    w = tc.compute((9, 4), lambda i, j: tc.sqrt(z[i, j]) + tc.cast(x[i, j], "float64"), name="w")
    f = tc.build([y, w])
    xs = np.arange(-18, 18, dtype="int32").reshape(9, 4)
    zs = np.random.rand(9, 4)
    ry, rw = f(xs, zs)
    np.testing.assert_array_equal(ry, xs * 3 + (xs // 2) % 3)
    np.testing.assert_allclose(rw, np.sqrt(zs) + xs, rtol=1e-12)


def test_bad_target():
    A, B, C = _small_matmul()
    with pytest.raises(tc.BuildError, match="unknown target 'cuda9'"):
        tc.build(C, target="cuda9")


def test_fused_dense_bias_relu_register_tile():
    """Epilogue fusion: the matmul stage of dense is computed per output tile into a local
    accumulator (compute_at), bias + relu are applied as the tile is stored."""
    M, K, N = 20, 24, 40
    X = tc.placeholder((M, K), name="X")
    W = tc.placeholder((N, K), name="W")
    bias = tc.placeholder((N,), name="bias")
    E = tc.ops.dense(X, W, bias, activation="relu")
    s = tc.Schedule(E)
    i, j = s.loops(E)
    io, ii = s.split(i, factor=4)
    jo, ji = s.split(j, factor=16)
    s.reorder(io, jo, ii, ji)
    s.parallel(io)
    s.compute_at("dense", jo)
    di, dj, dk = s.loops("dense")
    djo, dji = s.split(dj, factor=8)
    s.reorder(dk, di, djo, dji)
    s.unroll(di)
    s.unroll(djo)
    s.vectorize(dji)
    s.vectorize(s.split(ji, factor=8)[1])
    f = tc.build(s)
    assert 'alloc("local", float32[4, 16]) as dense' in str(f.kernel)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(shape).astype("float32") for shape in ((M, K), (N, K), (N,)))
    np.testing.assert_allclose(f(x, w, b), tc.ops.reference.dense(x, w, b, activation="relu"), rtol=1e-4, atol=1e-4)
    assert "vfmadd" in f.asm
