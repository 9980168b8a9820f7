"""`minitc explore`: the JSON API against a server in a thread (views, errors, the time limit,
Run, the request checks), the code the page starts from, and the page itself in headless
chromium (skipped where selenium or Debian's chromium and chromium-driver are missing).

MINITC_EXPLORE_SCREENSHOT=docs/images/explore.png python -m pytest tests/cli/test_explore.py -k browser
saves the page after its Run as the screenshot in docs/explore.md.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading

import numpy as np
import pytest
from click.testing import CliRunner

import minitc as tc
from minitc.cli import main
from minitc.explore.measure import check
from minitc.explore.ops import CUSTOM_EXPRESSION, catalog, expression_code, op_call
from minitc.explore.schedule_code import naive_code, trace_code
from minitc.explore.server import TOKEN_HEADER, ExploreServer, Limits
from minitc.templates import template_schedule

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MATMUL = {"op": "matmul", "shape": "64,64,64", "options": ""}


@pytest.fixture(scope="module")
def server():
    srv = ExploreServer(port=0, limits=Limits(view_s=3.0, run_s=30.0, budget_s=0.1))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def post(server, route: str, body, headers: dict | None = None, token: str | None = "server's") -> tuple:
    """POST to the API with the server's token, another one, or none (token=None)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"}
    if token is not None:
        sent[TOKEN_HEADER] = server.token if token == "server's" else token
    conn.request("POST", f"/api/{route}", data, {**sent, **(headers or {})})
    r = conn.getresponse()
    answer = json.loads(r.read())
    conn.close()
    return r.status, answer


def api(server, route: str, body: dict) -> dict:
    status, answer = post(server, route, body)
    assert status == 200, answer
    return answer


@pytest.fixture(scope="module")
def matmul(server):
    answer = api(server, "op", MATMUL)
    assert answer["ok"], answer
    return {**MATMUL, "expression": answer["expression"], "schedule": answer["schedule"]}


def test_a_split_changes_the_loop_nest(server, matmul):
    naive = api(server, "view", {**matmul, "view": "loops"})
    assert naive["ok"] and "for i in range(64):" in naive["text"] and "i_o" not in naive["text"]
    split = matmul["schedule"] + "io, ii = s.split(i, factor=16)\n"
    answer = api(server, "view", {**matmul, "schedule": split, "view": "loops"})
    assert answer["ok"], answer
    assert "for i_o in range(4):" in answer["text"] and "for i_i in range(16):" in answer["text"]
    assert answer["steps"] == 1


def test_an_illegal_schedule_returns_its_message_and_line(server, matmul):
    code = matmul["schedule"] + "io, ii = s.split(i, factor=16)\ns.split(i, factor=4)\n"
    answer = api(server, "view", {**matmul, "schedule": code, "view": "loops"})
    assert not answer["ok"]
    err = answer["error"]
    assert err["kind"] == "ScheduleError" and "loop i of matmul no longer exists" in err["message"]
    assert err["part"] == "schedule" and err["line"] == code.count("\n")


def test_a_syntax_error_and_a_bad_expression(server, matmul):
    answer = api(server, "view", {**matmul, "schedule": "s = tc.Schedule(out\n", "view": "loops"})
    assert answer["error"]["kind"] == "SyntaxError" and answer["error"]["line"] == 1
    bad = {**matmul, "expression": "A = tc.placeholder((4, 4))\nout = A[0, 0] +* 1\n", "op": None}
    answer = api(server, "view", {**bad, "view": "loops"})
    assert answer["error"]["kind"] == "SyntaxError" and answer["error"]["part"] == "expression"
    answer = api(server, "view", {**matmul, "schedule": "x = 1\n", "view": "loops"})
    assert "must set s to a tc.Schedule" in answer["error"]["message"]
    answer = api(server, "op", {"op": "matmul", "shape": "64,64", "options": ""})
    assert not answer["ok"] and "matmul takes M,N,K" in answer["error"]["message"]


