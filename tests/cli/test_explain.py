"""tc.explain and `minitc explain`: a trace replayed step by step, with the loop nest after each
step, its time when measured, and how a tuned program differs from the template."""

from pathlib import Path

import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.workload_key import workload_key
from minitc.cli import main
from minitc.explanation import estimate_flops, trace_differences
from minitc.templates import template_schedule

ROOT = Path(__file__).resolve().parents[2]
TARGET = "llvm -mcpu=znver2 -num-cores=2"


def matmul(n=64):
    A = tc.placeholder((n, n), "float32", name="A")
    B = tc.placeholder((n, n), "float32", name="B")
    k = tc.reduce_axis(n, name="k")
    return tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")


def quickstart_schedule(C):
    s = tc.Schedule(C)
    i, j, kk = s.loops(C)
    io, ii = s.split(i, factor=16)
    jo, ji = s.split(j, factor=8)
    s.reorder(io, jo, kk, ii, ji)
    s.vectorize(ji)
    s.unroll(ii)
    s.parallel(io)
    return s


def test_each_step_shows_its_call_and_the_loop_nest_after_it():
    s = quickstart_schedule(matmul())
    e = tc.explain(s)
    assert [st.call for st in e.steps] == [
        "Schedule(C)",
        "split(C.i, factor=16)",
        "split(C.j, factor=8)",
        "reorder(C.i_o, C.j_o, C.k, C.i_i, C.j_i)",
        "vectorize(C.j_i)",
        "unroll(C.i_i)",
        "parallel(C.i_o)",
    ]
    nests = [st.loop_nest for st in e.steps]
    assert "for i in range(64)" in nests[0] and "i_o" not in nests[0]
    assert "for i_o in range(4)" in nests[1] and "for i_i in range(16)" in nests[1]
    assert "vectorized(8)" not in nests[3] and "vectorized(8)" in nests[4]
    assert "unrolled(16)" in nests[5] and "parallel(4)" in nests[6]
    assert nests[-1] == str(tc.lower(s))  # the last step is the schedule itself
    assert all(st.error is None and st.ms is None for st in e.steps)
    assert "the inner 16 iterations" in e.steps[1].why and "over the CPU's threads" in e.steps[6].why


def test_measure_checks_and_times_every_step():
    e = tc.explain(quickstart_schedule(matmul(48)), measure=True, budget_s=0.05)
    assert all(st.error is None and st.ms > 0 for st in e.steps)
    assert e.flops == 2 * 48**3
    text = e.text()
    assert "GFLOP/s" in text and text.count("\n  6  ") == 0 and "   6  " in e.summary()


def test_diff_shows_only_the_lines_a_step_changed():
    text = tc.explain(quickstart_schedule(matmul())).text(diff=True)
    block = text.split("  6. parallel(C.i_o)")[1]
    assert "-    for i_o in range(4):" in block and "+    for i_o in parallel(4):" in block
    assert "for k in range" not in block  # unchanged lines are left out


def test_template_steps_lower_one_by_one_for_a_pinned_target():
    X = tc.placeholder((64, 128), "float32", name="X")
    s = template_schedule(tc.ops.softmax(X), TARGET)
    e = tc.explain(s, target=TARGET)
    assert len(e.steps) == len(s.trace) + 1 > 3
    # between steps a program can be incomplete (a producer attached before its consumer is)
    assert e.steps[-1].error is None and sum(st.error is None for st in e.steps) > len(e.steps) // 2
    assert all("compute_at" in st.error for st in e.steps if st.error)
    assert "no program after this step: compute_at" in e.text()
    assert e.steps[-1].loop_nest == str(tc.lower(s, target=TARGET))
    vectorized = [st for st in e.steps if st.call.startswith("vectorize")]
    assert vectorized and all("(8 lanes per vector on this target)" in st.why for st in vectorized)
    assert e.flops is not None  # softmax's max and sum reductions
    # the template's program: its parameters first, each with its value and meaning
    assert [name for name, _, _ in e.parameters] == ["rows", "vector", "lanes", "chunk", "parallel"]
    assert "the template's parameters" in e.text() and "  rows = " in e.text() and ": rows per tile" in e.text()
    assert tc.explain(quickstart_schedule(matmul(32))).parameters == []  # a program of no template's


