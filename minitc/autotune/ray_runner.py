"""Measuring candidates on a Ray cluster: a Builder and Runner (interfaces.py) like the local
ones (runner.py), so the tuner uses it unchanged.

    runner = RayRunner("10.0.0.1:6379")            # or None: $RAY_ADDRESS, else this machine's cluster
    tc.tune(C, trials=64, builder=runner, runner=runner)
    minitc tune matmul --shape 512,512,512 --ray 10.0.0.1:6379

Each node runs one measuring actor (ray_nodes.py) that builds a candidate from its trace on that
node, for that node's CPU, and measures it there in a subprocess with the local runner's
time-outs and numpy check. As a builder, RayRunner only passes the traces on; given another
builder's output it still builds on the node (the driver's object code is for the driver's CPU).
The driver spreads a batch over the nodes of one hardware kind, the kind the records are keyed
by, and alone writes the database.

Faults: a candidate whose node dies (or whose actor gives no result for `hang_timeout` seconds,
then killed) is measured on another node of the kind, at most `MAX_TRIES` times, else recorded
as an error; the node gets a new actor once (ray_nodes.MAX_STRIKES).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import deque

from minitc.autotune.interfaces import Builder, Runner
from minitc.autotune.ray_nodes import NodePool, RayRunnerError, import_ray, short
from minitc.autotune.runner import BuildResult, MeasureResult

MAX_TRIES = 3  # nodes a candidate may be lost on before it is recorded as an error
DEPTH = 2  # calls queued per actor: the next candidate is there when one finishes


class RayRunner(Builder, Runner):
    """Builder and runner on the Ray cluster at `address` (default: $RAY_ADDRESS, else the
    cluster started with `ray start --head` on this machine). `timeout`, `repeats` and
    `min_repeat_ms` are LocalRunner's, `build_timeout` LocalBuilder's, `threads` the kernel's
    thread count (default: each node's own). An actor with calls queued that finishes none for
    `hang_timeout` seconds (default: a build, a run and a minute) is taken to hang. Raises
    RayRunnerError if ray is missing or the cluster cannot be reached within `connect_timeout`."""

    workers = 1  # as a builder: TuningSession's overlap mode builds one candidate at a time

    def __init__(
        self,
        address: str | None = None,
        *,
        timeout: float = 10.0,
        repeats: int = 5,
        min_repeat_ms: float = 20.0,
        build_timeout: float = 60.0,
        threads: int | None = None,
        hang_timeout: float | None = None,
        connect_timeout: float = 10.0,
    ):
        self.timeout, self.repeats, self.min_repeat_ms, self.threads = timeout, repeats, min_repeat_ms, threads
        self.hang_timeout = hang_timeout or build_timeout + timeout + 60.0
        self.pool = NodePool(address, (timeout, build_timeout, min_repeat_ms, threads), connect_timeout)
        self.owner = True  # False for the views fresh() makes
        self.stats = {"candidates": 0, "node_s": 0.0, "run_s": 0.0, "requeued": 0}
        self._tasks: dict = {}  # id(task) -> (task, task id, ObjectRef)

    @property
    def address(self) -> str:
        return self.pool.address

    def kinds(self) -> list:
        """The cluster's nodes grouped by hardware (ray_nodes.NodeKind), most nodes first."""
        self.pool.poll()
        return self.pool.kinds()

    def kind_for(self, target: str):
        """The kind of node that measures `target` (raises RayRunnerError if none can)."""
        return self.pool.kind_for(target)

    def call(self, kind, fn, *args):
        """fn(*args) on a node of `kind` (a picklable function, e.g. one describing the node)."""
        return self.pool.call(kind, fn, *args)

    # -- Builder: the build happens on the node that measures --------------------------------

    def build(self, task, traces: list) -> list:
        return [BuildResult(trace) for trace in traces]

    def build_one(self, task, trace: str) -> list:
        return [BuildResult(trace)]

    # -- Runner ------------------------------------------------------------------------------

    def fresh(self, repeats: int) -> RayRunner:
        """A view of this runner with more repeats, on the same actors (the final re-measurement)."""
        view = copy.copy(self)
        view.repeats, view.owner = repeats, False
        view.stats = dict.fromkeys(self.stats, 0)
        return view

    def run(self, task, built: list) -> list:
        """A MeasureResult per built candidate, in order; each measured on a node of the kind
        the records are keyed by. Errors of `built` (another builder's) are passed on."""
        start = time.perf_counter()
        results = [None] * len(built)
        todo = deque()
        for i, b in enumerate(built):
            if b.error is not None:
                results[i] = MeasureResult(b.trace, error=b.error, build_s=b.seconds)
            else:
                todo.append(i)
        if todo:
            kind = self._kind(task.target)
            _Batch(self, kind.fingerprint, task, built, results, todo).run()
        self.stats["run_s"] += time.perf_counter() - start
        return results

    def _kind(self, target: str):
        """The kind measuring `target`, with nodes that joined since the last batch; waits for
        starting actors only when no ready one fits."""
        self.pool.refresh(wait=False)
        try:
            return self.pool.kind_for(target)
        except RayRunnerError:
            if not self.pool.starting():
                raise
        self.pool.wait_started()
        return self.pool.kind_for(target)

    def _task_ref(self, task) -> tuple:
        """(task id, ObjectRef) of a task, put in the object store once."""
        if id(task) not in self._tasks:
            if len(self._tasks) >= 8:
                self._tasks.pop(next(iter(self._tasks)))
            self._tasks[id(task)] = (task, uuid.uuid4().hex, import_ray().put(task))
        _, task_id, ref = self._tasks[id(task)]
        return task_id, ref

    def close(self) -> None:
        """End the actors (and the connection, if this runner made it); views do nothing."""
        if self.owner:
            self.pool.close()
            self._tasks.clear()

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Batch:
    """One run() call: hands candidates to the actors of one kind, DEPTH at a time each,
    collects the results, and moves the candidates of failed actors elsewhere."""

    def __init__(self, runner: RayRunner, kind: str, task, built: list, results: list, todo: deque):
        self.ray, self.runner, self.pool, self.kind = import_ray(), runner, runner.pool, kind
        self.built, self.results, self.todo = built, results, todo
        self.task_id, ref = runner._task_ref(task)
        self.box = [ref]  # in a list: the actor fetches it once, not every call
        self.where: dict = {}  # ObjectRef -> Measurer
        self.tries = [0] * len(built)

    def run(self) -> None:
        while self.todo or self.where:
            self.pool.poll()
            self._submit()
            waiting = list(self.where) + [m.started for m in self.pool.starting()]
            if not waiting:  # no actor of the kind left, none starting
                return self._give_up()
            done, _ = self.ray.wait(waiting, num_returns=1, timeout=self._wait_s())
            for ref in done:
                if ref in self.where:
                    self._collect(ref)
            self._check_hangs()

    def _submit(self) -> None:
        for m in self.pool.ready(self.kind):
            while self.todo and len(m.inflight) < DEPTH:
                i = self.todo.popleft()
                if not m.inflight:
                    m.since = time.monotonic()
                ref = m.actor.measure.remote(self.task_id, self.box, self.built[i].trace, self.runner.repeats)
                m.inflight[ref] = i
                self.where[ref] = m

    def _collect(self, ref) -> None:
        m = self.where.pop(ref)
        i = m.inflight.pop(ref)
        try:
            result, seconds = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:  # minitc failed on the node, not the kernel
            self.results[i] = MeasureResult(self.built[i].trace, error=f"internal error on node {m.name}: {short(e)}")
            return
        except self.ray.exceptions.RayError as e:  # the actor or its node died
            m.inflight[ref] = i
            return self._lost(m, f"its measuring actor died ({short(e)})")
        m.since = time.monotonic()
        self.results[i] = result
        self.runner.stats["candidates"] += 1
        self.runner.stats["node_s"] += seconds

    def _lost(self, m, why: str) -> None:
        """Give `m`'s queued candidates to other actors (or record them as errors)."""
        for ref, i in m.inflight.items():
            self.where.pop(ref, None)
            self.tries[i] += 1
            if self.tries[i] >= MAX_TRIES:
                self.results[i] = MeasureResult(
                    self.built[i].trace, error=f"lost: {MAX_TRIES} measuring nodes failed while measuring it ({why})"
                )
            else:
                self.todo.appendleft(i)
                self.runner.stats["requeued"] += 1
        m.inflight.clear()
        self.pool.fail(m, why)

    def _check_hangs(self) -> None:
        now = time.monotonic()
        for m in list(self.pool.ready(self.kind)):
            if m.inflight and now - m.since > self.runner.hang_timeout:
                self._lost(m, f"no result for {self.runner.hang_timeout:.0f} s (hung)")

    def _wait_s(self) -> float:
        """Until the earliest hang deadline, at most a second (starting actors are polled)."""
        now = time.monotonic()
        deadlines = [m.since + self.runner.hang_timeout - now for m in self.pool.ready(self.kind) if m.inflight]
        return max(0.0, min([1.0, *deadlines]))

    def _give_up(self) -> None:
        gone = "; ".join(self.pool.dropped.values()) or "none started"
        for i in self.todo:
            self.results[i] = MeasureResult(
                self.built[i].trace, error=f"not measured: no node of hardware {self.kind} is left ({gone})"
            )
        self.todo.clear()


__all__ = ["RayRunner", "RayRunnerError"]