def test_an_endless_loop_is_stopped_and_the_server_goes_on(server, matmul):
    answer = api(server, "view", {**matmul, "schedule": "while True:\n    pass\n", "view": "loops"})
    assert answer["error"]["kind"] == "TimeLimit" and "time limit of 3 s" in answer["error"]["message"]
    assert api(server, "view", {**matmul, "view": "loops"})["ok"]


def test_llvm_assembly_and_cuda_views(server, matmul):
    llvm = api(server, "view", {**matmul, "view": "llvm"})
    asm = api(server, "view", {**matmul, "view": "asm", "target": "llvm -mcpu=znver2 -num-cores=2"})
    assert "define" in llvm["text"] and "ret" in asm["text"]
    gpu = api(server, "schedule", {**matmul, "kind": "template", "target": "cuda"})
    assert "s.bind(" in gpu["schedule"] and "#   bm = " in gpu["schedule"]  # the parameters, with meanings
    assert "output rows per block" in gpu["schedule"]
    cuda = api(server, "view", {**matmul, "schedule": gpu["schedule"], "view": "cuda"})
    assert cuda["ok"] and "__global__" in cuda["text"]
    refused = api(server, "run", {**matmul, "schedule": gpu["schedule"]})
    assert "binds loops to GPU indices" in refused["error"]["message"]


def test_run_times_the_template_and_checks_it(server, matmul):
    template = api(server, "schedule", {**matmul, "kind": "template", "target": "llvm"})
    answer = api(server, "run", {**matmul, "schedule": template["schedule"]})
    assert answer["ok"], answer
    assert answer["correct"]["ok"] and answer["correct"]["max_abs_error"] < 1e-3
    assert answer["minitc_ms"] > 0 and answer["numpy_ms"] > 0 and answer["numpy_label"] == "numpy"
    assert answer["kind"] == "compute" and answer["unit"] == "GFLOP/s"
    assert answer["peak"] > 0 and answer["peak_fraction"] > 0 and answer["machine"]["threads"] >= 1


def test_run_of_a_custom_expression(server):
    expr = CUSTOM_EXPRESSION.replace("256, 256, 256", "32, 48, 16")
    answer = api(server, "run", {"expression": expr, "schedule": "s = tc.Schedule(C)\n"})
    assert answer["ok"], answer
    assert answer["correct"]["ok"] and answer["numpy_label"].startswith("numpy (te_eval")


def test_requests_from_elsewhere_are_refused(server):
    status, answer = post(server, "ops", {}, {"Host": "attacker.example:80"})
    assert status == 403 and "Host" in answer["error"]["message"]
    status, answer = post(server, "ops", {}, {"Origin": "http://attacker.example"})
    assert status == 403
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    form = {"Content-Type": "application/x-www-form-urlencoded", TOKEN_HEADER: server.token}
    conn.request("POST", "/api/ops", b"op=matmul", form)
    assert conn.getresponse().status == 415
    conn.close()
    assert post(server, "ops", {})[1]["ok"]


def test_an_api_call_needs_the_servers_token(server, matmul):
    status, answer = post(server, "ops", {}, token=None)
    assert status == 403 and not answer["ok"]
    assert answer["error"]["kind"] == "Forbidden" and "has no token" in answer["error"]["message"]
    assert "#token=" in answer["error"]["message"] and server.token not in answer["error"]["message"]
    assert "has no token" in post(server, "ops", {}, token="")[1]["error"]["message"]
    for wrong in ("x", server.token[:-1], server.token + "x", "\u00e9" + server.token[1:]):
        status, answer = post(server, "view", {**matmul, "view": "loops"}, token=wrong)
        assert status == 403 and "has a wrong token" in answer["error"]["message"], wrong
    status, answer = post(server, "view", {**matmul, "view": "loops"})
    assert status == 200 and answer["ok"]
    # the page loads without the token; a refusal closes the connection, its body left unread
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/")
    assert conn.getresponse().read() and conn.sock is not None
    conn.request("POST", "/api/ops", b"{}", {"Content-Type": "application/json"})
    refused = conn.getresponse()
    assert refused.status == 403 and refused.getheader("Connection") == "close"
    conn.close()
    # the token is in the URL to open, and new at each start
    assert server.token_url == f"{server.url}#token={server.token}" and len(server.token) >= 32
    other = ExploreServer(port=0)
    fixed = ExploreServer(port=0, token="a fixed/token")
    try:
        assert other.token != server.token and fixed.token_url.endswith("#token=a%20fixed%2Ftoken")
    finally:
        other.server_close()
        fixed.server_close()
    with pytest.raises(ValueError, match="must not be empty"):
        ExploreServer(port=0, token=" ")


