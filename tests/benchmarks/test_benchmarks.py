"""The benchmark runner (`python -m minitc.benchmarks`, `minitc bench`): end to end on the smoke suite,
the JSON schema, error rows for broken kernels, the plot, its error messages, and kernels built
for another CPU target than the host's (`--target`)."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.benchmarks import suites as wl
from minitc.benchmarks.machine import cpu_name
from minitc.benchmarks.runner import bench_target, mismatch, prepare
from minitc.cli import main
from minitc.target import host_cpu_name, parse_target
from minitc.timing import Timing, measure, quiesce, settle, wait_for_quiet

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--repeats", "3", "--budget", "0.02", "-q"]
RECORD_KEYS = {
    "suite",
    "workload",
    "description",
    "kind",
    "target",
    "target_description",
    "host",
    "threads",
    "minitc_ms",
    "numpy_ms",
    "torch_ms",
    "best_library",
    "ratio",
    "peak_pct",
    "compile_s",
    "spread_pct",
    "background_cpus",
    "error",
    "notes",
    "machine",
    "run",
}


def bench(*args):
    result = CliRunner().invoke(main, ["bench", *args])
    return result


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One full smoke run through the CLI (machine measured, threads 1 and 2)."""
    path = tmp_path_factory.mktemp("bench") / "smoke.json"
    result = bench("--suite", "smoke", "--threads", "1,2", "--json", str(path), *FAST)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output, json.loads(path.read_text())


AVX2 = "llvm -mcpu=x86-64-v3"  # code every AVX2 + FMA host runs, AVX-512 ones included


def test_smoke_suite_prints_a_table(smoke):
    output, _ = smoke
    host = parse_target("llvm")
    assert f"target: {host.string}: " in output and f"host: {cpu_name()} ({host.cpu})" in output
    assert "peak FMA" in output and "STREAM triad" in output and "launch" in output
    header = next(line for line in output.splitlines() if line.startswith("workload"))
    for column in ("minitc ms", "numpy ms", "torch ms", "%peak", "vs best", "compile s"):
        assert column in header
    for w in wl.SMOKE:
        assert sum(line.startswith(w.name + " ") for line in output.splitlines()) == 2


def test_smoke_json_schema(smoke):
    _, records = smoke
    assert isinstance(records, list)
    assert [(r["workload"], r["threads"]) for r in records] == [(w.name, n) for w in wl.SMOKE for n in (1, 2)]
    for r in records:
        rate, work = ("gflops", "flops") if r["kind"] == "compute" else ("gbps", "bytes")
        other_rate = "gbps" if rate == "gflops" else "gflops"
        assert RECORD_KEYS | {rate, work} == set(r), set(r) ^ (RECORD_KEYS | {rate, work})
        assert other_rate not in r
        assert r["error"] is None, r["error"]
        assert r["suite"] == "smoke" and r["kind"] in ("compute", "memory")
        assert r["target"] == parse_target("llvm").string and r["target_description"]["cpu"] == host_cpu_name()
        assert r["host"] == {"cpu": r["machine"]["cpu"], "llvm_cpu": host_cpu_name()}
        for impl in ("minitc", "numpy", "torch"):
            assert r[f"{impl}_ms"] > 0
        assert r["best_library"] in ("numpy", "torch")
        best_ms = r[f"{r['best_library']}_ms"]
        assert r["ratio"] == pytest.approx(best_ms / r["minitc_ms"], rel=2e-2)
        assert r[rate] == pytest.approx(r[work] / (r["minitc_ms"] * 1e-3) / 1e9, rel=2e-2)
        assert r["peak_pct"] > 0 and r["compile_s"] > 0
        assert set(r["spread_pct"]) == {"minitc", "numpy", "torch"}
        m = r["machine"]
        assert m["cpus"] >= 1 and [p["threads"] for p in m["peaks"]] == [1, 2]
        for p in m["peaks"]:
            assert p["fma_gflops"] > 1 and p["triad_gbps"] > 0.1 and p["launch_overhead_us"] >= 0
        assert r["run"]["command"].endswith(
            "--suite smoke --threads 1,2 --repeats 3 --budget 0.02 --json " + r["run"]["command"].split("--json ")[1]
        )
        assert r["run"]["versions"]["numpy"] == np.__version__


