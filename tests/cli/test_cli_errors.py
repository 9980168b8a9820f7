"""The command line's error paths: bad numbers, shapes, paths, corrupt files, environment
variables and huge shapes each end with a specific message and a non-zero exit, never a Python
traceback, and before anything is measured. Then resuming an interrupted `minitc tune`."""

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner

from minitc.cli import main
from minitc.commands import checks
from minitc.commands.spec import parse_call
from minitc.lm.pipeline import SHIPPED

SMALL = ["tune", "relu", "--shape", "8,8", "--strategy", "random"]
CLI = [sys.executable, "-c", "import sys; from minitc.cli import main; sys.exit(main())"]


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def assert_refused(result, message, code=None):
    """Exited non-zero with `message`, through click (no exception escaped, no traceback)."""
    assert result.exit_code != 0, result.output
    assert code is None or result.exit_code == code, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert message in result.output, result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trials", "2.5"], "'--trials': expected a whole number >= 1, got '2.5'"),
        (["--trials", "0"], "'--trials': expected a whole number >= 1, got '0'"),
        (["--trials", "-1"], "'--trials': expected a whole number >= 1, got '-1'"),
        (["--trials", "many"], "'--trials': expected a whole number >= 1"),
        (["--batch", "0"], "'--batch': expected a whole number >= 1"),
        (["--threads", "0"], "'--threads': expected a whole number >= 1 and <= 256"),
        (["--threads", "1000"], "'--threads': expected a whole number >= 1 and <= 256"),
        (["--budget", "-1"], "'--budget'"),
        (["--seed", "x"], "'--seed'"),
        (["--strategy", "greedy"], "'--strategy'"),
        (["--target", "opencl"], "--target"),
    ],
)
def test_bad_numbers_and_choices(args, message):
    assert_refused(run(*SMALL, *args), message, code=2)


@pytest.mark.parametrize(
    "op, shape, message",
    [
        ("relu", "8,x8,a", "expected comma-separated integers"),
        ("relu", "0,8", "sizes must be integers >= 1"),
        ("matmul", "8,8", "matmul takes M,N,K"),
        ("matmull", "8,8,8", "Did you mean matmul"),
        ("conv2d", "1,3,4,4,8,7,7", "ShapeError"),
    ],
)
def test_bad_shapes(op, shape, message):
    assert_refused(run("tune", op, "--shape", shape), message, code=2)


@pytest.mark.parametrize("shape", ["70000,70000", "10000000,10000000"])
def test_shapes_too_large_for_memory(shape, monkeypatch):
    monkeypatch.setattr(checks, "available_memory", lambda: 16 * 10**9)
    result = run("tune", "relu", "--shape", shape)
    assert_refused(result, "of memory (its tensors take", code=2)
    assert "16.0 GB is available; use a smaller --shape" in result.output


def test_huge_matmul_is_refused_on_this_machine():
    """Without patching: 100000^3 needs ~600 GB; 10^7 x 10^7 relu far more than any machine."""
    assert_refused(run("tune", "matmul", "--shape", "100000,100000,100000"), "needs about 601.1 GB", code=2)


def test_memory_estimate():
    call = parse_call("relu", "1000,1000", {})
    need, tensors = checks.memory_needed(call)
    assert tensors == 2 * 4 * 10**6 and need == checks.COPIES * tensors + checks.BASE_BYTES
    checks.check_memory(call, available=need)  # exactly enough passes
    with pytest.raises(Exception, match="use a smaller --shape"):
        checks.check_memory(call, available=need - 1)
    assert checks.available_memory() is None or checks.available_memory() > 0


def test_bad_output_paths_are_refused_before_any_work(tmp_path):
    db = tmp_path / "r.db"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for flag in ("--json", "--plot"):
        for path, message in (
            ("/proc/nope/out.x", "cannot write /proc/nope/out.x (No such file or directory)"),
            (a_file / "out.x", "(Not a directory)"),
            (tmp_path, "is a directory"),
        ):
            assert_refused(run(*SMALL, "--db", db, flag, path), message, code=2)
    assert not db.exists()  # refused before the records database was even opened
    assert a_file.read_text() == "x"


def test_bench_refuses_bad_output_paths_before_running():
    for flag in ("--json", "--plot"):
        assert_refused(
            run("bench", "--suite", "smoke", flag, "/proc/nope/out.x"), "cannot write /proc/nope/out.x", code=2
        )


