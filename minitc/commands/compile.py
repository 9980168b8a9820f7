"""`minitc compile MODEL`: compile (and with --trials, tune) a whole PyTorch model, check it
against PyTorch eager, and time both side by side.

MODEL is a name of the benchmark suite's models (minitc.benchmarks.models_zoo) or
`path/to/file.py:factory`, a function returning `(model, example_inputs)`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from pathlib import Path

import click

import minitc as tc
from minitc.autotune.database import default_path
from minitc.autotune.registry import strategy_names
from minitc.commands import checks
from minitc.errors import MinitcError


def zoo() -> dict:
    """{name: factory} of the benchmark suite's models, or {} where that module is absent."""
    try:
        from minitc.benchmarks import models_zoo
    except ImportError:
        return {}
    return dict(getattr(models_zoo, "MODELS", {}))


def load_model(spec: str):
    """(model, example inputs, name) for a zoo name or `file.py:factory`."""
    models = zoo()
    if spec in models:
        model, inputs = models[spec]()
        return model, tuple(inputs), spec
    path, sep, attr = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        names = ", ".join(sorted(models)) or "none installed"
        raise MinitcError(f"unknown model {spec!r}: give a model name ({names}) or path/to/file.py:factory")
    if not Path(path).is_file():
        raise MinitcError(f"{path}: no such file (MODEL is path/to/file.py:factory)")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not callable(getattr(module, attr, None)):
        raise MinitcError(f"{path} has no function {attr!r}")
    made = getattr(module, attr)()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise MinitcError(f"{spec} must return (model, example_inputs), got {type(made).__name__}")
    model, inputs = made
    return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,), attr


class ModelProgress:
    """One line per tuning round: the task, its best, and the model's estimated latency (the
    sum over tasks of weight x best)."""

    def __init__(self, tasks):
        self.tasks, self.best = tasks, {}
        self.start = time.perf_counter()

    def __call__(self, i: int, session) -> None:
        if math.isfinite(session.best):
            self.best[i] = session.best
        estimate = sum(self.tasks[k].weight * ms for k, ms in self.best.items())
        known = f"{len(self.best)}/{len(self.tasks)} tasks"
        click.echo(
            f"[{time.perf_counter() - self.start:5.0f} s] task {i + 1:>2} {str(self.tasks[i])[:60]:<60} "
            f"best {self.best.get(i, math.nan):.4g} ms | model estimate {estimate:.4g} ms ({known})",
            err=True,
        )


