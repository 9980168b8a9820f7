"""The explorer's web server: the page (static/) and a small JSON API, on 127.0.0.1 only.

    server = ExploreServer(port=0)          # 0: any free port; token=None: a new random one
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url                              # http://127.0.0.1:PORT/
    server.token_url                        # http://127.0.0.1:PORT/#token=...  (what to open)
    server.shutdown(); server.close()

API (POST, JSON body, JSON answer; an error in the user's code is {"ok": false, "error": ...}):
    /api/ops       the operators, their default shapes, the limits
    /api/op        {op, shape, options} -> the expression code and the naive schedule
    /api/schedule  {expression, kind: naive|template, target} -> schedule code
    /api/view      {expression, schedule, view: loops|llvm|asm|cuda, target} -> text
    /api/run       {expression, schedule, op?, shape?, options?} -> times, rate, peak, check

Code from the page runs only in the sandbox (sandbox.py), never in this process. Requests are
answered only from a loopback peer with a Host header naming 127.0.0.1 or localhost (a web
page elsewhere cannot reach the server through DNS rebinding), and the API takes only POST
with a JSON body and no foreign Origin (a form on another site cannot post to it).

Every API call must also carry the server's token in the X-Minitc-Token header, as Jupyter
does: a random secret made at each start (or the one passed in), part of token_url, which the
page reads from its URL fragment (a fragment never reaches the server, logs or a Referer).
Without it another local process, another user's on a shared machine, could post code to the
port. The page itself loads without the token, but every call it makes is refused.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import quote

from minitc.explore import ops
from minitc.explore.sandbox import DEFAULT_MEMORY, Sandbox

MAX_BODY = 1 << 20
TOKEN_HEADER = "X-Minitc-Token"
LOCAL_NAMES = ("127.0.0.1", "localhost")
STATIC = {  # path -> (file in static/, content type)
    "/": ("index.html", "text/html"),
    "/app.js": ("app.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
}
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}


@dataclass(frozen=True)
class Limits:
    view_s: float = 10.0  # a view (loop nest, LLVM IR, assembly, CUDA C) or schedule code
    run_s: float = 30.0  # the Run button: compile, check and time
    memory_bytes: int = DEFAULT_MEMORY
    budget_s: float = 0.5  # timing budget of each of minitc and numpy in a Run


class ExploreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, limits: Limits = Limits(), peak: dict | None = None, token: str | None = None):
        if token is not None and not token.strip():
            raise ValueError("the explorer's token must not be empty")
        self.token = token if token is not None else secrets.token_urlsafe(32)
        super().__init__(("127.0.0.1", port), Handler)
        self.limits = limits
        self.sandbox = Sandbox(memory_bytes=limits.memory_bytes)
        self._peak = peak
        self._peak_lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def token_url(self) -> str:
        """The URL to open: the page with the token in its fragment."""
        return f"{self.url}#token={quote(self.token, safe='')}"

    def token_ok(self, given: str | None) -> bool:
        """Whether a request's token is the server's, compared in constant time."""
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def peak(self) -> dict | None:
        """The machine's FMA and triad peaks, measured (in the sandbox) on first use."""
        with self._peak_lock:
            if self._peak is None:
                answer = self.sandbox.run("machine", {}, timeout=120)
                if answer.get("ok"):
                    self._peak = {k: v for k, v in answer.items() if k != "ok"}
            return self._peak

    def _peak_note(self, answer: dict) -> str | None:
        """Why a kernel can beat the peak it is compared with; a disturbed FMA measurement (other
        load on the machine while it ran) is forgotten, to be measured again."""
        if (answer.get("peak_fraction") or 0) <= 1:
            return None
        if answer["kind"] == "memory":
            return "above the STREAM triad bandwidth: the data fit in the caches"
        with self._peak_lock:
            self._peak = None
        return "above the measured FMA peak, which other load must have slowed: it is measured again on the next Run"

    def server_close(self) -> None:
        super().server_close()
        if hasattr(self, "sandbox"):  # not when binding the port failed
            self.sandbox.close()

    def api(self, route: str, body: dict) -> dict:
        lim = self.limits
        if route == "ops":
            return {"ok": True, "ops": ops.catalog(), "custom": ops.CUSTOM_EXPRESSION, "limits": asdict(lim)}
        if route in ("op", "schedule", "view"):
            return self.sandbox.run(route, body, lim.view_s)
        if route == "run":
            payload = {**body, "peak": self.peak(), "budget_s": lim.budget_s}
            answer = self.sandbox.run("run", payload, lim.run_s)
            if answer.get("ok") and payload["peak"]:
                answer["machine"] = payload["peak"]
                answer["peak_note"] = self._peak_note(answer)
            return answer
        return None


