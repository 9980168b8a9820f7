"""The nodes of a Ray cluster as the Ray runner (ray_runner.py) sees them: one measuring actor
per node, grouped by hardware fingerprint.

Each actor (`NodeMeasurer`) builds a candidate on its own node, so LLVM compiles for that
node's CPU, and measures it with the local runner's machinery (`LocalBuilder`, `LocalRunner`:
worker subprocesses, time-outs, the numpy check). `NodePool` connects the driver, starts an
actor on every node (pinned by node id; on a cluster whose nodes offer the resource `minitc`,
only on those, each actor holding one unit, so one measurement runs per node across drivers),
replaces actors that die or hang, and says which nodes can measure a target.

ray is imported inside functions only: `import minitc` never imports it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field

from minitc.autotune.runner import LocalBuilder, LocalRunner
from minitc.errors import MinitcError
from minitc.target import hardware_fingerprint, is_gpu, parse_target
from minitc.target.host import read_host_facts

log = logging.getLogger("minitc.ray")

RESOURCE = "minitc"  # nodes started with --resources='{"minitc": 1}' measure, and only they
START_S = 60.0  # a measuring actor must answer within this after it is created
MAX_STRIKES = 2  # actors of one node that may die or hang before the node is given up


class RayRunnerError(MinitcError):
    """The Ray cluster cannot be used: ray is missing, the cluster cannot be reached, or no
    node has the hardware the records are keyed by."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise RayRunnerError(
            "the Ray runner needs the ray package on the driver and on every node: pip install 'minitc[ray]'"
        ) from None
    return ray


