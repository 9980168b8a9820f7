"""Loop partitioning of guarded tails (minitc/lowering/partition.py): the partitioned nest means the
same as the original (reference interpreter, on random schedules), its hot loops are guard-free,
and the index check still proves its accesses in bounds (else branches, shifted tail loops)."""

import numpy as np
from fuzz_schedules import random_schedule
from helpers import interpret_outputs, random_inputs

import minitc as tc
from minitc.ir import For, IfThenElse, Kernel, walk_stmts
from minitc.lowering.index_check import check_indices
from minitc.lowering.partition import partition_tails
from minitc.printer import format_stmt


def _partitioned(kernel):
    return Kernel(kernel.name, kernel.params, kernel.num_inputs, partition_tails(kernel.body))


def test_tail_peeled_from_hot_loop():
    A = tc.placeholder((10, 6), name="A")
    B = tc.placeholder((6, 12), name="B")
    k = tc.reduce_axis(6, name="k")
    C = tc.compute((10, 12), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tc.Schedule(C)
    i, j, kk = s.loops(C)
    io, ii = s.split(i, factor=4)  # 10 = 2 * 4 + 2: a guarded tail
    s.reorder(io, j, kk, ii)
    s.unroll(ii)
    kernel = tc.lower(s)
    part = _partitioned(kernel)
    text = format_stmt(part.body)
    # two full row tiles without guards, then the tail with its two rows resolved
    assert text.startswith("for i_o in range(2):")
    head = next(st for st in walk_stmts(part.body) if isinstance(st, For) and st.var.name == "i_o")
    assert not any(isinstance(st, IfThenElse) for st in walk_stmts(head))
    assert "if i_i_1 + 8 < 10:" in text
    inputs = random_inputs(kernel)
    np.testing.assert_allclose(interpret_outputs(part, inputs)[0], inputs[0] @ inputs[1], rtol=1e-5)


def test_tiles_past_the_edge_are_dropped_not_guarded():
    """A panel of 5 tiles over 24 columns: the tail panel has 1 live tile and 4 past the edge.
    Its tile loop gets shorter (it used to run all 5 tiles, guarded: matmul-512 with nc=96 ran
    15x slower than with nc=64), so no guard is left anywhere."""
    A = tc.placeholder((24,), name="A")
    C = tc.compute((24,), lambda i: A[i] * 2.0, name="C")
    for kind in ("serial", "parallel"):
        s = tc.Schedule(C)
        io, ii = s.split(s.loops(C)[0], factor=20)
        _, lanes = s.split(ii, factor=4)
        s.unroll(lanes)
        if kind == "parallel":
            s.parallel(io)
        kernel = tc.lower(s)
        assert "if " in format_stmt(kernel.body)
        part = _partitioned(kernel)
        assert not any(isinstance(st, IfThenElse) and "< 24" in format_stmt(st) for st in walk_stmts(part.body)), (
            format_stmt(part.body)
        )
        x = random_inputs(kernel)
        np.testing.assert_array_equal(interpret_outputs(part, x)[0], x[0] * 2.0)


def test_parallel_loop_branches_inside():
    A = tc.placeholder((37,), name="A")
    C = tc.compute((37,), lambda i: A[i] * 2.0, name="C")
    s = tc.Schedule(C)
    io, ii = s.split(s.loops(C)[0], factor=8)
    s.parallel(io)
    kernel = tc.lower(s)
    part = partition_tails(kernel.body)
    assert isinstance(part, For) and part.kind == "parallel" and part.extent == 5
    assert isinstance(part.body, IfThenElse) and "i_o < 4" in format_stmt(part)
    check_indices(_partitioned(kernel))  # the tail in the else branch: i_o >= 4 there


def test_no_partition_without_tails():
    A = tc.placeholder((32,), name="A")
    C = tc.compute((32,), lambda i: A[i] + 1.0, name="C")
    s = tc.Schedule(C)
    s.split(s.loops(C)[0], factor=8)
    kernel = tc.lower(s)
    assert format_stmt(partition_tails(kernel.body)) == format_stmt(kernel.body)


def test_random_schedules_keep_their_meaning():
    """The partitioned nest of random schedules of every operator gives what the original
    nest gives, in the reference interpreter."""
    checked = 0
    ops = sorted(tc.ops.OPS)
    for case in range(60):
        rng = np.random.default_rng([7, case])
        inst = tc.ops.OPS[ops[case % len(ops)]].instantiate("tiny", rng)
        s, _ = random_schedule(inst.output, rng)
        try:
            kernel = tc.lower(s, args=list(inst.placeholders) + [inst.output])
        except tc.ScheduleError:
            continue
        part = _partitioned(kernel)
        check_indices(part)
        inputs = random_inputs(kernel, seed=case)
        for want, got in zip(interpret_outputs(kernel, inputs), interpret_outputs(part, inputs)):
            np.testing.assert_array_equal(got, want)
        checked += 1
    assert checked >= 30
