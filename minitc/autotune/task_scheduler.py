"""Task scheduling: share a trial budget across the workloads of a network by expected gain
(Ansor's / MetaSchedule's gradient-based scheduler).

    results = tune_tasks([(conv1, 4), (dense, 12), (softmax, 12)], trials=512)

After one round-robin pass, each round goes to the task with the largest

    w_t * (alpha * (best_t[n - 1 - window] - best_t) / window + (1 - alpha) * best_t / n)

(w_t its weight, best_t its best latency after n rounds: the recent improvement rate, plus an
optimistic term for tasks that have had few rounds); ties are broken at random.
"""

from __future__ import annotations

import math

import numpy as np

from minitc.autotune.registry import make_runner
from minitc.autotune.runner import LocalBuilder
from minitc.autotune.tuner import TuningSession, check_count
from minitc.errors import MinitcError, warn_user

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
) -> list:
    """Tune several (outputs, weight) tasks within `trials` measurements in total; returns a
    TuneResult per task, in order. `progress(task index, session)` is called after each round.
    A task whose round raises a MinitcError (its strategy cannot write its programs) stops with a
    TuningWarning; the others go on. Raises ConfigError for `trials` or `batch` that is not a
    whole number >= 1."""
    trials, batch = check_count(trials, "tune_tasks: trials"), check_count(batch, "tune_tasks: batch")

    rng = np.random.default_rng(seed)
    builder, runner = LocalBuilder(workers=1), make_runner("local", target)  # a GpuRunner for a GPU target
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

        for i in range(len(sessions)):  # round robin first
            if used < trials:
                run(i)
        while used < trials:
            live = [i for i, s in enumerate(sessions) if not s.exhausted]
            if not live:
                break
            gains = np.array([gradient(tasks[i][1], bests[i]) for i in live])
            top = np.flatnonzero(gains == gains.max())
            run(live[int(rng.choice(top))])
        return [s.finish() for s in sessions]
    finally:
        builder.close()
        runner.close()
