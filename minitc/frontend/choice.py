"""Choosing, per task, between the template's program and the records' best, inside the model.

A tuned program wins its tuning session when timed alone: its inputs warm, the cores its own.
Inside a model the same program runs after its producer and before its consumer, with the
caches in the state they leave, and can lose (on BERT-base, 300 trials made the model 7% slower
on an Intel Xeon and slower on a Zen 5). So where the records hold a program other than the
template's, the model is run both ways, interleaved, on the example inputs, and each task keeps
the tuned program only where its median time in the model is lower. The mix is then timed
against the all-template plan and dropped if it is not faster as a whole: tuning never makes
the model slower. Nothing is stored: a later compile from the same records decides again, on
the machine it runs on.

    choices = choose_programs(graph, tasks, template_kernels, tuned_kernels, arrays)
    choices[0]  # Choice(task='dense ... x12', template_ms=6.1, tuned_ms=5.2, kept='tuned')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitc.frontend.runtime import Plan

ROUNDS = 7  # runs of each plan, interleaved; the first of each is a warm-up on top of these


@dataclass(frozen=True)
class Choice:
    """One task's programs timed in the model: per-call milliseconds summed over its nodes."""

    task: str
    template_ms: float
    tuned_ms: float
    kept: str  # "tuned" or "template"


def _timed_runs(plans: list, arrays: list, rounds: int) -> list:
    """For each plan, the per-run step times ({node: [seconds per run]}) and the run totals."""
    import time

    results = [({}, []) for _ in plans]
    for r in range(rounds + 1):
        for plan, (steps, totals) in zip(plans, results):
            times: dict = {}
            start = time.perf_counter()
            plan.run(arrays, times)
            if r:  # the first run binds the plan and warms its arena
                totals.append(time.perf_counter() - start)
                for name, seconds in times.items():
                    steps.setdefault(name, []).append(seconds)
    return results


def _task_ms(steps: dict, nodes: list) -> float:
    return 1e3 * float(np.median(np.sum([steps[n] for n in nodes], axis=0)))


def choose_programs(graph, tasks, template_kernels: dict, tuned_kernels: dict, arrays: list, rounds=ROUNDS, plan=Plan):
    """{node: kernel} keeping, for each task with a tuned kernel, the faster of the two inside
    the model, and a Choice per such task. `tuned_kernels` holds only the nodes of tasks whose
    records' program differs from the template's; `plan(graph, kernels)` makes the plans timed
    (runtime.Plan, or device_runtime.make_plan's for a GPU)."""
    contested = [t for t in tasks if t.nodes[0] in tuned_kernels]
    if not contested:
        return dict(template_kernels), []
    template, tuned = plan(graph, template_kernels), plan(graph, {**template_kernels, **tuned_kernels})
    (template_steps, _), (tuned_steps, _) = _timed_runs([template, tuned], arrays, rounds)
    kernels, choices = dict(template_kernels), []
    for task in contested:
        before, after = _task_ms(template_steps, task.nodes), _task_ms(tuned_steps, task.nodes)
        kept = "tuned" if after < before else "template"
        if kept == "tuned":
            kernels.update({n: tuned_kernels[n] for n in task.nodes})
        choices.append(Choice(str(task), before, after, kept))
    if not any(c.kept == "tuned" for c in choices):
        return kernels, choices
    mixed = plan(graph, kernels)
    (_, template_totals), (_, mixed_totals) = _timed_runs([template, mixed], arrays, rounds)
    if np.median(mixed_totals) >= np.median(template_totals):  # better task by task, not as a whole
        choices = [Choice(c.task, c.template_ms, c.tuned_ms, "template") for c in choices]
        return dict(template_kernels), choices
    return kernels, choices
