"""Task scheduling: share a trial budget across the workloads of a network (MetaSchedule's
TaskScheduler plug point).

    results = tune_tasks([(conv1, 4), (dense, 12), (softmax, 12)], trials=512)
    results = tune_tasks(tasks, trials=512, scheduler="round-robin", runner=RayRunner(address))

Every task gets one round first; then the scheduler picks the task of each next round. The
schedulers (TASK_SCHEDULERS, or a TaskScheduler of one's own):

- `gradient` (the default, Ansor's / MetaSchedule's): the task with the largest

      w_t * (alpha * (best_t[n - 1 - window] - best_t) / window + (1 - alpha) * best_t / n)

  (w_t its weight, best_t its best latency after n rounds: the recent improvement rate, plus
  an optimistic term for tasks that have had few rounds); ties are broken at random;
- `round-robin`: each live task in turn (MetaSchedule's RoundRobin).
"""

from __future__ import annotations

import math

import numpy as np

from minitc.autotune.interfaces import Builder
from minitc.autotune.registry import make_runner
from minitc.autotune.runner import LocalBuilder
from minitc.autotune.tuner import TuningSession, check_count
from minitc.errors import ConfigError, MinitcError, warn_user

ALPHA, WINDOW = 0.2, 3


class TuningWarning(UserWarning):
    """A task of tune_tasks stopped early."""


def gradient(weight: float, bests: list) -> float:
    """Expected gain of one more round for a task whose best after each round is `bests`."""
    finite = [b for b in bests if b is not None and math.isfinite(b)]
    if not finite:
        return math.inf  # nothing works yet: worth trying
    best, n = finite[-1], len(bests)
    back = bests[-1 - WINDOW] if n > WINDOW and bests[-1 - WINDOW] is not None else finite[0]
    return weight * (ALPHA * (back - best) / WINDOW + (1 - ALPHA) * best / n)


class TaskScheduler:
    """Picks the task that measures the next round:

        class Mine(TaskScheduler):
            name = "mine"
            def next_task(self, live, weights, bests, rng):
                return live[0]  # an index into the tasks

    `live`: indices of the tasks still tuning; `weights[i]`: how often task i runs in the model;
    `bests[i]`: its best latency (ms, inf while nothing works) after each of its rounds; `rng`:
    a numpy Generator."""

    name = ""

    def next_task(self, live: list, weights: list, bests: list, rng) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define next_task(live, weights, bests, rng)")


class GradientScheduler(TaskScheduler):
    name = "gradient"

    def next_task(self, live, weights, bests, rng):
        gains = np.array([gradient(weights[i], bests[i]) for i in live])
        top = np.flatnonzero(gains == gains.max())
        return live[int(rng.choice(top))]


class RoundRobinScheduler(TaskScheduler):
    name = "round-robin"

    def __init__(self):
        self.last = -1

    def next_task(self, live, weights, bests, rng):
        later = [i for i in live if i > self.last]
        self.last = later[0] if later else live[0]
        return self.last


TASK_SCHEDULERS = {s.name: s for s in (GradientScheduler, RoundRobinScheduler)}


def make_task_scheduler(scheduler) -> TaskScheduler:
    """A TaskScheduler as given (an instance or a class), or the one of TASK_SCHEDULERS named."""
    if isinstance(scheduler, type) and issubclass(scheduler, TaskScheduler):
        scheduler = scheduler()
    if isinstance(scheduler, TaskScheduler):
        return scheduler
    if scheduler not in TASK_SCHEDULERS:
        raise ConfigError(
            f"unknown task scheduler {scheduler!r}; choose one of {', '.join(TASK_SCHEDULERS)} or pass a TaskScheduler"
        )
    return TASK_SCHEDULERS[scheduler]()


def tune_tasks(
    tasks: list,
    trials: int,
    strategy: str = "evolutionary",
    target: str = "llvm",
    db=None,
    *,
    batch: int = 16,
    seed: int = 0,
    cost_model=None,
    progress=None,
    scheduler="gradient",
    runner=None,
    builder=None,
    space=None,
) -> list:
    """Tune several (outputs, weight) tasks within `trials` measurements in total; returns a
    TuneResult per task, in order. `progress(task index, session)` is called after each round.
    `scheduler`: a name of TASK_SCHEDULERS or a TaskScheduler. `runner`, `builder` and `space`
    are tc.tune's, shared by every task (a RayRunner measures a whole model on its cluster; a
    space such as "generic" or a SpaceGenerator applies to each task). A task whose round raises
    a MinitcError (its strategy cannot write its programs) stops with a TuningWarning; the
    others go on. Raises ConfigError for `trials` or `batch` that is not a whole number >= 1,
    and for an unknown scheduler."""
    trials, batch = check_count(trials, "tune_tasks: trials"), check_count(batch, "tune_tasks: batch")
    pick = make_task_scheduler(scheduler)
    rng = np.random.default_rng(seed)
    own_runner, own_builder = runner is None, builder is None and not isinstance(runner, Builder)
    runner = make_runner(runner or "local", target)  # a GpuRunner for a GPU target
    if builder is None:
        builder = runner if isinstance(runner, Builder) else LocalBuilder(workers=1)
    sessions, bests = [], []
    try:
        for n, (outputs, _) in enumerate(tasks):
            sessions.append(
                TuningSession(
                    outputs,
                    strategy,
                    target,
                    db,
                    batch=batch,
                    seed=seed + n,
                    cost_model=cost_model,
                    builder=builder,
                    runner=runner,
                    space=space,
                )
            )
            bests.append([])
        used = 0

        def run(i):
            nonlocal used
            try:
                used += sessions[i].round(min(batch, trials - used))
            except MinitcError as e:  # the task keeps what it measured (or its template)
                sessions[i].exhausted = True
                warn_user(f"tuning stopped for task {i} ({sessions[i].key[:12]}): {e}", TuningWarning)
            bests[i].append(sessions[i].best)
            if progress is not None:
                progress(i, sessions[i])

        for i in range(len(sessions)):  # every task's first round
            if used < trials:
                run(i)
        weights = [weight for _, weight in tasks]
        while used < trials:
            live = [i for i, s in enumerate(sessions) if not s.exhausted]
            if not live:
                break
            chosen = pick.next_task(live, weights, bests, rng)
            if chosen not in live:
                raise ConfigError(f"the task scheduler {type(pick).__name__} chose {chosen!r}, not a live task {live}")
            run(chosen)
        return [s.finish() for s in sessions]
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
