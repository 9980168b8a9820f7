"""GEMM-family templates (minitc/templates/gemm.py): every template, transpose, bias and
activation built with default and explicit tile sizes, on shapes that do and do not divide
the tiles, compared with numpy; every template's trace round-trips."""

import re

import numpy as np
import pytest

import minitc as tc
from minitc.target import parse_target
from minitc.templates import DEFAULTS, TEMPLATES, gemm_blocking, template_schedule

SHAPES = [(1, 1, 1), (37, 53, 29), (130, 70, 90)]  # M, N, K
TARGET = parse_target("llvm")
AVX2 = parse_target("llvm -mcpu=znver2 -num-cores=2")  # for tests of a template's structure, whatever the host


def _inputs(tensors, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype("float32") for t in tensors]


def _check(what, tensors, ref, tol=1e-4, target="llvm"):
    f = tc.build(what, target=target)
    args = _inputs(tensors)
    np.testing.assert_allclose(f(*args), ref(*args), rtol=tol, atol=tol)
    return f


def _scheduled(out, **params):
    """The output's template applied with its defaults updated by `params`."""
    s = tc.Schedule(out)
    name = s.state.outputs[0]
    tag = s.state.stage(name).tag
    p = DEFAULTS[tag](s, name, TARGET)
    p.update(params)
    TEMPLATES[tag](s, name, TARGET, **p)
    return s