def test_existing_output_file_is_left_alone_by_the_check(tmp_path):
    out = tmp_path / "old.json"
    out.write_text("keep")
    checks.check_output(out, "--json")
    assert out.read_text() == "keep"
    checks.check_output(tmp_path / "new.json", "--json")
    assert not (tmp_path / "new.json").exists()


def test_bad_database_paths(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        ("/proc/nope/x.db", "--db: cannot create the folder of the records database /proc/nope/x.db"),
        (a_file / "x.db", "cannot create the folder of the records database"),
        (tmp_path, "is a directory"),
    ]
    for path, message in cases:
        assert_refused(run(*SMALL, "--db", path), message, code=2)
    result = run(*SMALL, env={"MINITC_DB": "/proc/nope/x.db"})
    assert_refused(result, "Invalid value for MINITC_DB: cannot create the folder", code=2)


def test_corrupt_and_foreign_databases(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(4096))
    assert_refused(run(*SMALL, "--db", garbage), "is not a usable minitc records database", code=2)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE songs (title TEXT)")
    assert_refused(run(*SMALL, "--db", foreign), "an SQLite file of another application (tables: songs)", code=2)
    assert_refused(run("show", "--db", garbage), "is not a usable minitc records database", code=1)
    assert_refused(run("lm", "measure", "--db", garbage), "is not a usable minitc records database", code=2)