class Handler(BaseHTTPRequestHandler):
    server: ExploreServer
    protocol_version = "HTTP/1.1"
    server_version = "minitc-explore"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # the terminal shows the URL, not a line per keystroke

    # -- checks ----------------------------------------------------------------------------
    def _refusal(self) -> str | None:
        """Why this request is refused, or None."""
        try:
            loopback = ipaddress.ip_address(self.client_address[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return "the explorer answers only this machine (127.0.0.1)"
        host = (self.headers.get("Host") or "").strip().lower()
        name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
        if name not in LOCAL_NAMES or (port and port != str(self.server.port)):
            return f"Host {host!r} refused: open the explorer as {self.server.url}"
        origin = self.headers.get("Origin")
        if origin is not None and origin not in (f"http://{n}:{self.server.port}" for n in LOCAL_NAMES):
            return f"Origin {origin!r} refused"
        return None

    def _send(self, status: int, body: bytes, content_type: str, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in HEADERS.items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: dict, close: bool = False) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", close)

    def _fail(self, status: int, kind: str, message: str) -> None:
        """An error answer; it closes the connection, since a refused request's body is left unread
        and would otherwise be taken for the start of the next request on a kept-alive one."""
        error = {"kind": kind, "message": message, "part": None, "line": None}
        self._json(status, {"ok": False, "error": error}, close=True)

    # -- methods ---------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 - http.server's name
        why = self._refusal()
        if why:
            return self._fail(403, "Forbidden", why)
        path = self.path.split("?", 1)[0]
        if path not in STATIC:
            return self._fail(404, "NotFound", f"no page {path}; the explorer is at {self.server.url}")
        name, content_type = STATIC[path]
        data = resources.files("minitc.explore").joinpath("static", name).read_bytes()
        self._send(200, data, f"{content_type}; charset=utf-8")

    def do_POST(self):  # noqa: N802
        why = self._refusal()
        if why:
            return self._fail(403, "Forbidden", why)
        if not self.path.startswith("/api/"):
            return self._fail(404, "NotFound", f"no API {self.path}")
        given = self.headers.get(TOKEN_HEADER)
        if not self.server.token_ok(given):
            why = "has a wrong token" if given else "has no token"
            return self._fail(
                403,
                "Forbidden",
                f"this request {why} ({TOKEN_HEADER} header): open the explorer with the URL that "
                "minitc explore printed, which ends in #token=...",
            )
        if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
            return self._fail(415, "BadRequest", "the API takes a JSON body (Content-Type: application/json)")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return self._fail(413, "BadRequest", f"the body must be 1 to {MAX_BODY} bytes of JSON")
        try:
            body = json.loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError) as e:
            return self._fail(400, "BadRequest", f"the body is not JSON: {e}")
        if not isinstance(body, dict):
            return self._fail(400, "BadRequest", "the body must be a JSON object")
        answer = self.server.api(self.path[len("/api/") :], body)
        if answer is None:
            return self._fail(404, "NotFound", f"no API {self.path}")
        self._json(200, answer)

    def do_HEAD(self):  # noqa: N802
        self.do_GET()
