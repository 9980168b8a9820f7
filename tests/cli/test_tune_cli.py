"""`minitc tune`, `minitc show` and the tuning benchmark suites, end to end on tiny workloads
(a few trials each), plus the --shape syntax, FLOPs and the op line `show` reads from a decoded workload."""

import io
import json

import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.autotune.workload_decode import decode
from minitc.autotune.workload_key import canonical, workload_key
from minitc.benchmarks import suites as wl
from minitc.benchmarks.progress import TuneProgress
from minitc.cli import main
from minitc.commands.show import call_of
from minitc.commands.spec import parse_call
from minitc.ops.calls import command_args, flops
from minitc.schedule.trace import step_call

TUNE_FIELDS = {"workload", "best_ms", "trials", "errors", "history", "seconds", "overhead_s_per_trial"}
TABLE_FIELDS = {"tuned_ms", "default_ms", "numpy_ms", "torch_ms", "best_library", "ratio", "gflops", "flops"}
FAST = ["--budget", "0.02", "-q"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One `minitc tune` run: 4 random trials of a 32^3 matmul into a fresh database."""
    tmp = tmp_path_factory.mktemp("tune")
    db, out = tmp / "r.db", tmp / "out.json"
    result = run(
        "tune", "matmul", "--shape", "32,32,32", "--trials", 4, "--strategy", "random", "--db", db, "--json", out, *FAST
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output, json.loads(out.read_text()), db


def test_tune_writes_json(tuned):
    _, data, db = tuned
    assert TUNE_FIELDS | TABLE_FIELDS <= set(data), (TUNE_FIELDS | TABLE_FIELDS) - set(data)
    import minitc as tc

    out = tc.ops.matmul(tc.placeholder((32, 32), name="A"), tc.placeholder((32, 32), name="B"))
    assert data["workload"] == workload_key(out)
    assert data["trials"] == 4 and data["errors"] == 0 and len(data["history"]) == 4
    assert data["best_ms"] > 0 and data["seconds"] > 0 and data["overhead_s_per_trial"] >= 0
    assert all(h is None or h > 0 for h in data["history"])
    assert data["history"] == sorted(data["history"], reverse=True)  # best so far never rises
    assert data["flops"] == 2 * 32**3 and data["strategy"] == "random"
    for impl in ("tuned", "default", "numpy"):
        assert data[f"{impl}_ms"] > 0
    assert data["op"] == "matmul" and data["shape"] == "32,32,32" and data["db"] == str(db)
    assert " tune matmul --shape 32,32,32 --trials 4 --strategy random --db " in data["run"]["command"]


def test_tune_prints_table(tuned):
    output, _, _ = tuned
    for text in (
        "tuned (random)",
        "template (tc.build)",
        "numpy",
        "torch",
        "GFLOP/s",
        "vs best library",
        "vs template",
        "result: ",
        "4/4 trials",
        "wall time",
    ):
        assert text in output, text
    assert "re-measured" not in output  # one time per kernel: the table's


def test_show_lists_workloads(tuned):
    _, data, db = tuned
    result = run("show", "--db", db)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith(data["workload"][:12]))
    assert row.split()[1] == "4" and int(row.split()[2]) > 4 and "matmul float32[32, 32]x[32, 32]->[32, 32]" in row


def test_show_best_record_and_loop_nest(tuned):
    _, data, db = tuned
    by_key = run("show", data["workload"][:8], "--db", db)
    assert by_key.exit_code == 0, by_key.output
    text = by_key.output
    assert f"workload {data['workload']}" in text and "op: matmul --shape 32,32,32" in text
    assert "best record #" in text and "trace (" in text and "decisions:" in text and "sketch =" in text
    # a template program's parameters with their meanings (docs/parameters.md)
    assert ('sketch = "template"' in text) == ("mr = " in text) == (": rows of the register tile" in text)
    assert "loop nest of the best record:" in text and "def matmul_kernel(" in text and "for " in text
    by_op = run("show", "matmul", "--shape", "32,32,32", "--db", db, "--llvm")
    assert by_op.exit_code == 0, by_op.output
    assert by_op.output.startswith(text.splitlines()[0]) and "define " in by_op.output


def test_show_without_records(tmp_path):
    assert "no tuning records yet" in run("show", "--db", tmp_path / "none.db").output
    result = run("show", "softmax", "--shape", "8,16", "--db", tmp_path / "none.db")
    assert result.exit_code == 0, result.output
    assert "hand template" in result.output and "def softmax_kernel(" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["tune", "matmull", "--shape", "8,8,8"], "Did you mean matmul"),
        (["tune", "matmul", "--shape", "8,8"], "M,N,K"),
        (["tune", "matmul", "--shape", "8,x8,a"], "integers"),
        (["tune", "matmul"], "needs --shape M,N,K"),
        (["tune", "matmul", "--shape", "8,8,8", "--stride", "2"], "does not apply to matmul"),
        (["tune", "conv2d", "--shape", "1,3,4,4,8,7,7"], "ShapeError"),
        (["tune", "max_pool2d", "--shape", "1,2,8,8"], "needs --kernel"),
        (["tune", "sum", "--shape", "4,4", "--axis", "x"], "--axis"),
        (["tune", "matmul", "--shape", "8,8,8", "--target", "opencl"], "--target"),
        (["bench", "--suite", "cpu-core", "--trials", "3"], "--trials applies to the suites cpu-tune, smoke-tune,"),
        (["bench", "--suite", "smoke-tune", "--strategies", "greedy"], "random, evolutionary"),
    ],
)
def test_usage_errors(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_show_unknown_workload(tuned):
    _, _, db = tuned
    for args, message in (
        (["ffffffff"], "no workload key starts with"),
        (["relu"], "give its shape"),
        (["--shape", "4,4"], "give the op before --shape"),
    ):
        result = run("show", *args, "--db", db)
        assert result.exit_code == 2 and message in result.output, result.output


def test_tune_suite_smoke(tmp_path):
    """The cpu-tune machinery on one tiny workload, both strategies, 2 trials each."""
    out, plot = tmp_path / "suite.json", tmp_path / "curves.png"
    result = run(
        "bench",
        "--suite",
        "smoke-tune",
        "--workloads",
        "matmul-64",
        "--trials",
        2,
        "--strategies",
        "random,evolutionary",
        "--cost-model",
        "random",
        "--no-machine",
        "--repeats",
        3,
        "--json",
        out,
        "--plot",
        plot,
        *FAST,
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "tpl kernel" in result.output and "vs template" in result.output
    records = json.loads(out.read_text())
    assert [(r["workload"], r["strategy"]) for r in records] == [("matmul-64", "random"), ("matmul-64", "evolutionary")]
    for r in records:
        assert r["error"] is None, r["error"]
        assert r["suite"] == "smoke-tune" and r["trials"] == 2 and len(r["history"]) == 2
        assert r["tuned_ms"] > 0 and r["default_ms"] > 0 and r["numpy_ms"] > 0 and r["best_ms"] > 0
        assert r["default_kernel_ms"] > 0 and r["seconds"] > 0 and r["run"]["trials"] == 2
        assert r["cost_model"] == (None if r["strategy"] == "random" else "random")
    assert plot.stat().st_size > 1000
    assert {w.name for w in wl.SMOKE} >= {"matmul-64", "softmax-small", "dense-small"}


# ---------------------------------------------------------------------------------------------
# the --shape syntax (no compilation)


@pytest.mark.parametrize(
    "op, shape, options, expected",
    [
        ("matmul", "512,512,512", {}, ["matmul", "--shape", "512,512,512"]),
        ("matmul", "64,32,16", {"transpose_b": True}, ["matmul", "--shape", "64,32,16", "--transpose-b"]),
        ("batch_matmul", "12,128,128,64", {}, ["batch_matmul", "--shape", "12,128,128,64"]),
        (
            "dense",
            "128,768,3072",
            {"bias": True, "activation": "relu"},
            ["dense", "--shape", "128,768,3072", "--bias", "--activation", "relu"],
        ),
        (
            "conv2d",
            "1,64,56,56,64,3,3",
            {"stride": "1", "padding": "1"},
            ["conv2d", "--shape", "1,64,56,56,64,3,3", "--padding", "1"],
        ),
        (
            "depthwise_conv2d",
            "1,8,12,12,3,3,2",
            {"stride": "2"},
            ["depthwise_conv2d", "--shape", "1,8,12,12,3,3,2", "--stride", "2"],
        ),
        (
            "max_pool2d",
            "1,4,16,16",
            {"kernel": "3", "stride": "2", "padding": "1"},
            ["max_pool2d", "--shape", "1,4,16,16", "--kernel", "3", "--stride", "2", "--padding", "1"],
        ),
        (
            "avg_pool2d",
            "1,4,16,16",
            {"kernel": "2", "stride": "1"},
            ["avg_pool2d", "--shape", "1,4,16,16", "--kernel", "2", "--stride", "1"],
        ),
        ("softmax", "1536,128", {}, ["softmax", "--shape", "1536,128"]),
        ("layer_norm", "64,96", {}, ["layer_norm", "--shape", "64,96"]),
        ("add", "16,1,8:4,1", {}, ["add", "--shape", "16,1,8:4,1"]),
        ("bias_add", "2,8,4,4", {}, ["bias_add", "--shape", "2,8,4,4"]),
        (
            "mean",
            "4,5,6",
            {"axis": "0,2", "keepdims": True},
            ["mean", "--shape", "4,5,6", "--axis", "0,2", "--keepdims"],
        ),
    ],
)
def test_shape_syntax_round_trips_and_is_read_back(op, shape, options, expected):
    call = parse_call(op, shape, options)
    assert command_args(call) == expected
    out = call.build()
    (decoded,) = decode(canonical(out, attrs=True))
    again = call_of(decoded, workload_key(out))
    assert again is not None and command_args(again) == expected


def test_non_square_windows_are_read_back_too():
    call = parse_call("avg_pool2d", "1,4,16,16", {"kernel": "2,3", "stride": "1"})
    assert command_args(call) == ["avg_pool2d", "--shape", "1,4,16,16", "--kernel", "2,3", "--stride", "1"]
    out = call.build()
    (decoded,) = decode(canonical(out, attrs=True))
    assert command_args(call_of(decoded, workload_key(out))) == command_args(call)
    # without attrs (a form stored by an older minitc) the tensors decode, but name no op
    (bare,) = decode(canonical(out))
    assert workload_key(bare) == workload_key(out) and call_of(bare, workload_key(out)) is None


def test_flops():
    assert flops("matmul", (512, 256), (256, 128)) == 2 * 512 * 128 * 256
    assert flops("matmul", (256, 512), (128, 256), transpose_a=True, transpose_b=True) == 2 * 512 * 128 * 256
    assert flops("batch_matmul", (12, 128, 64), (12, 64, 128)) == 2 * 12 * 128 * 128 * 64
    assert flops("dense", (128, 768), (3072, 768), (3072,)) == 2 * 128 * 768 * 3072
    conv = flops("conv2d", (1, 64, 56, 56), (64, 64, 3, 3), stride=1, padding=1)
    assert conv == 2 * 64 * 56 * 56 * 64 * 9
    assert flops("conv2d", (1, 3, 32, 32), (8, 3, 3, 3), stride=2) == 2 * 8 * 15 * 15 * 3 * 9
    assert flops("depthwise_conv2d", (1, 32, 28, 28), (32, 1, 3, 3), padding=1) == 2 * 32 * 28 * 28 * 9
    assert flops("softmax", (8, 8)) is None and parse_call("relu", "8,8", {}).flops() is None
    assert parse_call("relu", "8,8", {}).bytes() == 4 * 2 * 64


def test_progress_bar_writes_lines_off_a_terminal():
    stream = io.StringIO()
    bar = TuneProgress(4, work=2e6, unit="GFLOP/s", stream=stream, every=2)
    for done in range(1, 5):
        bar(done, 4, done // 4, 0.5 if done > 1 else None)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "2/4 trials" in lines[0] and "4/4 trials" in lines[1]
    assert "1 error" in lines[1] and "best 0.5 ms" in lines[1] and "4.0 GFLOP/s" in lines[1]


def test_tune_defaults_to_the_shipped_language_model(tmp_path):
    """What the README's main job runs (there on a 1024^3 matmul): no strategy given -> tlm."""
    out = tmp_path / "out.json"
    result = run(
        "tune",
        "matmul",
        "--shape",
        "32,32,32",
        "--trials",
        3,
        "--batch",
        3,
        "--db",
        tmp_path / "r.db",
        "--json",
        out,
        *FAST,
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["strategy"] == "tlm" and data["trials"] == 3 and data["tuned_ms"] > 0
    assert "numpy" in result.output and "tuned (tlm)" in result.output


def test_show_prints_each_step_as_its_schedule_call():
    X = tc.placeholder((64, 256), name="X")
    s = tc.Schedule(tc.ops.sum(X, axis=-1))
    _, k = s.loops(s.outputs[0])
    _, inner = s.split(k, factor=8)
    row, partial, rest = s.loops(s.rfactor(inner))
    s.reorder(row, rest, partial)
    s.vectorize(partial)
    assert [step_call(step) for step in s.trace.steps] == [
        "split(sum.r1, factor=8)",
        "rfactor(sum.r1_i)",
        "reorder(sum_rf.i0, sum_rf.r1_o, sum_rf.r1_i)",
        "vectorize(sum_rf.r1_i)",
    ]


def test_tlm_tunes_with_the_pretrained_cost_model(tmp_path, monkeypatch):
    """`minitc tune` (the default strategy, tlm) leaves the cost model to the strategy, which
    takes the one pretrained for this machine's description, as `tc.tune` does; it once passed
    a fresh TLPModel, so the shipped cost models went unused. Evolutionary search keeps a
    fresh one, and --cost-model random gives both random scores."""
    from minitc.autotune.cost_model import RandomModel
    from minitc.benchmarks.tuning import cost_model_for
    from minitc.lm import cost

    model, label = cost_model_for("tlm", "default", target="llvm")
    assert model is None and label == f"pretrained ({cost.shipped_cost_model_path('llvm').name})"
    model, label = cost_model_for("evolutionary", "default")
    assert model is not None and label == type(model).__name__
    assert isinstance(cost_model_for("tlm", "random")[0], RandomModel)
    asked = []
    monkeypatch.setattr(cost, "shipped_cost_model", lambda target: asked.append(target))
    result = run("tune", "matmul", "--shape", "16,16,16", "--trials", 2, "--db", tmp_path / "r.db", *FAST)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert asked and "cost model: pretrained (" in result.output