def test_corrupt_language_model(tmp_path):
    """MINITC_LM and --lm are loaded before anything runs (the default strategy is tlm)."""
    half = tmp_path / "half.pt"
    half.write_bytes(SHIPPED.read_bytes()[: SHIPPED.stat().st_size // 2])
    db = tmp_path / "r.db"
    result = run("tune", "relu", "--shape", "8,8", "--db", db, env={"MINITC_LM": str(half)})
    assert_refused(result, f"Invalid value for MINITC_LM: {half}", code=2)
    assert "unset MINITC_LM" in result.output
    assert_refused(run("tune", "relu", "--shape", "8,8", "--db", db, "--lm", half), "Invalid value for --lm", code=2)
    assert_refused(run("tune", "relu", "--shape", "8,8", "--lm", tmp_path / "none.pt"), "does not exist", code=2)
    result = run("tune", "relu", "--shape", "8,8", "--db", db, env={"MINITC_LM": str(tmp_path / "none.pt")})
    assert_refused(result, "no language model at", code=2)
    assert not db.exists()


@pytest.mark.parametrize("value", ["abc", "0", "-3", "100000", ""])
def test_bad_thread_count_variable(value):
    result = run(*SMALL, env={"MINITC_NUM_THREADS": value})
    assert_refused(result, f"MINITC_NUM_THREADS={value!r} is", code=2)
    assert "set it to an integer from 1 to 256" in result.output


def test_bad_lm_command_arguments(tmp_path):
    assert_refused(run("lm", "gen-data", "/proc/nope/x.jsonl"), "cannot write /proc/nope/x.jsonl", code=2)
    data = tmp_path / "d.jsonl"
    data.write_text("")
    assert_refused(run("lm", "pretrain", data, "--out", "/proc/nope/x.pt"), "cannot write /proc/nope/x.pt", code=2)
    assert_refused(run("lm", "pretrain", data, "--out", tmp_path / "x.pt", "--threads", "0"), "'--threads'", code=2)


def test_a_real_process_prints_no_traceback(tmp_path):
    """The installed command line in a separate process: a minitc error and a click error."""
    env = dict(os.environ, MINITC_NUM_THREADS="abc")
    p = subprocess.run(CLI + SMALL, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "MINITC_NUM_THREADS='abc' is not an integer" in p.stderr, p.stderr
    p = subprocess.run(CLI + [*SMALL, "--json", "/proc/nope/x.json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "cannot write /proc/nope/x.json" in p.stderr, p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_warnings_are_one_plain_line(capsys):
    import warnings

    from minitc.cli import plain_warnings

    with plain_warnings():
        warnings.warn("the model was trained elsewhere", stacklevel=1)
    err = capsys.readouterr().err
    assert err == "warning: the model was trained elsewhere\n"


def test_unexpected_errors_are_saved_not_printed(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(checks, "check_database", broken)
    result = run(*SMALL)
    assert_refused(result, "internal error (ZeroDivisionError: planted); this is a bug in minitc", code=1)
    path = result.output.split("traceback saved in ")[1].split()[0]
    with open(path) as f:
        saved = f.read()
    os.unlink(path)
    assert "Traceback" in saved and "ZeroDivisionError: planted" in saved


@pytest.mark.parametrize("trials", [2.5, 0, -1, True, "3", None])
def test_tune_api_refuses_bad_trial_counts(trials, tmp_path):
    """What the command line's --trials check guards: tc.tune itself (and tune_tasks) raise a
    MinitcError that is also a ValueError, before opening the database."""
    import minitc as tc
    from minitc.autotune.task_scheduler import tune_tasks

    out = tc.ops.relu(tc.placeholder((8, 8), name="X"))
    db = tmp_path / "r.db"
    with pytest.raises(tc.MinitcError, match=f"tc.tune: trials must be a whole number >= 1, got {trials!r}") as e:
        tc.tune(out, trials=trials, db=db)
    assert isinstance(e.value, ValueError)
    with pytest.raises(tc.MinitcError, match="tc.tune: batch must be a whole number >= 1"):
        tc.tune(out, trials=2, batch=0, db=db)
    with pytest.raises(tc.MinitcError, match="tune_tasks: trials must be"):
        tune_tasks([(out, 1.0)], trials=trials, db=db)
    assert not db.exists()


# ---------------------------------------------------------------------------------------------
# resuming


FAST = ["--strategy", "random", "--batch", "1", "--budget", "0.02"]


def assert_one_measurement_per_kernel(output: str, data: dict) -> None:
    """Times appear only in the table, and the verdict's ratios are the table's."""
    assert "re-measured" not in output and "bare kernel" not in output
    tuned, template = data["tuned_ms"], data["default_ms"]
    if data["same_as_template"]:
        assert tuned == template and "the hand template's own" in output
    else:
        assert f"{template / tuned:.2f}x the template's speed" in output
    lib = data["best_library"]
    assert f"{data[lib + '_ms'] / tuned:.2f}x the speed of {lib}" in output


def test_rerun_measures_only_the_missing_trials(tmp_path):
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    first = run("tune", "relu", "--shape", "16,16", "--trials", 2, "--db", db, "--json", out, *FAST)
    assert first.exit_code == 0, first.output
    data = json.loads(out.read_text())
    assert "resuming" not in first.output and data["trials"] == 2
    assert_one_measurement_per_kernel(first.output, data)
    more = run("tune", "relu", "--shape", "16,16", "--trials", 3, "--db", db, "--json", out, *FAST)
    assert more.exit_code == 0, more.output
    assert "resuming: 2 of 3 trials recorded, measuring 1" in more.output
    assert "tuning: 3/3 trials: 2 recorded by an earlier run, 1 measured now" in more.output
    data = json.loads(out.read_text())
    assert data["trials"] == 1 and data["trials_resumed"] == 2
    again = run("tune", "relu", "--shape", "16,16", "--trials", 3, "--db", db, "--seed", 0, *FAST)
    assert again.exit_code == 0, again.output
    assert "resuming: all 3 trials of this run are recorded, measuring none" in again.output
    assert "tuning: 3/3 trials: 3 recorded by an earlier run, 0 measured now" in again.output


def test_interrupted_run_resumes(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) keeps the records and prints
    no traceback; the same command then measures only the rest."""
    db = tmp_path / "r.db"
    args = ["tune", "relu", "--shape", "8,8", "--trials", "40", "--db", str(db), *FAST]
    p = subprocess.Popen(
        CLI + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    text = ""
    for line in p.stdout:
        text += line
        if "2/40 trials" in line:
            os.killpg(p.pid, signal.SIGINT)
            break
    text += p.stdout.read()
    assert p.wait(timeout=60) == 130, text
    assert "interrupted: the trials measured so far are kept in" in text and "Traceback" not in text, text
    with sqlite3.connect(db) as c:
        ((recorded,),) = c.execute("SELECT trials FROM runs").fetchall()
    assert 2 <= recorded < 40
    result = run(*args[:5], str(recorded + 1), *args[6:])
    assert result.exit_code == 0, result.output
    assert f"resuming: {recorded} of {recorded + 1} trials recorded, measuring 1" in result.output