@click.command(name="compile")
@click.argument("model_spec", metavar="MODEL")
@click.option("--trials", default=0, show_default=True, type=click.IntRange(min=0), help="Tuning budget for the model.")
@click.option("--strategy", default="tlm", show_default=True, help="Search strategy for tuning.")
@click.option(
    "--target",
    default="llvm",
    show_default=True,
    help="'llvm' (this CPU), 'llvm -mcpu=haswell', 'cuda' (this GPU: model and inputs move there) or 'cuda-sim'.",
)
@click.option(
    "--db", type=click.Path(dir_okay=False), help="Records database (default: the user's, ~/.cache/minitc/records.db)."
)
@click.option("--threads", type=click.IntRange(min=1), help="Threads for minitc and torch (default: all CPUs).")
@click.option("--graph", "show_graph", is_flag=True, help="Print the graph after the passes.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results here.")
@click.option(
    "--dynamic",
    "dynamic",
    multiple=True,
    metavar="NAME=LO..HI[@DIM]",
    help="A dynamic size: dimension DIM (default 1, the sequence) of every input ranges over LO..HI. "
    "One compile serves the range; checked and timed at LO, HI and sizes between.",
)
def compile_cmd(model_spec, trials, strategy, target, db, threads, show_graph, json_path, dynamic):
    """Compile a PyTorch MODEL with minitc (tuning it with --trials), check it against PyTorch
    eager and time both, side by side.

    \b
    Examples:
      minitc compile resnet50
      minitc compile bert-base --trials 512
      minitc compile my_models.py:make_mlp --graph
      minitc compile bert-base --dynamic seq=16..512
    """
    import torch

    from minitc.frontend import unsupported
    from minitc.timing import measure, thread_limit

    if strategy not in strategy_names():
        raise click.BadParameter(f"choose one of {', '.join(strategy_names())}", param_hint="--strategy")
    checks.check_output(json_path, "--json")
    model, inputs, name = load_model(model_spec)
    on_gpu = tc.target.target_kind(target) == "cuda"  # not the simulator, which runs on CPU tensors
    if on_gpu:  # eager and minitc both on the GPU, in float32 without TF32
        if not torch.cuda.is_available():
            raise click.BadParameter("torch sees no CUDA GPU here; 'cuda-sim' simulates one", param_hint="--target")
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
    threads = threads or tc.get_num_threads()
    db = str(db or default_path())  # the command line's default database, said so below
    click.echo(f"tuning records: {db} (each task keeps a record's program only where it is faster in the model)")
    sizes = dynamic_sizes(dynamic, inputs)
    with thread_limit(threads), torch.no_grad():
        start = time.perf_counter()
        shapes = dynamic_shapes(model, inputs, sizes) if sizes else None
        tuning = {"trials": trials, "strategy": strategy} if sizes and trials else {}  # the example's bucket
        compiled = tc.compile(model, inputs, target=target, db=db, dynamic_shapes=shapes, **tuning)
        compile_s = time.perf_counter() - start
        if sizes:
            return _check_dynamic(model, compiled, inputs, sizes, name, compile_s, json_path)
        _summary(compiled, name, compile_s, unsupported(compiled.graph))
        tune_s = 0.0
        if trials:
            start = time.perf_counter()
            progress = ModelProgress(compiled.tasks)
            compiled = tc.compile(
                model, inputs, target=target, db=db, trials=trials, strategy=strategy, progress=progress
            )
            tune_s = time.perf_counter() - start
            kept = sum(c.kept == "tuned" for c in compiled.choices)
            click.echo(
                f"tuned programs kept in the model: {kept} of {len(compiled.choices)} tasks whose records differ "
                "from the template (the rest were not faster inside the model)"
            )
        if show_graph:
            click.echo(str(compiled.graph))
        expected = model(*inputs).cpu()
        got = compiled(*inputs).cpu()
        error = float((got - expected).abs().max())
        scale = float(expected.abs().max()) or 1.0
        sync = torch.cuda.synchronize if on_gpu else (lambda: None)  # time the GPU's work
        fns = {"minitc": lambda: (compiled(*inputs), sync()), "torch eager": lambda: (model(*inputs), sync())}
        timings = measure(fns, repeats=10)
    ms = {k: 1e3 * v.median for k, v in timings.items()}
    click.echo(f"max abs error against torch eager: {error:.3g} (relative to the largest output {error / scale:.3g})")
    click.echo(
        f"minitc {ms['minitc']:.3f} ms, torch eager {ms['torch eager']:.3f} ms at {threads} threads: "
        f"minitc is {ms['torch eager'] / ms['minitc']:.2f}x as fast"
    )
    if json_path:
        record = {"model": name, "threads": threads, "target": target, "trials": trials, "strategy": strategy,
                  "compile_s": compile_s, "tune_s": tune_s, "ms": ms, "max_abs_error": error,
                  "tasks": len(compiled.tasks), "torch_nodes": unsupported(compiled.graph),
                  "tuned_kept": [c.task for c in compiled.choices if c.kept == "tuned"]}  # fmt: skip
        Path(json_path).write_text(json.dumps(record, indent=1))


