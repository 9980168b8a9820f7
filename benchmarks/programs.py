"""Programs named by their traces, timed the way the tuner times candidates: the hand template's
program, and several programs side by side (the tuning suites and tlm-eval time winners so)."""

from __future__ import annotations

import numpy as np

from minitc.autotune.runner import LocalBuilder, LocalRunner, Task
from minitc.autotune.space import Space
from minitc.autotune.tuner import decode_trace


def template_trace(out, target="llvm"):
    """The trace of the hand template's program with its default parameters (what `tc.build`
    runs); None without a template."""
    try:
        space = Space(out, target)
        return space.replay(space.default_values()).trace
    except Exception:  # noqa: BLE001 - no template for this computation
        return None


def is_template(out, trace_text, target="llvm") -> bool:
    """Whether a record's trace (tuner.encode_trace) replays the hand template's default program."""
    template = template_trace(out, target)
    if template is None or not trace_text:
        return False
    return decode_trace(trace_text)[1].to_json() == decode_trace(template)[1].to_json()


def template_kernel_ms(out, target="llvm", builder=None, runner=None):
    """The hand template's latency measured the way the tuner measures candidates (bare kernel
    in the runner process), so it compares with `best_ms` and the history; None without a
    template or when it fails."""
    trace = template_trace(out, target)
    if trace is None:
        return None
    return kernels_ms(out, {"template": trace}, target, rounds=1, builder=builder, runner=runner)["template"]


def kernels_ms(out, traces: dict, target="llvm", rounds: int = 5, builder=None, runner=None) -> dict:
    """{name: median ms} of the programs `traces` ({name: trace}), timed the way the tuner times
    candidates, side by side: `rounds` rounds over all of them, in a rotated order each round,
    and each program's median over all rounds' samples (None where it fails). What a search's
    history shows is each program's first measurement, and the best of many noisy
    measurements is optimistic by its noise; this times the winners again on equal terms."""
    space = Space(out, target)
    task = Task.from_outputs(space.outputs, space.target.string)
    names = list(traces)
    own_builder, own_runner = builder is None, runner is None
    builder, runner = builder or LocalBuilder(workers=1), runner or LocalRunner(repeats=10)
    samples: dict = {name: [] for name in names}
    try:
        built = dict(zip(names, builder.build(task, [traces[n] for n in names])))
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)] if names else []
            for name, res in zip(order, runner.run(task, [built[n] for n in order])):
                if res.error is None and res.latencies_ms:
                    samples[name] += list(res.latencies_ms)
    finally:
        if own_builder:
            builder.close()
        if own_runner:
            runner.close()
    return {name: float(np.median(v)) if v else None for name, v in samples.items()}
