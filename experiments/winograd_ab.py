"""Same-process A/B of a CNN compiled with its 3x3 stride-1 convolutions as Winograd F(2x2, 3x3)
(conv2d_winograd_nchwc, the default) and as the direct conv2d_nchwc template. Alternating
rounds of whole-model calls; then each convolution's time inside the model (Plan.run's per-node
times, medians), matched by node name.

    python experiments/winograd_ab.py resnet50 [ROUNDS]
"""

import sys

import torch
from plan_ab import compare_plans

import minitc as tc
from minitc.benchmarks.models_zoo import MODELS
from minitc.frontend import layout


def compiled(model, inputs, winograd: bool):
    keep = layout.winograd_pays
    if not winograd:
        layout.winograd_pays = lambda *a, **k: False
    try:
        return tc.compile(model, inputs)
    finally:
        layout.winograd_pays = keep


def main(name: str, rounds: int = 10) -> None:
    torch.set_num_threads(2)
    model, inputs = MODELS[name].make()
    arrays = [t.numpy() for t in inputs]
    with torch.no_grad():
        ref = model(*inputs).numpy()
    plans = {"winograd": compiled(model, inputs, True).plan, "direct": compiled(model, inputs, False).plan}
    per = compare_plans(plans, arrays, ref, rounds)
    wino_nodes = {
        n.name: n for n in plans["winograd"].graph.nodes if "conv2d_winograd_nchwc" in [b.op for b in (n.body or [n])]
    }
    print("  winograd  direct  node")
    for n in wino_nodes:
        if n in per["direct"]:
            print(f"  {per['winograd'][n]:8.3f} {per['direct'][n]:7.3f}  {n} {wino_nodes[n].shape}")
    wino_sum = sum(per["winograd"][n] for n in wino_nodes)
    print(f"  sum {wino_sum:.3f} {sum(per['direct'].get(n, 0) for n in wino_nodes):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
