"""Tuning benchmarks: tune a workload with `tc.tune`, then time the tuned kernel against the hand
template (`tc.build(out, db=False)`), numpy and torch. `minitc tune` runs one workload; the
suites below run many:

    python -m benchmarks --suite cpu-tune --trials 64 [--strategies random,evolutionary]
                         [--workloads matmul-512,...] [--threads 2] [--db records.db]
                         [--cost-model default|random] [--json out.json] [--plot curves.png]

`cpu-tune` is every workload of `cpu-core`; `smoke-tune` a few tiny ones (for the tests). Each
(workload, thread count, strategy) is tuned from a fresh temporary records database, unless
`--db` is given (then the runs share it, and a later run resumes from the earlier ones'
records). After all strategies of a workload are tuned, their kernels, the template, numpy and
torch are timed together, interleaved (timing.measure), after checking every minitc kernel
against numpy. The table is report.tuning_table, the curves plots.plot_curves.

JSON (`--json`): a list of records, one per workload, thread count and strategy, with the
runner's fields (runner.py: suite, workload, description, kind, threads, numpy_ms, torch_ms,
best_library, ratio, gflops|gbps, flops|bytes, peak_pct, spread_pct, background_cpus, error,
notes, machine, run) and, for tuning:

    "strategy": "evolutionary", "cost_model": "TLPModel" | "pretrained (FILE)" | "random (placeholder)" | null,
    "trials_requested": 64, "trials": 64, "errors": 3,   # measured in this run / failed
    "trials_resumed": 0,          # trials of the same run recorded earlier (minitc tune's resume)
    "best_ms": 1.21,              # the tuner's re-measured best (bare kernel, runner process)
    "default_kernel_ms": 2.2,     # the hand template measured the same way (null: not measured)
    "kernel_speedup_vs_default": 1.8,   # default_kernel_ms / best_ms
    "tuned_ms": 1.23, "default_ms": 2.3,   # timed here, interleaved with numpy and torch
    "same_as_template": false,    # the best program is the template's own: timed once, both rows
    "ratio": 1.2,                 # best library ms / tuned ms (> 1: tuned minitc is faster)
    "default_ratio": 0.64,        # best library ms / template ms
    "speedup_vs_default": 1.9,    # template ms / tuned ms
    "seconds": 48.2, "overhead_s_per_trial": 0.62,   # tuning wall time, per-trial overhead
    "history": [3.1, 2.4, ...],   # best-so-far ms after each trial (null before a success)
    "workload_key": "1a2b...", "best_trace": "{...}", "db": null | "records.db"
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

import minitc as tc
from minitc.autotune.cost_model import RandomModel, default_cost_model
from minitc.autotune.runner import LocalBuilder, LocalRunner
from minitc.autotune.tuner import recorded_trials, tune
from minitc.benchmarks.handwritten import HANDWRITTEN
from minitc.benchmarks.programs import is_template, template_kernel_ms
from minitc.benchmarks.progress import TuneProgress
from minitc.benchmarks.report import rounded, short, sig
from minitc.benchmarks.runner import against_libraries, mismatch, rated, torch_callable
from minitc.benchmarks.suites import CPU_CORE, SMOKE, Workload
from minitc.lm.cost import shipped_cost_model_path
from minitc.timing import BackgroundLoad, measure, thread_limit, wait_for_quiet

TUNE_SUITES = {
    "cpu-tune": CPU_CORE,
    "smoke-tune": [w for w in SMOKE if w.name in ("matmul-64", "softmax-small", "dense-small")],
    "handwritten-tune": HANDWRITTEN,
}


def cost_model_for(strategy: str, choice: str = "default", seed: int = 0, target="llvm") -> tuple:
    """(model or None, label) for a strategy. `choice` "default" is, for the tlm strategy, its
    own choice (None: the shipped cost model of `target`'s machine, as `tc.tune` gives it), for
    evolutionary search `default_cost_model()`; "random" is random scores (RandomModel: the
    evolutionary search is then a mutation-based random search). Random search uses no model
    (None, None)."""
    if strategy not in ("evolutionary", "tlm"):
        return None, None
    if choice == "random":
        return RandomModel(seed), "random"
    if strategy == "tlm":
        return None, tlm_cost_model_label(target)
    model = default_cost_model()
    return model, type(model).__name__


def tlm_cost_model_label(target) -> str:
    """What the tlm strategy ranks with on `target`: a pretrained cost model's file, else a
    fresh TLPModel (minitc.lm.plugin.tlm_strategy)."""
    path = shipped_cost_model_path(target)
    return f"pretrained ({path.name})" if path is not None else "TLPModel"


def tensors_of(w: Workload):
    """The output tensor(s) a workload's minitc implementation computes."""
    made = w.make_minitc()
    return made.outputs if hasattr(made, "outputs") and not hasattr(made, "shape") else made


def tune_one(
    w: Workload,
    out,
    strategy: str,
    trials: int,
    *,
    db=None,
    target="llvm",
    seed=0,
    batch=16,
    cost_model="default",
    progress=None,
    builder=None,
    runner=None,
    lm=None,
    learn=False,
    run=None,
    strict=False,
) -> dict:
    """Tune `out` (w's tensors) once; returns {"result": TuneResult or None, "error", "cost_model",
    "db"}. With db=None the run gets a fresh temporary database. A failure of `tune`
    becomes the "error" entry, or with `strict` propagates (the command line stops at once)."""

    model, label = cost_model_for(strategy, cost_model, seed, target)  # registered by the strategy's bind
    tmp = tempfile.TemporaryDirectory(prefix="minitc-tune-") if db is None else None
    path = os.path.join(tmp.name, "records.db") if tmp else db
    info = {"result": None, "error": None, "cost_model": label, "db": None if tmp else str(db)}
    try:
        info["result"] = tune(
            out,
            trials=trials,
            strategy=strategy,
            target=target,
            db=path,
            batch=batch,
            seed=seed,
            cost_model=model,
            builder=builder,
            runner=runner,
            progress=progress,
            lm=lm,
            learn=learn,
            run=run,
        )
        if info["result"].kernel is None:
            info["error"] = f"tuning found no working candidate ({info['result'].errors} errors)"
    except Exception as e:  # noqa: BLE001 - one workload's failure becomes an error row
        if strict:
            raise
        info["error"] = f"tune failed: {short(e)}"
    finally:
        if tmp:
            tmp.cleanup()
    return info


def compare(w: Workload, out, tuned: dict, threads: int, target="llvm", repeats=10, budget_s=2.0, seed=0) -> tuple:
    """Check and time the tuned kernels ({label: tc.Function}), the template, numpy and torch,
    interleaved, with `threads` threads; returns ({impl: Timing}, {impl: error}, notes, load)."""
    inputs = w.make_inputs(np.random.default_rng(seed))
    numpy_fn = w.make_numpy()
    expected = np.asarray(numpy_fn(*inputs))
    fns, errors, notes = {"numpy": lambda: numpy_fn(*inputs)}, {}, []
    kernels = dict(tuned)
    try:
        kernels["default"] = tc.build(out, target=target, db=False)
    except Exception as e:  # noqa: BLE001
        errors["default"] = f"build failed: {short(e)}"
    if (torch_fn := torch_callable(w, inputs, expected, notes)) is not None:
        fns["torch"] = torch_fn
    with thread_limit(threads):
        for impl, f in kernels.items():
            buf = np.full(f.kernel.outputs[0].shape, np.nan, f.kernel.outputs[0].dtype)
            try:
                f(*inputs, out=buf)
                why = mismatch(buf, expected, w)
            except Exception as e:  # noqa: BLE001
                why = f"run failed: {short(e)}"
            if why:
                errors[impl] = why
            else:
                fns[impl] = lambda f=f, buf=buf: f(*inputs, out=buf)
        with BackgroundLoad() as load:
            timings = measure(fns, repeats=repeats, budget_s=budget_s)
    return timings, errors, notes, load.cpus


def tune_workload(
    w: Workload,
    strategies,
    trials: int,
    threads: int,
    *,
    db=None,
    target="llvm",
    seed=0,
    batch=16,
    cost_model="default",
    repeats=10,
    budget_s=2.0,
    say=None,
    progress_factory=None,
    suite=None,
    machine=None,
    builder=None,
    runner=None,
    lm=None,
    learn=False,
    run=None,
    strict=False,
    template_kernel=True,
) -> list:
    """Tune `w` with each strategy (with `threads` threads), then compare; one record per
    strategy. `progress_factory(strategy)` gives the `progress` callback of each tune call;
    with `run` (a name for the search setting; each strategy adds its own name) and a `db`,
    `trials` is each strategy's total and a rerun measures only what an interrupted run left
    (tune_one's `strict` stops at a failure of `tune`). `template_kernel` also times the template the way the
    tuner times candidates (`default_kernel_ms`). A strategy whose best program is the
    template's own is timed once, as the template (`same_as_template`)."""

    say = say or (lambda msg: None)
    out = tensors_of(w)
    infos = {}
    earlier = {s: recorded_trials(out, target, db, _run_name(run, s)) if run and db else 0 for s in strategies}
    own_builder, own_runner = builder is None, runner is None  # one pair of worker processes for all
    builder, runner = builder or LocalBuilder(workers=1), runner or LocalRunner(threads=threads)
    try:
        with thread_limit(threads):
            for strategy in strategies:
                if earlier[strategy]:
                    say(resume_note(earlier[strategy], trials))
                todo = max(trials - earlier[strategy], 0)
                if todo:
                    say(f"{w.name}: tuning with {strategy} search, {todo} trials, {threads} thread(s)")
                bar = progress_factory(strategy) if progress_factory else None
                infos[strategy] = tune_one(
                    w,
                    out,
                    strategy,
                    trials,
                    db=db,
                    target=target,
                    seed=seed,
                    batch=batch,
                    cost_model=cost_model,
                    progress=bar,
                    builder=builder,
                    runner=runner,
                    lm=lm,
                    learn=learn,
                    run=_run_name(run, strategy),
                    strict=strict,
                )
                if bar is not None and hasattr(bar, "close"):
                    bar.close()
            template_ms = None
            if template_kernel:
                say(f"{w.name}: measuring the template like the tuner does")
                template_ms = template_kernel_ms(out, target, builder, runner)
    finally:  # also on Ctrl-C: end the worker processes
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    for info in infos.values():
        info["same_as_template"] = bool(info["result"]) and is_template(out, info["result"].best_trace, target)
    tuned = {
        f"tuned:{s}": i["result"].kernel
        for s, i in infos.items()
        if i["result"] and i["result"].kernel and not i["same_as_template"]
    }
    say(f"{w.name}: timing " + ", ".join([*tuned, "the template", "numpy and torch"]))
    timings, errors, notes, load = compare(w, out, tuned, threads, target, repeats, budget_s, seed)
    rows = [record(w, s, trials, infos[s], timings, errors, notes, threads, load, suite, machine) for s in strategies]
    for row in rows:
        row["default_kernel_ms"] = sig(template_ms, 5)
        row["kernel_speedup_vs_default"] = (
            sig(template_ms / row["best_ms"], 4) if template_ms and row["best_ms"] else None
        )
    return rows


def _run_name(run, strategy: str):
    return f"{run} strategy={strategy}" if run else None


def resume_note(recorded: int, trials: int) -> str:
    """What a rerun of a run with `recorded` of its `trials` already measured does."""
    if recorded >= trials:
        return (
            f"resuming: all {trials} trials of this run are recorded, measuring none "
            "(raise --trials or change --seed to measure more)"
        )
    return f"resuming: {recorded} of {trials} trials recorded, measuring {trials - recorded}"


def run_tune_suite(
    workloads,
    suite: str,
    threads,
    strategies,
    trials: int,
    *,
    db=None,
    seed=0,
    batch=16,
    cost_model="default",
    repeats=10,
    budget_s=2.0,
    machine=None,
    progress=None,
    context=None,
    wait_quiet_s=0.0,
) -> list:
    """Records of every workload x thread count x strategy; `context` is attached to each."""

    records = []
    builder = LocalBuilder(workers=1)  # shared by all runs: worker processes start once
    try:
        for n in threads:
            runner = LocalRunner(threads=n)
            try:
                for i, w in enumerate(workloads):
                    tag = f"[{i + 1}/{len(workloads)}]"
                    say = (lambda msg, tag=tag: progress(f"{tag} {msg}")) if progress else None
                    if wait_quiet_s > 0:
                        wait_for_quiet(wait_quiet_s)

                    def factory(s, w=w, tag=tag):
                        return TuneProgress(
                            trials, w.work, w.unit, f"{tag} {w.name} {s} ", every=batch, enabled=progress is not None
                        )

                    rows = tune_workload(
                        w,
                        strategies,
                        trials,
                        n,
                        db=db,
                        seed=seed,
                        batch=batch,
                        cost_model=cost_model,
                        repeats=repeats,
                        budget_s=budget_s,
                        say=say,
                        progress_factory=factory,
                        suite=suite,
                        machine=machine,
                        builder=builder,
                        runner=runner,
                    )
                    for rec in rows:
                        records.append({**rec, **(context or {})})
                        if say:
                            say(summary(rec))
            finally:
                runner.close()
    finally:
        builder.close()
    return records


def record(
    w: Workload,
    strategy: str,
    trials: int,
    info: dict,
    timings: dict,
    errors: dict,
    notes: list,
    threads: int,
    background_cpus=None,
    suite=None,
    machine=None,
) -> dict:
    """One JSON row (see the module docstring): a workload tuned by one strategy."""
    r = info["result"]
    same = bool(info.get("same_as_template"))
    tuned_key = "default" if same else f"tuned:{strategy}"  # one program, one measurement
    keys = {"tuned": tuned_key, "default": "default", "numpy": "numpy", "torch": "torch"}
    ms = {impl: timings[key].median * 1e3 if key in timings else None for impl, key in keys.items()}
    libraries = against_libraries(ms, ms["tuned"])
    best = libraries["best_library"]
    error = info["error"] or errors.get(tuned_key)
    spread = {impl: rounded(100 * timings[key].spread, 1) for impl, key in keys.items() if key in timings}
    return {
        "suite": suite,
        "workload": w.name,
        "description": w.description,
        "kind": w.kind,
        "threads": threads,
        "strategy": strategy,
        "cost_model": info["cost_model"],
        "trials_requested": trials,
        "trials": r.trials if r else 0,
        "trials_resumed": r.resumed if r else 0,
        "errors": r.errors if r else 0,
        "best_ms": sig(r.best_ms, 5) if r else None,
        **{f"{impl}_ms": sig(v, 5) for impl, v in ms.items()},
        **libraries,
        "default_ratio": sig(ms[best] / ms["default"], 4) if best and ms["default"] else None,
        "speedup_vs_default": sig(ms["default"] / ms["tuned"], 4) if ms["default"] and ms["tuned"] else None,
        "same_as_template": same,
        **rated(w, ms["tuned"], machine, threads),
        "seconds": rounded(r.seconds, 2) if r else None,
        "overhead_s_per_trial": rounded(r.overhead_s_per_trial, 3) if r else None,
        "history": [sig(h, 5) for h in r.history] if r else [],
        "workload_key": r.workload if r else None,
        "best_trace": r.best_trace if r else None,
        "spread_pct": spread,
        "background_cpus": rounded(background_cpus, 2),
        "error": error,
        "notes": list(notes) + ([f"template: {errors['default']}"] if "default" in errors else []),
        "db": info["db"],
    }


def summary(rec: dict) -> str:
    """One progress line: a tuned row's times."""
    parts = [
        f"{impl} {rec[impl + '_ms']:.4g} ms"
        for impl in ("tuned", "default", "numpy", "torch")
        if rec.get(impl + "_ms") is not None
    ]
    tail = f"  ERROR {rec['error']}" if rec.get("error") else ""
    return f"{rec['workload']} [{rec['threads']}T] {rec['strategy']}: " + ", ".join(parts) + tail