def test_the_check_catches_a_wrong_output():
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert check([ref.copy()], [ref])["ok"]
    wrong = ref.copy()
    wrong[1, 2] += 0.5
    verdict = check([wrong], [ref])
    assert not verdict["ok"] and verdict["max_abs_error"] == pytest.approx(0.5)
    assert not check([np.full_like(ref, np.nan)], [ref])["ok"]


@pytest.mark.parametrize("op", ["matmul", "dense", "conv2d", "softmax", "sum", "relu", "max_pool2d"])
def test_template_code_replays_the_template(op):
    entry = next(e for e in catalog() if e["op"] == op)
    ns = {"tc": tc}
    exec(expression_code(op_call(op, entry["shape"], entry["default_options"])), ns)
    out = ns["out"]
    for target in ("llvm", "cuda"):
        template = template_schedule(out, target)
        code_ns = dict(ns)
        exec(trace_code(template, "out", ns), code_ns)
        assert code_ns["s"].trace == template.trace
    # the hints of the naive schedule are legal once uncommented
    hint = re.compile(r"^# (s\.|\w+, \w+ = s\.)")
    hinted = "\n".join(line[2:] if hint.match(line) else line for line in naive_code(out, "out").splitlines())
    code_ns = dict(ns)
    exec(hinted, code_ns)
    assert len(code_ns["s"].trace) >= 2
    tc.lower(code_ns["s"])


def test_help():
    result = CliRunner().invoke(main, ["explore", "--help"])
    assert result.exit_code == 0 and "--no-browser" in result.output and "127.0.0.1" in result.output
    assert "--token" in result.output
    assert "explore" in CliRunner().invoke(main, ["--help"]).output


# ---------------------------------------------------------------------------------------------
# the page in a real browser


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: apt-get install chromium chromium-driver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1440,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def test_browser(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    d = browser
    wait = WebDriverWait(d, 30)

    def output():
        return d.find_element(By.ID, "output").text

    d.get(server.url)  # without the token the page loads but every call is refused
    wait.until(lambda _: "has no token" in d.find_element(By.ID, "error").text)
    d.get(server.token_url)
    d.refresh()  # a new fragment alone does not reload the page
    wait.until(lambda _: "def matmul_kernel" in output())
    Select(d.find_element(By.ID, "op")).select_by_value("relu")
    wait.until(lambda _: "def relu_kernel" in output())
    Select(d.find_element(By.ID, "op")).select_by_value("matmul")
    wait.until(lambda _: "def matmul_kernel" in output() and "for i in range(256):" in output())

    schedule = d.find_element(By.ID, "schedule")
    schedule.send_keys(Keys.CONTROL, Keys.END)
    schedule.send_keys("io, ii = s.split(i, factor=32)")
    wait.until(lambda _: "for i_o in range(8):" in output())

    schedule.send_keys(Keys.ENTER, "s.split(i, factor=4)")
    error = d.find_element(By.ID, "error")
    wait.until(lambda _: error.is_displayed() and "no longer exists" in error.text)
    assert "line" in error.text

    d.find_element(By.ID, "template").click()
    wait.until(lambda _: not error.is_displayed() and "in parallel(" in output())
    d.find_element(By.ID, "run").click()
    result = d.find_element(By.ID, "result")
    wait.until(lambda _: result.is_displayed() and "minitc" in d.find_element(By.ID, "times").text)
    assert d.find_element(By.ID, "check").text.startswith("\u2713")
    assert "% of the FMA peak" in d.find_element(By.ID, "bar-label").text
    if os.environ.get("MINITC_EXPLORE_SCREENSHOT"):
        d.save_screenshot(os.environ["MINITC_EXPLORE_SCREENSHOT"])