def _broken_suite():
    """A kernel computing the wrong thing, one that does not build, one that is right."""
    base = wl.scale_shift_relu("right", 1024)

    def wrong_graph():
        (X,) = wl._placeholders((1024,))
        return tc.compute((1024,), lambda i: tc.maximum(X[i] * 1.5 + 0.5, 0.0), name="wrong")

    def unbuildable():
        raise tc.BuildError("this kernel cannot be built")

    return [
        wl.Workload("wrong", "x", "memory", 8192, base.make_inputs, wrong_graph, base.make_numpy, base.make_torch),
        wl.Workload("unbuildable", "x", "memory", 8192, base.make_inputs, unbuildable, base.make_numpy),
        base,
    ]


def test_wrong_or_failing_kernels_become_error_rows(monkeypatch, tmp_path):
    monkeypatch.setitem(wl.SUITES, "smoke", _broken_suite())
    path = tmp_path / "out.json"
    result = bench("--suite", "smoke", "--threads", "1", "--no-machine", "--json", str(path), *FAST)
    assert result.exit_code == 0, result.output + repr(result.exception)
    wrong, unbuildable, right = json.loads(path.read_text())
    assert wrong["error"].startswith("wrong result") and wrong["minitc_ms"] is None and wrong["ratio"] is None
    assert wrong["numpy_ms"] > 0 and wrong["torch_ms"] > 0  # the libraries are still timed
    assert unbuildable["error"] == "build failed: BuildError: this kernel cannot be built"
    assert unbuildable["torch_ms"] is None and unbuildable["compile_s"] is None
    assert right["error"] is None and right["minitc_ms"] > 0 and right["peak_pct"] is None
    assert "ERROR wrong [1 threads]: wrong result" in result.output
    assert "ERROR unbuildable [1 threads]: build failed" in result.output


