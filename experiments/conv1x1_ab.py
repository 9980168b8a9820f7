"""Same-process A/B of a CNN compiled with conv2d_nchwc's defaults and with some of them
overridden (the baseline): alternating rounds of whole-model calls at 2 threads, then each
convolution's time inside the model (Plan.run's per-node times, medians).

    [AB_TAG=gemv] python experiments/conv1x1_ab.py resnet50 [ROUNDS] [NAME=VALUE ...]

The plans are timed by plan_ab.compare_plans (their order alternating from round to round).
Overrides apply to every convolution, or with `RxS:NAME=VALUE` (`1x1:rcb=0`) to those of that
window only; the default override is `1x1:rcb=0` (a 1x1's reduction in one pass).
"""

import os
import sys

import torch
from plan_ab import compare_plans

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS
from minitc.templates import DEFAULTS, load_templates

load_templates()
TAG = os.environ.get("AB_TAG", "conv2d_nchwc")  # the template whose defaults are overridden
CURRENT = DEFAULTS[TAG]


def _value(text):
    return {"true": True, "false": False}.get(text, int(text) if text.lstrip("-").isdigit() else text)


def baseline_rule(overrides):
    parsed = []  # (window or "", name, value)
    for spec in overrides:
        window, _, setting = spec.rpartition(":")
        name, sep, value = setting.partition("=")
        if not sep or "," in value:
            raise SystemExit(f"an override is one NAME=VALUE per argument, got {spec!r}")
        parsed.append((window, name, _value(value)))

    def rule(s, out, target):
        params = CURRENT(s, out, target)
        for window, name, value in parsed:
            if not window or window == _window(s, out):
                params[name] = value
        return params

    return rule


def _window(s, out):
    from minitc.templates.gemm import epilogue_anchor

    st = s.state.stage(epilogue_anchor(s, out, "conv2d_nchwc", "conv2d_nchwc"))
    return f"{st.reduce_axes[1].extent}x{st.reduce_axes[2].extent}"


def compiled(model, inputs, rule):
    DEFAULTS[TAG] = rule
    try:
        return tc.compile(model, inputs)
    finally:
        DEFAULTS[TAG] = CURRENT


def main(name: str, rounds: int = 10, *overrides: str) -> None:
    torch.set_num_threads(2)
    tc.set_num_threads(2)
    model, inputs = MODELS[name].make()
    arrays = [t.numpy() for t in inputs]
    with torch.no_grad():
        ref = model(*inputs).numpy()
    baseline = baseline_rule(overrides or ("1x1:rcb=0",))
    plans = {"baseline": compiled(model, inputs, baseline).plan, "default": compiled(model, inputs, CURRENT).plan}
    per = compare_plans(plans, arrays, ref, rounds)
    a, b = per["baseline"], per["default"]
    shapes = {n.name: n.shape for n in plans["default"].graph.nodes}
    common = sorted(set(a) & set(b), key=lambda n: -a[n])
    print("  baseline  default  node")
    for n in common:
        if abs(a[n] - b[n]) > 0.01:
            print(f"  {a[n]:8.3f} {b[n]:8.3f}  {n} {shapes.get(n)}")
    print(f"  sum {sum(a[n] for n in common):.3f} {sum(b[n] for n in common):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10, *sys.argv[3:])