def minitc_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("minitc")
    except PackageNotFoundError:
        return "unknown"


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (empty where there is none)."""
    return read_host_facts().model_name


def explicit_target(t) -> str:
    """The host's CPU as a target string that parses to the same fingerprint on any machine
    (cpu, triple and features spelled out), so a driver elsewhere can key records by it."""
    parts = ["llvm", f"-mtriple={t.triple}", f"-mcpu={t.cpu}"]
    if t.features:
        parts.append(f"-mattr={t.features}")
    return " ".join(parts + [f"-num-cores={t.num_cores}"])


class NodeMeasurer:
    """The measuring actor of one node: builds and measures one candidate per call."""

    def __init__(self, timeout: float, build_timeout: float, min_repeat_ms: float, threads: int | None):
        self.builder = LocalBuilder(workers=1, timeout=build_timeout)
        self.runner = LocalRunner(timeout, 5, min_repeat_ms, threads)
        self.task_id, self.task = None, None

    def describe(self) -> dict:
        t = parse_target("llvm")
        return {
            "fingerprint": hardware_fingerprint(t),
            "target": explicit_target(t),
            "cpu": cpu_model() or t.cpu,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": minitc_version(),
        }

    def fits(self, target: str) -> tuple:
        """(the fingerprint records of `target` get on this node, whether it can run its code)."""
        t = parse_target(target)
        return hardware_fingerprint(t), t.is_host_compatible

    def measure(self, task_id: str, box: list, trace: str, repeats: int) -> tuple:
        """(MeasureResult, seconds spent here) of one candidate of the task in `box` (an
        ObjectRef in a list, so that Ray hands it over unresolved and it is fetched once)."""
        start = time.perf_counter()
        if task_id != self.task_id:
            import ray

            self.task, self.task_id = ray.get(box[0]), task_id
        self.runner.repeats = repeats
        built = self.builder.build_one(self.task, trace)
        (result,) = self.runner.run(self.task, built)
        return result, time.perf_counter() - start

    def call(self, fn, *args):
        """fn(*args) on this node (e.g. the language model's hardware description of it)."""
        return fn(*args)


@dataclass
class Measurer:
    """The driver's view of one node's actor."""

    node_id: str
    ip: str
    actor: object
    started: object  # the ObjectRef of describe() until it answered
    since: float  # when it started, or last made progress
    info: dict | None = None  # describe()'s answer: ready to measure
    inflight: dict = field(default_factory=dict)  # ObjectRef -> candidate index

    @property
    def name(self) -> str:
        return f"{self.ip} ({self.node_id[:8]})"


@dataclass(frozen=True)
class NodeKind:
    """Nodes of one hardware fingerprint."""

    fingerprint: str
    target: str  # the nodes' CPU as an explicit target string (explicit_target)
    cpu: str
    nodes: tuple  # node names

    def __str__(self) -> str:
        return f"{self.fingerprint} ({self.cpu}; {len(self.nodes)} node(s): {', '.join(self.nodes)})"


def check_reachable(address: str, timeout: float) -> None:
    """A clear error now, rather than Ray's retries, when nothing listens at host:port."""
    host, _, port = address.rpartition(":")
    host, port = (host or address), (port if port.isdigit() else "6379")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayRunnerError(
            f"cannot reach a Ray cluster at {address}: {e.strerror or e}. Start its head there with "
            f"`ray start --head --port={port}`, or check the address (the head prints it)"
        ) from None


def connect(ray, address: str | None, timeout: float) -> tuple:
    """(the cluster's address, whether this call connected the process) for `address`
    (default: $RAY_ADDRESS, else the cluster running on this machine)."""
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if address != "auto" and not address.startswith("ray://"):
        check_reachable(address, timeout)
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in ("auto", current):
            raise RayRunnerError(f"this process is connected to the Ray cluster at {current} already, not {address}")
        return current, False
    try:
        ray.init(address=address, namespace="minitc", log_to_driver=False, logging_level=logging.WARNING)
    except Exception as e:  # noqa: BLE001 - whatever Ray raises, the user gets one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        start = "`ray start --head` on this machine" if address == "auto" else f"its head at {address}"
        raise RayRunnerError(f"cannot connect to a Ray cluster at {address}: {first} (start {start})") from None
    return ray.get_runtime_context().gcs_address, True


class NodePool:
    """The measuring actors of a cluster, one per node, and the nodes given up on."""

    def __init__(self, address, config: tuple, connect_timeout: float = 10.0, start_s: float = START_S):
        self.ray = import_ray()
        self.address, self.owns_connection = connect(self.ray, address, connect_timeout)
        self.config, self.start_s = config, start_s
        self.measurers: dict = {}  # node id -> Measurer
        self.dropped: dict = {}  # node id -> why the pool does not measure there
        self.strikes: dict = {}  # node id -> actors that died or hung there
        self._fits: dict = {}  # (kind fingerprint, target) -> what the node says
        self.tagged = False  # whether nodes offer RESOURCE (then only they measure)
        self._remote = self.ray.remote(NodeMeasurer)
        self.refresh()

    def refresh(self, wait: bool = True) -> None:
        """Start an actor on every new node; with `wait`, wait for those starting."""
        alive = [n for n in self.ray.nodes() if n.get("Alive")]
        tagged = [n for n in alive if n.get("Resources", {}).get(RESOURCE)]
        self.tagged = bool(tagged)
        for node in tagged or alive:
            if node["NodeID"] not in self.measurers and node["NodeID"] not in self.dropped:
                self.start(node["NodeID"], node.get("NodeManagerAddress", "?"))
        if wait:
            self.wait_started()

    def start(self, node_id: str, ip: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = self._remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            num_cpus=0,  # exclusive use of a node comes from the resource tag, if any
            resources={RESOURCE: 1} if self.tagged else {},
            max_restarts=0,
        ).remote(*self.config)
        self.measurers[node_id] = Measurer(node_id, ip, actor, actor.describe.remote(), time.monotonic())

    def starting(self) -> list:
        return [m for m in self.measurers.values() if m.info is None]

    def wait_started(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.start_s if timeout is None else timeout)
        while self.starting() and time.monotonic() < deadline:
            refs = [m.started for m in self.starting()]
            self.ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
            self.poll()
        for m in self.starting():
            self.drop(m, f"its measuring actor did not start within {self.start_s:.0f} s")

    def poll(self) -> None:
        """Take the answers of actors that have started; give up on those that took too long."""
        starting = self.starting()
        if not starting:
            return
        ready, _ = self.ray.wait([m.started for m in starting], num_returns=len(starting), timeout=0)
        done = set(ready)
        for m in starting:
            if m.started in done:
                self._started(m)
            elif time.monotonic() - m.since > self.start_s:
                self.drop(m, f"its measuring actor did not start within {self.start_s:.0f} s")

    def _started(self, m: Measurer) -> None:
        try:
            info = self.ray.get(m.started)
        except self.ray.exceptions.RayError as e:
            return self.drop(m, f"its measuring actor failed to start: {short(e)}")
        if info["version"] != minitc_version():
            return self.drop(m, f"it runs minitc {info['version']}, this driver {minitc_version()}")
        m.info, m.since = info, time.monotonic()

    def drop(self, m: Measurer, why: str) -> None:
        self._kill(m)
        self.dropped[m.node_id] = why
        log.warning("ray: not measuring on node %s: %s", m.name, why)

    def fail(self, m: Measurer, why: str) -> None:
        """An actor died or hung: start another on its node once, if the node is alive."""
        self._kill(m)
        strikes = self.strikes[m.node_id] = self.strikes.get(m.node_id, 0) + 1
        alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        if strikes < MAX_STRIKES and m.node_id in alive:
            log.warning("ray: node %s: %s; starting a new measuring actor there", m.name, why)
            self.start(m.node_id, m.ip)
        else:
            self.dropped[m.node_id] = why
            log.warning("ray: node %s: %s; no longer measuring there", m.name, why)

    def _kill(self, m: Measurer) -> None:
        self.measurers.pop(m.node_id, None)
        try:
            self.ray.kill(m.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def ready(self, fingerprint: str | None = None) -> list:
        return [
            m for m in self.measurers.values() if m.info is not None and fingerprint in (None, m.info["fingerprint"])
        ]

    def kinds(self) -> list:
        """The ready nodes grouped by hardware fingerprint, most nodes first."""
        groups: dict = {}
        for m in self.ready():
            groups.setdefault(m.info["fingerprint"], []).append(m)
        kinds = [
            NodeKind(fp, ms[0].info["target"], ms[0].info["cpu"], tuple(m.name for m in ms))
            for fp, ms in groups.items()
        ]
        return sorted(kinds, key=lambda k: -len(k.nodes))

    def kind_for(self, target: str) -> NodeKind:
        """The one kind of node whose measurements of `target` the records are keyed by: a kind
        of the fingerprint this driver gives `target` (e.g. 'llvm' here: nodes like this
        machine), else one whose nodes give `target` that fingerprint and can run its code (e.g.
        'llvm -mcpu=x86-64-v3'). Raises RayRunnerError naming the kinds there are."""
        if is_gpu(target):
            raise RayRunnerError(
                f"the Ray runner measures CPU targets (llvm ...), not {target!r}; use the local runner"
            )
        self.poll()
        wanted, kinds = hardware_fingerprint(target), self.kinds()
        for kind in kinds:
            if kind.fingerprint == wanted:
                return kind
        mine = hardware_fingerprint("llvm")
        fitting = [k for k in kinds if self._kind_fits(k, target) == (wanted, True)]
        if fitting:
            return sorted(fitting, key=lambda k: k.fingerprint != mine)[0]
        have = "; ".join(map(str, kinds)) or "none ready"
        gone = "".join(f"; not measuring on {n[:8]}: {why}" for n, why in self.dropped.items())
        raise RayRunnerError(
            f"no node of the Ray cluster at {self.address} has the hardware the records of target {target!r} "
            f"are keyed by ({wanted}); its nodes: {have}{gone}. Run the driver on a machine of one of these "
            "kinds, or give one's target (RayRunner.kinds())"
        )

    def _kind_fits(self, kind: NodeKind, target: str) -> tuple:
        key = (kind.fingerprint, target)
        if key not in self._fits:
            (m,) = self.ready(kind.fingerprint)[:1]
            try:
                self._fits[key] = tuple(self.ray.get(m.actor.fits.remote(target), timeout=self.start_s))
            except Exception as e:  # noqa: BLE001 - a node that cannot say does not fit
                log.warning("ray: node %s could not parse target %r: %s", m.name, target, short(e))
                return ("", False)
        return self._fits[key]

    def call(self, kind: NodeKind, fn, *args):
        """fn(*args) on a node of `kind`."""
        m = self.ready(kind.fingerprint)[0]
        return self.ray.get(m.actor.call.remote(fn, *args))

    def close(self) -> None:
        for m in list(self.measurers.values()):
            self._kill(m)
        if self.owns_connection and self.ray.is_initialized():
            self.ray.shutdown()


def short(error: Exception) -> str:
    """The first line of an error (Ray's carry whole remote tracebacks)."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