def test_without_torch_the_torch_column_is_empty(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    path = tmp_path / "out.json"
    result = bench(
        "--suite", "smoke", "--workloads", "eltwise-64k", "--threads", "1", "--no-machine", "--json", str(path), *FAST
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    (r,) = json.loads(path.read_text())
    assert r["torch_ms"] is None and r["best_library"] == "numpy" and r["run"]["versions"]["torch"] is None
    assert r["ratio"] == pytest.approx(r["numpy_ms"] / r["minitc_ms"], rel=2e-2)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "chart.png"
    result = bench(
        "--suite",
        "smoke",
        "--workloads",
        "matmul-64,eltwise-64k",
        "--threads",
        "1",
        "--no-machine",
        "--plot",
        str(path),
        *FAST,
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    result = bench("--suite", "smoke", "--plot", str(tmp_path / "x.png"), "-q")
    assert result.exit_code == 2
    assert "matplotlib" in result.output and "minitc[plot]" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--suite", "nope"], "unknown suite 'nope'; available: cpu-core, smoke"),
        (["--suite", "smoke", "--workloads", "matmul-64,nope"], "unknown workload(s) 'nope' in suite 'smoke'"),
        (["--threads", "0"], "threads must be integers >= 1"),
        (["--threads", "a,b"], "expected comma-separated integers"),
        (["--suite", "smoke", "--target", "llvm -mcpu=pentium9000"], "unknown cpu 'pentium9000'"),
        (["--suite", "smoke", "--target", "cuda"], "is a GPU target; the CPU suites take 'llvm ...' targets"),
        (
            ["--suite", "smoke-tune", "--target", AVX2],
            "--target applies to the suites cpu-core, smoke, handwritten, models and tlm-eval, not smoke-tune",
        ),
        (["--suite", "smoke", "--batch", "2"], "--batch applies to the suite models"),
        (["--suite", "models", "--batch", "0"], "batch must be integers >= 1"),
        (
            ["--suite", "gpu-smoke", "--target", AVX2],
            "--target applies to the suites cpu-core, smoke, handwritten, models and",
        ),
        (
            ["--suite", "zoo", "--json", "x.json"],
            "--json applies to the suites cpu-core, smoke, handwritten, cpu-tune,",
        ),
        (["--suite"], "--suite needs a name: cpu-core, smoke,"),
        (["--thread", "1"], "Did you mean '--threads'"),
    ],
)
def test_bad_names_give_clear_errors(args, message):
    result = bench(*args)
    assert result.exit_code == 2
    assert message in result.output


def test_minitc_group_lists_bench_and_python_m_works():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "bench" in result.output
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--suite" in proc.stdout and "python -m minitc.benchmarks" in proc.stdout


def test_each_suite_is_a_command_with_only_its_own_options():
    """The suites are data (SUITE_TABLE); each one's command lists exactly the options its entry
    names, with the suite's own defaults, and answers to `--suite NAME`, `NAME` and options
    given before `--suite`."""
    from minitc.benchmarks.cli import bench as group
    from minitc.benchmarks.cli import flag_of
    from minitc.benchmarks.suite_commands import SUITE_TABLE

    assert list(group.commands) == list(SUITE_TABLE)
    for name, suite in SUITE_TABLE.items():
        command = group.commands[name]
        assert [p.name for p in command.params] == list(suite.options)
        help_text = bench("--suite", name, "--help").output
        assert all(flag_of(o) in help_text for o in suite.options)
    assert "[default: 100" in bench("--suite", "gpu-core", "--help").output
    assert "[default: 2]" in bench("models", "--help").output
    assert bench("--threads", "1", "--suite", "smoke", "--help").exit_code == 0
    assert "cpu-core" in bench("--threads", "1", "--help").output.splitlines()[0]  # no suite: cpu-core


DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").glob("*.sh"))]
COMMAND = re.compile(r"(?:python3? -m\s+minitc\.benchmarks|minitc bench)(?=\s|$)(.*)")
DEFINED = re.compile(r'(\w+)="((?:python3? -m\s+minitc\.benchmarks|minitc bench)[^"]*)"')


def documented_bench_commands():
    """(file, arguments) of every `bench` command line in the README, docs/ and experiments/*.sh:
    code blocks and inline code in markdown, lines in shell scripts (continuations joined, a
    command kept in a variable expanded, shell variables replaced by a word or their default)."""
    for path in DOCUMENTED:
        text = re.sub(r"\\\n\s*", " ", path.read_text())
        if path.suffix == ".md":  # inline code may run over a line break
            text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("\n", " "), text)
        for name, value in DEFINED.findall(text):
            text = text.replace(f"${name} ", value + " ")
        for line in text.splitlines():
            for m in COMMAND.finditer(line if not DEFINED.search(line) else ""):
                rest = m.group(1).split("`")[0]
                if "[" not in rest:  # a usage line, with optional parts
                    yield path.name, _shell_words(rest)


def _shell_words(text: str) -> list:
    text = re.sub(r"\$\{\w+:\+[^}]*\}", "", text)
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
    words = []
    for word in shlex.split(re.sub(r"\$\{?\w+\}?", "x", text), comments=True):
        if word in ("|", "||", "&&", ";", "2>&1") or word.startswith(">"):
            break
        words.append(word)
    return words


def test_documented_command_lines_name_options_of_their_suite():
    commands = list(documented_bench_commands())
    assert len(commands) > 40 and any(f == "gpu_session.sh" and "models" in a for f, a in commands)
    for where, args in commands:
        result = bench(*args, "--help")  # option names are checked, values are not
        assert result.exit_code == 0, f"{where}: {' '.join(args)}: {result.output.splitlines()[-1]}"