def test_flops_estimate_and_trace_differences():
    C = matmul(32)
    assert estimate_flops([C]) == 2 * 32**3
    X = tc.placeholder((8, 8), "float32", name="X")
    assert estimate_flops([tc.compute((8, 8), lambda i, j: X[i, j] * 2, name="Y")]) is None
    a, b = quickstart_schedule(C), quickstart_schedule(C)
    assert trace_differences(a.trace, b.trace) == []
    c = tc.Schedule(C)
    i, _, _ = c.loops(C)
    c.split(i, factor=4)
    diff = trace_differences(c.trace, a.trace)
    assert "+ split(C.i, factor=4)" in diff and "- split(C.i, factor=16)" in diff and "- parallel(C.i_o)" in diff


def test_explain_refuses_what_is_not_a_schedule():
    with pytest.raises(tc.MinitcError, match="explain takes a Schedule"):
        tc.explain(matmul())


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_explains_the_quickstart_script():
    r = run("explain", str(ROOT / "examples" / "quickstart.py"))
    assert r.exit_code == 0, r.output
    calls = [line.split(". ", 1)[1] for line in r.output.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert calls == [
        "Schedule(C)",
        "split(C.i, factor=32)",
        "split(C.j, factor=8)",
        "reorder(C.i_o, C.j_o, C.k, C.i_i, C.j_i)",
        "vectorize(C.j_i)",
        "unroll(C.i_i)",
        "parallel(C.i_o)",
    ]
    assert "matmul 512x512x512" not in r.output  # the script's own timing and prints are not run/shown
    assert "for i_o in parallel(16):" in r.output


@pytest.mark.heavy
def test_cli_explains_a_template_with_measurements(tmp_path):
    r = run("explain", "matmul", "--shape", "64,64,64", "--target", TARGET, "--measure", "--diff")
    assert r.exit_code == 0, r.output
    assert "the template schedule of matmul 64x64 64x64" in r.output
    assert "GFLOP/s" in r.output and "error:" not in r.output


def test_cli_explains_the_best_record_and_its_differences(tmp_path):
    db = tmp_path / "records.db"
    C = tc.ops.matmul(tc.placeholder((32, 32), "float32", name="A"), tc.placeholder((32, 32), "float32", name="B"))
    tc.tune(C, trials=4, strategy="random", db=db, batch=4, seed=3, template_first=False, space="template")
    r = run("explain", "--db", str(db), "--workload", "matmul", "--shape", "32,32,32")
    assert r.exit_code == 0, r.output
    assert "the best record of matmul 32x32 32x32" in r.output
    assert "how the best record differs from the template" in r.output
    assert "the template's parameters" in r.output and "  mr = " in r.output  # the record's, with meanings
    assert any(line.startswith(("  + ", "  - ")) for line in r.output.splitlines()) or "(the same steps)" in r.output
    # by its key: the workload decoded from the database, the op read from its tag and attrs
    by_key = run("explain", "--db", str(db), "--workload", workload_key(C)[:10])
    assert by_key.exit_code == 0, by_key.output
    assert by_key.output.splitlines()[0] == r.output.splitlines()[0]


def test_cli_errors_are_specific(tmp_path):
    script = tmp_path / "none.py"
    script.write_text("x = 1\n")
    r = run("explain", str(script))
    assert r.exit_code == 2 and "builds no tc.Schedule at module level" in r.output
    r = run("explain", f"{ROOT / 'examples' / 'quickstart.py'}:t")
    assert r.exit_code == 2 and "has no Schedule named 't' (its Schedules: s)" in r.output
    r = run("explain", str(tmp_path / "missing.py"))
    assert r.exit_code == 2 and "no such file" in r.output
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    r = run("explain", str(broken))
    assert r.exit_code == 1 and "raised RuntimeError: boom" in r.output
    r = run("explain", "--db", str(tmp_path / "no.db"), "--workload", "matmul", "--shape", "8,8,8")
    assert r.exit_code == 1 and "does not exist" in r.output
    r = run("explain")
    assert r.exit_code == 2 and "give a script" in r.output