def dynamic_sizes(specs, inputs) -> list:
    """[(name, lo, hi, dim)] of the --dynamic options, checked against the example inputs."""
    out = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        span, _, dim = rest.partition("@")
        lo, _, hi = span.partition("..")
        try:
            lo, hi, dim = int(lo), int(hi), int(dim or 1)
        except ValueError:
            raise click.BadParameter(
                f"{spec!r}: write NAME=LO..HI or NAME=LO..HI@DIM", param_hint="--dynamic"
            ) from None
        if not name.isidentifier() or not 1 <= lo <= hi:
            raise click.BadParameter(f"{spec!r}: a name and 1 <= LO <= HI", param_hint="--dynamic")
        if not any(x.dim() > dim for x in inputs):
            raise click.BadParameter(f"{spec!r}: no input has a dimension {dim}", param_hint="--dynamic")
        out.append((name, lo, hi, dim))
    return out


def dynamic_shapes(model, inputs, sizes) -> tuple:
    """torch.export's dynamic_shapes: each size's Dim on its dimension of every input that has it
    (nested once more for a forward that takes *inputs)."""
    import inspect

    import torch

    dims = [(torch.export.Dim(name, min=lo, max=hi), dim) for name, lo, hi, dim in sizes]
    per_input = tuple({d: dim_ for dim_, d in dims if x.dim() > d} or None for x in inputs)
    params = list(inspect.signature(model.forward).parameters.values())
    return (per_input,) if len(params) == 1 and params[0].kind == params[0].VAR_POSITIONAL else per_input


def _resized(inputs, sizes, n: int) -> tuple:
    """The example inputs with every dynamic dimension n long (the example repeated along it)."""
    out = []
    for x in inputs:
        for _, _, _, dim in sizes:
            if x.dim() > dim:
                x = _tile(x, dim, n)
        out.append(x)
    return tuple(out)


def _tile(x, dim: int, n: int):
    import torch

    return torch.cat([x] * (-(-n // x.shape[dim])), dim=dim).narrow(dim, 0, n).contiguous()


def _check_dynamic(model, compiled, inputs, sizes, name, compile_s, json_path) -> None:
    """Check against eager and time at the range's ends and sizes between (the compiles of the
    buckets they fall in included in the first call)."""
    from minitc.timing import measure

    _, lo, hi, _ = sizes[0]
    points = sorted({lo, (lo + hi) // 3, (2 * lo + 2 * hi) // 3, hi})
    click.echo(f"{name}: compiled in {compile_s:.1f} s for {', '.join(f'{s[0]}={s[1]}..{s[2]}' for s in sizes)}")
    rows = []
    for n in points:
        args = _resized(inputs, sizes, n)
        expected, got = model(*args), compiled(*args)
        error = float((got - expected).abs().max()) / (float(expected.abs().max()) or 1.0)
        timings = measure({"minitc": lambda: compiled(*args), "eager": lambda: model(*args)}, repeats=5)
        ms = {k: 1e3 * v.median for k, v in timings.items()}
        rows.append({"size": n, "relative_error": error, "ms": ms})
        click.echo(
            f"  size {n:>5}: error {error:.2g} of the largest output, minitc {ms['minitc']:.3f} ms, "
            f"eager {ms['eager']:.3f} ms ({ms['eager'] / ms['minitc']:.2f}x)"
        )
    click.echo(f"buckets compiled: {[shape[0] for shape in compiled.compiled_shapes]}")
    if json_path:
        record = {"model": name, "dynamic": sizes, "compile_s": compile_s, "rows": rows}
        Path(json_path).write_text(json.dumps({**record, "tuned_tasks": len(compiled.tune_results)}))


def _summary(compiled, name: str, seconds: float, fallbacks: dict) -> None:
    counts = compiled.graph.op_counts()
    kernels = sum(n for op, n in counts.items() if op not in ("view",) and not op.startswith("torch"))
    line = f"{name}: {len(compiled.graph.nodes)} nodes, {kernels} kernels of {len(compiled.tasks)} distinct tasks"
    if fallbacks:
        line += f", {sum(fallbacks.values())} through PyTorch ({', '.join(sorted(fallbacks))})"
    click.echo(f"{line}; compiled in {seconds:.1f} s")