def test_measure_interleaves_and_limits_slow_calls():
    order = []
    timings = measure(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=5, min_sample_s=0, budget_s=1.0
    )
    assert all(isinstance(t, Timing) and len(t.samples) == 5 and t.number == 1 for t in timings.values())
    half = order[len(order) // 2 :]
    assert "a" in half and "b" in half  # rounds alternate: both are still measured late
    slow = measure({"slow": lambda: __import__("time").sleep(0.02)}, repeats=10, budget_s=0.01)
    assert len(slow["slow"].samples) == 3  # budget exceeded: min_repeats
    assert slow["slow"].median >= 0.02 and slow["slow"].spread >= 0


def test_settle_stops_once_calls_are_warm():
    times = iter([0.5, 0.4, 0.01, 0.01, 0.01])
    calls = []
    assert len(settle(lambda: calls.append(next(times)), expected=10.0)) == 1
    assert len(calls) == 1


def test_quiesce_and_wait_for_quiet_return_quickly():
    assert 0 <= quiesce(max_s=0.05) < 1
    load = wait_for_quiet(0, window_s=0.01)
    assert load is None or load >= 0


def test_mismatch_reports_where_and_how_much():
    w = wl.row_sum("r", 4, 4)
    ref = np.arange(4, dtype=np.float32)
    assert mismatch(ref.copy(), ref, w) is None
    bad = ref.copy()
    bad[2] += 1
    assert mismatch(bad, ref, w) == "wrong result: 1 of 4 elements off, worst at (2,): 3 vs 2"
    assert "shape" in mismatch(ref[:3], ref, w)
    assert "non-finite" in mismatch(np.full(4, np.nan, np.float32), ref, w)


def test_numpy_im2col_conv_matches_the_reference():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 7, 7), np.float32), rng.standard_normal((4, 3, 3, 3), np.float32)
    np.testing.assert_allclose(wl.im2col_conv2d(x, w, 1), tc.ops.reference.conv2d(x, w, 1, 1), rtol=1e-4, atol=1e-4)


def _host_runs(target: str) -> bool:
    return parse_target(target).is_host_compatible


@pytest.mark.skipif(not _host_runs(AVX2), reason="this host cannot run AVX2 + FMA code")
def test_smoke_suite_for_an_avx2_target(tmp_path):
    """Kernels built for x86-64-v3 on this host: the records and the table's header name the
    target and the host, and the command that reproduces the run keeps --target."""
    path = tmp_path / "avx2.json"
    names = "matmul-64,rowsum-256"
    args = ["--suite", "smoke", "--workloads", names, "--threads", "1", "--no-machine", "--target", AVX2]
    result = bench(*args, "--json", str(path), *FAST)
    assert result.exit_code == 0, result.output + repr(result.exception)
    target = parse_target(AVX2)
    assert f"target: {target.string}: 256-bit vectors, 16 vector registers, L1d 32 KiB" in result.output
    assert f"host: {cpu_name()} ({host_cpu_name()})" in result.output
    records = json.loads(path.read_text())
    assert [r["workload"] for r in records] == names.split(",")
    for r in records:
        assert r["error"] is None and r["minitc_ms"] > 0
        assert r["target"] == target.string and r["target_description"] == target.describe()
        assert r["host"]["llvm_cpu"] == host_cpu_name()
        assert f"--target '{AVX2}'" in r["run"]["command"]


@pytest.mark.skipif(not _host_runs(AVX2), reason="this host cannot run AVX2 + FMA code")
def test_kernels_are_built_for_the_target():
    (w,) = wl.select("smoke", ["softmax-small"])
    p = prepare(w, target=AVX2)
    assert p.error is None and p.target == parse_target(AVX2)
    assert '"target-cpu"="x86-64-v3"' in p.kernel.llvm_ir


def test_a_target_the_host_cannot_run_is_refused():
    result = bench("--suite", "smoke", "--target", "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=generic", "-q")
    assert result.exit_code == 2
    assert "cannot run code for target" in result.output and "triple 'aarch64-unknown-linux-gnu'" in result.output
    with pytest.raises(tc.BuildError, match="is a GPU target"):
        bench_target("cuda -arch=sm_90")


@pytest.mark.skipif(_host_runs("llvm -mcpu=skylake-avx512"), reason="this host runs AVX-512 code")
def test_an_avx512_target_on_an_avx2_host_names_the_missing_feature():
    result = bench("--suite", "smoke", "--target", "llvm -mcpu=skylake-avx512", "-q")
    assert result.exit_code == 2
    assert "it needs avx512f, which this host lacks" in result.output and "x86-64-v3" in result.output
