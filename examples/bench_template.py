"""Time an operator template with tile sizes of your choice against its defaults, numpy and
torch, on a workload of the `cpu-core` suite, using the benchmark runner's timing (interleaved
repeats, idle threads quiesced between libraries, medians).

    python examples/bench_template.py conv-resnet                 # the template's defaults
    python examples/bench_template.py conv-resnet kb=4 ohb=3      # some parameters overridden
    python examples/bench_template.py matmul-1024 mr=4 nr=24 --threads 1

Parameter names are the template's keyword arguments (minitc/templates/*.py). For the whole
suite with its machine peaks and JSON records, use `python -m minitc.benchmarks`.
"""

import argparse

import numpy as np

import minitc as tc
from minitc.benchmarks.suites import select
from minitc.templates import template_schedule
from minitc.timing import measure, thread_limit, torch_module


def parse_value(text: str):
    flags = {"True": True, "False": False, "None": None}
    return int(text) if text.lstrip("-").isdigit() else flags.get(text, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", help="a cpu-core workload, e.g. matmul-512, conv-resnet, softmax-bert")
    ap.add_argument("params", nargs="*", help="template parameters as NAME=VALUE")
    ap.add_argument("--threads", type=int, default=tc.get_num_threads())
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()

    (w,) = select("cpu-core", [args.workload])
    params = {k: parse_value(v) for k, v in (p.split("=", 1) for p in args.params)}
    inputs = w.make_inputs(np.random.default_rng(0))
    numpy_fn = w.make_numpy()
    expected = numpy_fn(*inputs)
    chosen = tc.build(template_schedule(w.make_minitc(), "llvm", **params))
    default = tc.build(w.make_minitc(), db=False)
    for f in (chosen, default):
        np.testing.assert_allclose(f(*inputs), expected, rtol=w.rtol, atol=w.atol * np.abs(expected).max())
    fns = {"template (yours)": lambda: chosen(*inputs), "template (defaults)": lambda: default(*inputs)}
    fns["numpy"] = lambda: numpy_fn(*inputs)
    torch = torch_module()
    if torch is not None and w.make_torch is not None:
        torch_fn, tensors = w.make_torch(), [torch.from_numpy(a) for a in inputs]
        fns["torch"] = lambda: torch_fn(*tensors)
    with thread_limit(args.threads):
        timings = measure(fns, repeats=args.repeats)
    print(f"{w.description}, {args.threads} thread(s), parameters {params or 'default'}")
    for name, t in timings.items():
        rate = w.work / t.median / 1e9
        print(f"  {name:20s} {t.median * 1e3:8.3f} ms  {rate:7.1f} {w.unit}")


if __name__ == "__main__":
    main()