def _ceil(a, b):
    return -(-a // b)


def _roundtrip(s):
    again = tc.Schedule(s.outputs).replay(tc.Trace.from_json(s.trace.to_json()))
    assert str(tc.lower(again)) == str(tc.lower(s))


def _matmul(M, N, K, ta, tb):
    A = tc.placeholder((K, M) if ta else (M, K), name="A")
    B = tc.placeholder((N, K) if tb else (K, N), name="B")
    return tc.ops.matmul(A, B, transpose_a=ta, transpose_b=tb), [A, B]


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matmul_default(M, N, K, ta, tb):
    C, ins = _matmul(M, N, K, ta, tb)
    _check(C, ins, lambda a, b: tc.ops.reference.matmul(a, b, ta, tb))


def test_build_uses_the_template():
    C, ins = _matmul(64, 64, 64, False, False)
    f = _check(C, ins, tc.ops.reference.matmul, target=AVX2.string)  # the tiles depend on the lanes and cores
    text = str(f.kernel)
    assert "parallel(" in text and 'alloc("local", float32[5, 16]) as matmul_local' in text
    assert "B_local" in text and "A_local" not in text  # the packed panel; A is read in place
    Ct, _ = _matmul(64, 64, 64, True, False)
    assert "A_local" not in str(tc.lower(template_schedule(Ct, AVX2)))  # a transposed A is k-major: read in place
    assert "A_local" in str(tc.lower(template_schedule(Ct, AVX2, pack_a=True)))  # or copied once
    assert re.search(r"vfmadd(132|213|231)ps", f.asm) and "vbroadcastss" in f.asm  # the form LLVM picks varies


def test_template_schedule_takes_parameters():
    C, ins = _matmul(64, 48, 32, False, False)
    s = template_schedule(C, "llvm -mcpu=znver2 -num-cores=2", mr=4, nr=8)
    assert 'alloc("local", float32[4, 8]) as matmul_local' in str(tc.lower(s))
    a, b = (np.random.default_rng(0).standard_normal(t.shape).astype("float32") for t in ins)
    np.testing.assert_allclose(tc.build(s)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(tc.ScheduleError, match="no template"):
        template_schedule(tc.compute((4,), lambda i: ins[0][i, 0] * 2.0, name="twice"), "llvm", mr=4)
    with pytest.raises(tc.ScheduleError, match="CPU targets only"):
        template_schedule(C, "cuda-sim", mr=4)


@pytest.mark.parametrize(
    "params",
    [
        dict(mr=4, nr=24, nc=48, ku=2),
        dict(mr=3, nr=8, nc=8, ku=1, pack_b=False, parallel="m"),
        dict(mr=5, nr=12, nc=36, ku=3, parallel="none"),  # nr not a multiple of the vector width
        dict(mr=8, nr=8, nc=32, ku=1, parallel="n"),
    ],
)
@pytest.mark.parametrize("transposes", [(False, False), (True, True)])
def test_matmul_explicit_params(params, transposes):
    ta, tb = transposes
    C, ins = _matmul(37, 53, 29, ta, tb)
    s = _scheduled(C, **params)
    _check(s, ins, lambda a, b: tc.ops.reference.matmul(a, b, ta, tb))
    _roundtrip(s)


@pytest.mark.parametrize(
    "params,transposes",
    [
        (dict(mr=4, nr=16, nc=32, ku=2, kc=16, mc=12), (False, False)),  # k blocks, in place
        (dict(mr=6, nr=8, nc=16, ku=1, kc=8, parallel="m"), (True, True)),
    ],
)
def test_matmul_k_blocks(params, transposes):
    ta, tb = transposes
    C, ins = _matmul(37, 53, 32, ta, tb)
    s = _scheduled(C, **params)
    assert "matmul_local" not in str(tc.lower(s))  # accumulates into the output
    _check(s, ins, lambda a, b: tc.ops.reference.matmul(a, b, ta, tb))
    _roundtrip(s)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_matmul_trace_roundtrip(ta, tb):
    C, _ = _matmul(130, 70, 90, ta, tb)
    _roundtrip(template_schedule(C))


@pytest.mark.parametrize(
    "batch_a,batch_b,M,N,K,ta,tb,params",
    [
        (3, 3, 37, 53, 29, False, False, None),
        (2, 2, 1, 1, 1, False, False, None),
        (1, 4, 13, 20, 9, True, False, None),  # broadcast A over the batch
        (3, 1, 17, 40, 16, False, True, dict(mr=4, nr=8, nc=16, ku=2, parallel="n")),  # broadcast B
        (2, 2, 30, 24, 12, False, False, dict(mr=3, nr=16, nc=16, ku=3, pack_b=False, parallel="m")),
    ],
)
def test_batch_matmul(batch_a, batch_b, M, N, K, ta, tb, params):
    A = tc.placeholder((batch_a, K, M) if ta else (batch_a, M, K), name="A")
    B = tc.placeholder((batch_b, N, K) if tb else (batch_b, K, N), name="B")
    C = tc.ops.batch_matmul(A, B, transpose_a=ta, transpose_b=tb)
    s = template_schedule(C) if params is None else _scheduled(C, **params)
    _check(s, [A, B], lambda a, b: tc.ops.reference.batch_matmul(a, b, ta, tb))
    _roundtrip(s)


@pytest.mark.parametrize(
    "tb,params",
    [(False, None), (True, None), (True, dict(mr=4, nr=8, nc=16, ku=2, pack_a=True)), (False, dict(pack_b=False))],
)
def test_batch_matmul_reads_permuted_operands_in_place(tb, params):
    """Attention's operands: heads permuted out of [batch, tokens, heads, dim] products and
    their batch and head axes merged; the template inlines those stages into its reads and
    packing copies, so no operand is copied first."""
    batch, tokens, heads, dim = 2, 19, 3, 8
    Q = tc.placeholder((batch, tokens, heads, dim), name="Q")
    K = tc.placeholder((batch, tokens, heads, dim), name="K")

    def heads_of(X, name, transpose=False):  # [batch * heads, tokens, dim], or [.., dim, tokens]
        shape = (batch * heads, dim, tokens) if transpose else (batch * heads, tokens, dim)

        def read(b, i, j):
            t, d = (j, i) if transpose else (i, j)
            return X[b // heads, t, b % heads, d]

        return tc.compute(shape, read, name=name, tag="elementwise")

    A, B = heads_of(Q, "q_heads"), heads_of(K, "k_heads", transpose=not tb)
    C = tc.ops.batch_matmul(A, B, transpose_b=tb)
    s = template_schedule(C) if params is None else _scheduled(C, **params)
    assert s.state.stage("q_heads").inline and s.state.stage("k_heads").inline

    def ref(q, k):
        qh, kh = (x.transpose(0, 2, 1, 3).reshape(batch * heads, tokens, dim) for x in (q, k))
        return qh @ kh.transpose(0, 2, 1)

    _check(s, [Q, K], ref)
    _roundtrip(s)


@pytest.mark.parametrize(
    "M,N,K,block,params",
    [
        (37, 96, 29, 16, None),
        (4, 64, 300, 16, dict(mr=4, nr=32, nc=64, kc=128)),  # k-blocks
        (9, 48, 16, 8, dict(mr=3, nr=8, nc=48, pack_b=True)),  # nothing to pack: pack_b is moot
        (5, 40, 24, 16, None),  # the last block padded
    ],
)
def test_dense_with_a_blocked_weight_reads_it_in_place(M, N, K, block, params):
    """W in blocks of `block` output features, [N/block, K, block]: no packing stage, and the
    register tile's vector loads are contiguous (the division by the block folds away)."""
    X, b = tc.placeholder((M, K), name="X"), tc.placeholder((N,), name="b")
    blocks = -(-N // block)
    W = tc.placeholder((blocks, K, block), name="W")
    out = tc.ops.dense(X, W, b, activation="relu", weight_block=block, out_features=N)
    s = template_schedule(out) if params is None else _scheduled(out, **params)
    assert not any(st.scope == "local" and st.name.startswith("W") for st in s.state.stages)  # no copy of W

    def ref(x, w, bias):
        return np.maximum(x @ w.transpose(1, 0, 2).reshape(K, blocks * block)[:, :N] + bias, 0)

    f = tc.build(s)
    x, w, bias = _inputs([X, W, b])
    got = f(*[{"X": x, "W": w, "b": bias}[t.name] for t in f.kernel.inputs])
    np.testing.assert_allclose(got, ref(x, w, bias), rtol=1e-4, atol=1e-4)
    assert "// " + str(block) not in str(f.kernel) and "% " + str(block) not in str(f.kernel)
    _roundtrip(s)


def test_a_register_tile_covers_whole_weight_blocks():
    """With a blocked weight, a register tile narrower than a block is widened to one (the
    tuner's nr=8 and nr=16 are the same program for blocks of 16); bad layouts are refused."""
    X, W = tc.placeholder((8, 16), name="X"), tc.placeholder((4, 16, 16), name="W")
    out = tc.ops.dense(X, W, weight_block=16)
    assert str(tc.lower(_scheduled(out, nr=8, nc=16))) == str(tc.lower(_scheduled(out, nr=16, nc=16)))
    with pytest.raises(tc.ShapeError, match="blocks of 8 output features"):
        tc.ops.dense(X, W, weight_block=8)
    with pytest.raises(tc.ShapeError, match="without weight_in_out"):
        tc.ops.dense(X, W, weight_block=16, weight_in_out=True)
    with pytest.raises(tc.ShapeError, match="holds 4 blocks of 16, not 48 outputs"):
        tc.ops.dense(X, W, weight_block=16, out_features=48)
    with pytest.raises(tc.ShapeError, match="out_features is for a weight in blocks"):
        tc.ops.dense(X, tc.placeholder((4, 16), name="V"), out_features=4)


def _dense(M, N, K, bias, act):
    X = tc.placeholder((M, K), name="X")
    W = tc.placeholder((N, K), name="W")
    ins = [X, W]
    b = None
    if bias:
        b = tc.placeholder((N,), name="b")
        ins.append(b)
    out = tc.ops.dense(X, W, b, activation=act)

    def ref(x, w, *rest):
        return tc.ops.reference.dense(x, w, rest[0] if rest else None, activation=act)

    return out, ins, ref


@pytest.mark.parametrize(
    "bias,act", [(False, None), (True, None), (True, "relu"), (False, "relu"), (True, "gelu"), (False, "gelu")]
)
def test_dense(bias, act):
    for M, N, K in [(1, 1, 1), (37, 53, 29)]:
        out, ins, ref = _dense(M, N, K, bias, act)
        s = tc.Schedule(out)
        tag = "dense" if not bias and act is None else "dense_epilogue"
        assert s.state.stage(s.state.outputs[0]).tag == tag
        _check(out, ins, ref, tol=2e-4)


@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (37, 53, 29), (16, 96, 64)])
def test_dense_with_the_weight_stored_in_out(M, N, K):
    """W given [in, out] (pre-transposed, or GPT-2's Conv1D): the same layer, and the template
    packs its panels with plain vector copies instead of transposing 8x8 blocks."""
    X, W, b = tc.placeholder((M, K), name="X"), tc.placeholder((K, N), name="W"), tc.placeholder((N,), name="b")
    out = tc.ops.dense(X, W, b, activation="relu", weight_in_out=True)
    _check(out, [X, W, b], lambda x, w, bias: np.maximum(x @ w + bias, 0), tol=2e-4)
    with pytest.raises(tc.ShapeError, match=r"expects 29 \(W is \[in_features, out_features\]\)"):
        tc.ops.dense(tc.placeholder((4, 30), name="X2"), tc.placeholder((29, 5), name="W2"), weight_in_out=True)


def test_dense_epilogue_fused_into_register_tile():
    out, ins, ref = _dense(130, 70, 90, True, "relu")
    s = _scheduled(out, mr=4, nr=16, nc=32, ku=2)
    text = str(tc.lower(s))
    # the product lives in a register tile attached inside the output's loops, no full buffer
    assert 'alloc("local", float32[4, 16]) as dense' in text
    assert "dense[" not in text.split("as dense")[0]
    f = _check(s, ins, ref)
    assert "vcmpnleps" in f.asm  # the vector relu: keep x where x > 0 or x is NaN
    _roundtrip(s)
    out, ins, ref = _dense(16, 96, 64, True, "gelu")
    _check(out, ins, ref, tol=2e-4)


def test_dense_epilogue_per_panel_with_k_blocks():
    out, ins, ref = _dense(37, 53, 32, True, "relu")
    s = _scheduled(out, mr=4, nr=16, nc=32, ku=2, kc=16, mc=20)
    text = str(tc.lower(s))
    assert 'alloc("local", float32[37, 32]) as dense' in text  # one column panel of the product
    _check(s, ins, ref)
    _roundtrip(s)
    _roundtrip(template_schedule(out))
    plain, _, _ = _dense(37, 53, 29, False, None)
    _roundtrip(template_schedule(plain))


def test_defaults_prefer_dividing_tiles():
    p = gemm_blocking.pick_tiles(512, 512, 512, AVX2)
    assert p["nr"] == 16 and p["mr"] in (5, 6) and p["ku"] == 4  # 10-12 accumulators, columns divide
    assert p["nc"] % p["nr"] == 0 and 512 % p["nc"] == 0 and 512 * p["nc"] * 4 <= gemm_blocking.panel_bytes(AVX2)
    assert gemm_blocking.pick_tiles(128, 3072, 768, AVX2) == dict(mr=4, nr=24, nc=24, ku=4, kc=0)
    long_k = gemm_blocking.pick_tiles(240, 256, 8192, AVX2)  # long k: blocks whose A sliver fits half the L1
    assert 0 < long_k["kc"] < 8192 and long_k["mr"] * long_k["kc"] * 4 <= AVX2.cache_bytes("l1d") // 2
    assert gemm_blocking.pick_tiles(128, 128, 64, AVX2, batch=12)["nc"] == 128  # batches keep the cores busy
    small = gemm_blocking.pick_tiles(3, 5, 7, AVX2)
    assert small["mr"] <= 3 and small["nr"] == 8 and small["ku"] == 1 and small["kc"] == 0


@pytest.mark.parametrize("fixture", ["intel-sapphirerapids-kvm.json", "amd-zen4.json"])
@pytest.mark.parametrize("M,N,K", [(128, 896, 896), (128, 896, 4864), (128, 128, 64), (128, 64, 128)])
def test_tiles_that_divide_keep_sixteen_accumulators(fixture, M, N, K):
    """Where the 24-accumulator tiles leave a tail (N = 896: Qwen2-0.5B's hidden size; the
    attention's 64 and 128), the tile is an 8 x 2-vector one that divides, not 3 x 4 (12
    accumulators: the 128 x 896 -> 896 dense ran 1.37x slower with it on the Intel Xeon)."""
    from helpers import recorded_target

    target = recorded_target(fixture)
    p = gemm_blocking.pick_tiles(M, N, K, target)
    assert p["mr"] * p["nr"] // target.lanes("float32") >= 16 and N % p["nr"] == 0 and M % p["mr"] == 0, p


def test_template_errors():
    C, _ = _matmul(8, 8, 8, False, False)
    with pytest.raises(tc.ScheduleError, match="mr must be a positive int"):
        _scheduled(C, mr=0)
    with pytest.raises(tc.ScheduleError, match="parallel must be one of"):
        _scheduled(C, parallel="k")


@pytest.mark.parametrize("cpu", ["znver2", "sapphirerapids"])
def test_the_design_space_holds_every_tile_and_k_block_the_model_considers(cpu):
    """The tuner's candidates (minitc/autotune/space.py) include the hardware's register tiles
    and both orders' k blocks, not only the shape-independent lists, and every one builds."""
    from minitc.autotune.space import Space

    target = parse_target(f"llvm -mcpu={cpu} -num-cores=2")
    C, ins = _matmul(200, 1000, 1000, False, False)
    space = Space([C], target)
    domains = {d.name.split(".")[-1]: d.domain for d in space.replay(space.default_values()).decisions}
    hw, lanes = target.hardware, target.lanes("float32")
    for rows, vecs in gemm_blocking.register_tiles(hw):
        assert rows in domains["mr"] and vecs * lanes in domains["nr"]
    p = gemm_blocking.pick_tiles(200, 1000, 1000, target)
    assert gemm_blocking.kc_from_l1(hw, p["mr"], p["nr"], 4) // 4 * 4 in domains["kc"]
    assert {p["mr"], p["nr"], p["nc"], p["kc"]} <= set(domains["mr"] + domains["nr"] + domains["nc"] + domains["kc"])


def test_the_design_space_candidates_from_the_hardware_build_correct_kernels():
    from minitc.autotune.space import Space
    from minitc.templates.gemm import GEMM_PARAMS

    C, ins = _matmul(37, 53, 290, False, False)
    space = Space([C], "llvm")
    values = space.default_values()
    decisions = space.replay(values).decisions
    candidates = {p.name: p.candidates for p in GEMM_PARAMS}
    args = _inputs(ins)
    tried = 0
    for n, d in enumerate(decisions):
        name = d.name.split(".")[-1]
        for value in d.domain:
            if name not in ("mr", "nr", "nc", "kc", "mc") or value in candidates[name] or value == d.value:
                continue
            chosen = list(values)
            chosen[n] = value
            f = tc.build(space.replay(chosen).schedule)
            np.testing.assert_allclose(f(*args), args[0] @ args[1], rtol=1e-4, atol=1e-4)
            tried += 1
    assert tried >= 3  # at least the hardware's tiles and k blocks beyond the fixed lists


def test_k_blocks_divide_k_where_a_few_more_blocks_do():
    assert gemm_blocking._equal_blocks(1024, 170, 4) == 128  # 8 blocks of 128, not 7 of 148 (a guarded tail)
    assert gemm_blocking._equal_blocks(1000, 500, 4) == 500
    assert gemm_blocking._equal_blocks(777, 389, 1) == 259  # 3 x 259
    assert gemm_blocking._equal_blocks(1021, 300, 4) == 256  # a prime: 4 blocks as equal as whole unrolls allow
    assert gemm_blocking._equal_blocks(512, 600, 4) == 0 and gemm_blocking._equal_blocks(512, 0, 4) == 0
    for K, kc, ku in ((1024, 170, 4), (3000, 700, 4), (777, 389, 1), (96, 50, 2)):
        got = gemm_blocking._equal_blocks(K, kc, ku)
        assert 0 < got <= kc and got % ku == 0 and _ceil(K, got) * got - K < got


@pytest.mark.parametrize("layout", ["a-transposed", "b-transposed-batched"])
def test_a_contraction_written_with_tc_compute_gets_the_gemm_template(layout):
    """A matrix product written by hand runs as the matmul template (packed panels, register
    tiles, threads), not the naive loop nest, and the tuner's space holds that template."""
    from minitc.autotune.space import Space
    from minitc.templates import template_tag

    k = tc.reduce_axis(40, "k")
    if layout == "a-transposed":
        A, B = tc.placeholder((40, 37), name="A"), tc.placeholder((40, 53), name="B")
        C = tc.compute((37, 53), lambda i, j: tc.sum(A[k, i] * B[k, j], axis=k), name="C")
        ref = lambda a, b: a.T @ b  # noqa: E731
    else:
        A, B = tc.placeholder((3, 37, 40), name="A"), tc.placeholder((3, 53, 40), name="B")
        C = tc.compute((3, 37, 53), lambda n, i, j: tc.sum(A[n, i, k] * B[n, j, k], axis=k), name="C")
        ref = lambda a, b: a @ b.transpose(0, 2, 1)  # noqa: E731
    s = template_schedule(C)
    assert template_tag(tc.Schedule(C), "C") == "matmul" and "B_local" in str(tc.lower(s))
    _check(C, [A, B], ref)
    assert "template" in Space([C], "llvm").sketches


def test_other_reductions_keep_the_naive_loop_nest():
    from minitc.templates import template_tag

    k = tc.reduce_axis(40, "k")
    A, B = tc.placeholder((37, 40), name="A"), tc.placeholder((40, 53), name="B")
    for body in (lambda i, j: tc.sum(A[i, k] + B[k, j], axis=k), lambda i, j: tc.max(A[i, k] * B[k, j], axis=k)):
        C = tc.compute((37, 53), body, name="C")
        assert template_tag(tc.Schedule(C), "C") != "matmul"


@pytest.mark.parametrize("kc", [0, 16])
@pytest.mark.parametrize("weight", ["kn", "nk"])
def test_axes_only_a_reads_are_rows_under_one_packed_panel(weight, kc):
    """C[b, s, n] = sum_k A[b, s, k] * W[.., ..]: W does not read b, so b is more rows of A, not
    a batch: the panel of W is packed once and the b loop runs inside it (packing W per b
    repeated the copy 4 times in the handwritten suite's `bsk,nk->bsn`)."""
    k = tc.reduce_axis(40, "k")
    A = tc.placeholder((3, 37, 40), name="A")
    W = tc.placeholder((40, 53) if weight == "kn" else (53, 40), name="W")
    read = (lambda j: W[k, j]) if weight == "kn" else (lambda j: W[j, k])
    C = tc.compute((3, 37, 53), lambda b, i, j: tc.sum(A[b, i, k] * read(j), axis=k), name="C")
    s = template_schedule(C, AVX2, kc=kc)
    lines = str(tc.lower(s)).splitlines()
    (at,) = [n for n, line in enumerate(lines) if "as W_local" in line]
    assert not any(re.match(r"\s*for b", line) for line in _enclosing(lines, at)), "\n".join(lines)
    assert any(re.match(r"\s*for b", line) for line in lines[at:]), "\n".join(lines)
    ref = (lambda a, w: a @ w) if weight == "kn" else (lambda a, w: a @ w.T)
    args = _inputs([A, W])
    np.testing.assert_allclose(tc.build(s)(*args), ref(*args), rtol=1e-4, atol=1e-4)


def _enclosing(lines, at: int) -> list:
    """The lines of the blocks that enclose line `at` of a printed loop nest."""
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    out, level = [], indent(lines[at])
    for line in reversed(lines[:at]):
        if indent(line) < level:
            out.append(line)
            level = indent(line)
    return out


@pytest.mark.parametrize("fixture", ["intel-sapphirerapids-kvm.json", "amd-zen4.json", "intel-haswell-avx2.json"])
def test_a_stored_k_major_is_copied_only_where_its_rows_share_an_l1_set(fixture):
    """Aᵀ·B reads an A stored [K, M] in place (k-major already, as BLIS packs it) unless its
    rows are a multiple of the L1's way apart (M = 1024 fp32: 4 KiB), where every k step of
    the sliver maps to one set and the transposed copy pays."""
    from helpers import recorded_target

    target = recorded_target(fixture)
    for M, copied in ((384, False), (512, False), (768, False), (1024, True)):
        k = tc.reduce_axis(M, "k")
        A, B = tc.placeholder((M, M), name="A"), tc.placeholder((M, M), name="B")
        C = tc.compute((M, M), lambda i, j: tc.sum(A[k, i] * B[k, j], axis=k), name="C")
        s = tc.Schedule(C)
        assert DEFAULTS["matmul"](s, "C", target)["pack_a"] is copied, (M, fixture)
