"""`tc.compile(model, example_inputs)`: a PyTorch model in, a callable minitc program out.

    compiled = tc.compile(model, (x,))        # import, graph passes, one kernel per task
    y = compiled(x)                           # torch tensors in and out
    print(compiled.graph)                     # the graph it runs
    compiled.tasks                            # the distinct kernels and how often each runs
    compiled.benchmark()                      # median ms in all and per task
    tc.compile(model, (x,), trials=256)       # tune the tasks first (records database)

Import (minitc/frontend/importer.py) -> graph passes (passes.py) -> tasks: one kernel per
distinct (op, attributes, input shapes), built from the operator's template, or from the best
program of the records database asked for (`db=`, `tc.records`, or the one tuning wrote) where
that is faster inside the model -> a static plan (runtime.py; device_runtime.py on a GPU). ATen operators minitc
has no kernel for run through PyTorch; they are reported together, once, when the model is
compiled (`fallback=False` makes them an error instead).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

import numpy as np

from minitc.autotune.database import applied_records, default_path
from minitc.autotune.default_schedule import default_schedule
from minitc.autotune.task_scheduler import tune_tasks
from minitc.autotune.tuner import tuned_schedule
from minitc.driver import build
from minitc.errors import ConfigError, DTypeError, MinitcError, ScheduleError, ShapeError, warn_user
from minitc.frontend import passes, saved
from minitc.frontend.choice import choose_programs
from minitc.frontend.device_runtime import DevicePlan, make_plan
from minitc.frontend.dynamic import DynamicShapes, bucket_graph, extents_arrays, set_extents, share_constants
from minitc.frontend.dynamic_runtime import DynamicPlan
from minitc.frontend.fallback import EagerPlan, Fallback, error_text, is_internal, warn_fallbacks
from minitc.frontend.graph import Graph
from minitc.frontend.importer import ImportError_, export, fallback_reasons, import_model, unsupported
from minitc.frontend.kernels import NO_KERNEL, node_tensor
from minitc.frontend.lowp import OP as LOWP_OP
from minitc.frontend.lowp import check_dtype, lowp_kernels
from minitc.frontend.passes import LAYOUTS
from minitc.frontend.torch_ops import runs_in_torch, torch_node
from minitc.schedule import Schedule
from minitc.target import is_gpu, parse_target
from minitc.te import placeholder
from minitc.timing import measure


class UnsupportedOpsError(MinitcError):
    """The model has operators minitc cannot compile, and fallback to PyTorch was refused."""


@dataclass
class ModelTask:
    """One distinct kernel of the model: its output tensor, how many nodes run it, which, and
    the schedule's trace it is built with (the records database's best, else the template)."""

    key: tuple
    outputs: object
    nodes: list
    trace: object = None
    static: object = None  # dynamic shapes: the same tensor without limits, which tuning measures

    @property
    def tuned_outputs(self):
        """What tuning measures: the kernel of the bucket's largest sizes (DietCode's one space
        per bucket), which has the same workload key and schedule as the task."""
        return self.static if self.static is not None else self.outputs

    @property
    def weight(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        from minitc.autotune.workload_key import describe

        try:
            return f"{describe([self.outputs])} x{self.weight}"
        except MinitcError:  # a computation the workload key cannot describe (booleans): still named
            return f"{self.outputs.name} x{self.weight}"


def task_key(node, values) -> tuple:
    """Nodes with equal keys compute the same function of their inputs: one kernel serves all.
    A fused node's key lists its members (operator, attributes, which input or member each
    reads, shape): fused[add, relu] and fused[sub, sigmoid] of the same input are two kernels."""
    inputs = tuple((values[i].shape, values[i].dtype) for i in node.inputs)
    position = {name: ("input", k) for k, name in enumerate(node.inputs)}
    members = []
    for m, b in enumerate(node.body or [node]):
        members.append((b.op, _attrs_key(b), tuple(position.get(i, ("value", i)) for i in b.inputs), b.shape, b.dtype))
        position[b.name] = ("member", m)
    return (node.op, tuple(members), inputs)


def _attrs_key(node) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))


def weights_stay_cold(graph, target: str) -> bool:
    """Whether the graph's constants come from memory at every run: a CPU whose caches they
    do not fit. Each task's constant inputs are then placeholders marked
    `constant`, which tuning measures flushed from the caches (and keys apart from warm ones)."""
    if is_gpu(target):
        return False
    t = parse_target(target)
    caches = t.cache_bytes("l3") + max(1, t.num_cores) * t.cache_bytes("l2")
    return sum(a.nbytes for a in graph.constants.values()) > caches


def extract_tasks(graph, target: str = "llvm", fallbacks: list | None = None) -> list:
    """The distinct kernels of `graph`, in first-use order. With a `fallbacks` list, a node whose
    tensor expression fails to build (minitc's bug) runs through PyTorch instead (run_in_torch)."""
    values, tasks = graph.values(), {}
    cold = weights_stay_cold(graph, target)
    for node in list(graph.nodes):
        if node.op in NO_KERNEL or node.op == LOWP_OP:  # dense_lowp: lowp_kernels builds those
            continue
        key = task_key(node, values)
        if key not in tasks:
            inputs = [
                placeholder(values[i].shape, values[i].dtype, name=f"in{k}", constant=cold and i in graph.constants)
                for k, i in enumerate(node.inputs)
            ]
            try:
                task = ModelTask(key, node_tensor(node, inputs), [])
                if "limits" in node.attrs:
                    attrs = {k: v for k, v in node.attrs.items() if k != "limits"}
                    task.static = node_tensor(replace(node, inputs=node.inputs[:-1], attrs=attrs), inputs[:-1])
            except Exception as e:
                run_in_torch(graph, [node.name], e, fallbacks, f"node {node.name} ({_ops(node)})")
                continue
            tasks[key] = task
        tasks[key].nodes.append(node.name)
    return list(tasks.values())


def _ops(node) -> str:
    return f"fused[{', '.join(b.op for b in node.body)}]" if node.body else node.op


def run_in_torch(graph, names: list, error: Exception, fallbacks: list | None, where: str) -> None:
    """The nodes `names` of `graph` (changed in place) run through PyTorch (torch_ops.py) after
    `error` building their kernel, noted in `fallbacks`; with no list (fallback=False), or for
    a node PyTorch cannot run here (dynamic shapes' extents), `error` is raised."""
    nodes = {n.name: k for k, n in enumerate(graph.nodes)}
    if fallbacks is None or not all(runs_in_torch(graph.nodes[nodes[name]]) for name in names):
        raise error
    text = error_text(error)
    fallbacks.append(Fallback("build", where, text))
    for name in names:
        graph.nodes[nodes[name]] = torch_node(graph.nodes[nodes[name]], text)


def build_template_kernels(graph, tasks: list, target: str, fallbacks: list | None = None) -> tuple:
    """(tasks, {node name: kernel}): each task's template trace (template_trace_or_naive) built;
    with a `fallbacks` list, a task whose schedule or build fails runs through PyTorch and
    leaves the tasks."""
    built, kernels = [], {}
    for task in tasks:
        try:
            task.trace = template_trace_or_naive(task, target)
            fn = build(Schedule(task.outputs).replay(task.trace), target=target)
        except Exception as e:
            run_in_torch(graph, task.nodes, e, fallbacks, f"task {task}")
            continue
        built.append(task)
        kernels.update(dict.fromkeys(task.nodes, fn))
    return built, kernels


def model_tasks(model, example_inputs, target: str = "llvm", layout: str = "auto") -> list:
    """The tasks `tc.compile(model, example_inputs, target=target)` would build (the import, the
    graph passes and extract_tasks), without building them: for inspecting the kernels of a
    target this host cannot run."""
    graph = passes.run_all(import_model(model, [as_torch(x) for x in example_inputs]), target, layout)
    return extract_tasks(graph, target)


def build_kernels(tasks, target: str) -> dict:
    """{node name: compiled kernel}: each task's trace replayed and built once."""
    kernels = {}
    for task in tasks:
        fn = build(Schedule(task.outputs).replay(task.trace), target=target)
        kernels.update(dict.fromkeys(task.nodes, fn))
    return kernels


def _report_fallbacks(graph, fallback: bool) -> None:
    # the calls minitc failed on are CompilerFallbackWarning's (fallback.py), not listed here
    graph = replace(graph, nodes=[n for n in graph.nodes if not is_internal(n)])
    ops = unsupported(graph)
    if not ops:
        return
    reasons = fallback_reasons(graph)

    def why(op: str) -> str:
        said = [r for r in reasons.get(op, []) if r]
        return f" ({'; '.join(said)})" if said else ""

    listing = ", ".join(f"{op} x{n}{why(op)}" for op, n in sorted(ops.items()))
    if not fallback:
        raise UnsupportedOpsError(f"minitc has no kernel for {len(ops)} operator(s) of this model: {listing}")
    warn_user(f"minitc runs {sum(ops.values())} node(s) through PyTorch: {listing}")


def template_trace_or_naive(task, target: str):
    """The trace of the task's default schedule (its template, else the generic default:
    autotune/default_schedule.py); where the template refuses the task (an unusual but valid
    shape), its naive loop nest, with a warning naming the task and the reason: a model
    compiles slower, never not at all."""
    try:
        return default_schedule(task.outputs, target).trace
    except ScheduleError as e:
        warn_user(f"minitc: no template schedule for task {task}: {e}; it runs as the naive loop nest")
        s = Schedule(task.outputs)
        if is_gpu(target):  # one thread per output element, not one thread for all
            from minitc.templates.gpu import bind_unbound

            bind_unbound(s)
        return s.trace


class CompiledModel:
    """A model compiled for one set of input shapes; calling it with other shapes compiles the
    model again for those (with a warning saying so)."""

    def __init__(
        self,
        model,
        example_inputs,
        target="llvm",
        db=None,
        fallback=True,
        tuning=None,
        layout="auto",
        dynamic=None,
        dtype="float32",
    ):
        self.model, self.target, self.db, self.fallback, self.layout = model, target, db, fallback, layout
        self.dtype = dtype  # "bfloat16", "int8": dense layers through the low-precision GEMMs (lowp.py)
        self.dynamic = dynamic  # dynamic.DynamicShapes: one graph per bucket of sizes, compiled on first use
        self.tuning = tuning or {}  # tune_tasks options: trials, strategy, progress, scheduler, runner, space
        self.example_inputs = tuple(example_inputs)
        self.tune_results: list = []
        self.choices: list = []  # the template's program or the records' best, per contested task (choice.py)
        self._variants: dict = {}
        self.fallbacks: list = []  # fallback.Fallback: what minitc compiled around (its own errors)
        self._select(example_inputs, first=True)

    def _select(self, inputs, first=False):
        import torch

        if self.dynamic is not None:
            bucket = self.dynamic.bucket(self.dynamic.extents([tuple(t.shape) for t in inputs]))
            if bucket not in self._variants:
                self._variants[bucket] = self._compile(None, bucket)
            self.graph, self.tasks, self.plan = self._variants[bucket]
            self.plan.label = self.label
            return self.plan
        # numpy and CuPy arrays are inputs too (compiled as torch tensors of the same data)
        signature = tuple(tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor) or hasattr(t, "__array__"))
        if signature not in self._variants:
            if self.model is None:
                known = ", ".join(str([list(shape) for shape in k]) for k in self._variants)
                raise ShapeError(
                    f"this model was loaded from {self.source} and runs inputs of shapes {known} only, got "
                    f"{[list(shape) for shape in signature]}; compile the PyTorch model (tc.compile) for other shapes"
                )
            if not first:
                warn_user(f"minitc: new input shapes {list(signature)}: compiling the model again")
            self._variants[signature] = self._compile_or_fall_back([as_torch(t) for t in inputs])
        self.graph, self.tasks, self.plan = self._variants[signature]
        self.plan.label = self.label
        return self.plan

    @property
    def label(self) -> str:
        """What a fault's report calls this model (runtime.RunningNotes): its module's class."""
        return f"model {type(self.model).__name__}" if self.model is not None else f"the model of {self.source}"

    def _compile_or_fall_back(self, inputs):
        """_compile; where it raises minitc's own error on a valid model (not torch.export's, not
        the user's), the whole model runs through PyTorch, with one CompilerFallbackWarning."""
        try:
            return self._compile(inputs)
        except (ConfigError, DTypeError, UnsupportedOpsError, ImportError_):  # the user's options, inputs, model
            raise
        except Exception as e:
            if not self.fallback or is_gpu(self.target):
                raise
            failed = Fallback("compile", "the whole model", error_text(e))
            self.fallbacks.append(failed)
            warn_fallbacks([failed], self.label)
            return Graph(), [], EagerPlan(self.model)

    def _compile(self, inputs, bucket=None):
        """(graph, tasks, plan) for `inputs`' shapes, or with dynamic shapes for `bucket` (the
        largest size of each dynamic dimension): then the plan runs padded buffers."""
        fallbacks = [] if self.fallback else None  # minitc's own errors compiled around (fallback.py)
        if bucket is None:
            graph = import_model(self.model, inputs, fallbacks, strict=not self.fallback)
            graph = passes.run_all(graph, self.target, self.layout, fallbacks, self.dtype)
        else:
            if is_gpu(self.target):
                raise ConfigError("dynamic shapes are compiled for CPUs only; compile the GPU model per shape")
            graph, dims = bucket_graph(self.dynamic, bucket, self.target, self.layout)
            share_constants(graph, [g for g, _, _ in self._variants.values()])
            inputs = [np.zeros(v.shape, v.dtype) for v in graph.inputs]  # what tuned programs are chosen on
            set_extents(extents_arrays(graph), self.dynamic.slot_values(bucket))
        if bucket is None or not self._variants:  # a bucket has the first one's fallbacks
            _report_fallbacks(graph, self.fallback)
        tasks = extract_tasks(graph, self.target, fallbacks)
        tasks, kernels = build_template_kernels(graph, tasks, self.target, fallbacks)
        kernels.update(lowp_kernels(graph, self.target))
        if fallbacks:
            self.fallbacks.extend(fallbacks)
            warn_fallbacks(fallbacks, self.label)
        if self.tuning.get("trials") and tasks:
            # rounds small enough that the first round-robin pass reaches every task: a budget
            # spent before the last task is reached leaves it untuned
            batch = max(1, min(16, self.tuning["trials"] // len(tasks)))
            work = [(t.tuned_outputs, t.weight) for t in tasks]
            self.tune_results = tune_tasks(work, target=self.target, db=self.db, batch=batch, **self.tuning)
        # the records read: db=, a tc.records block's, or after tuning the database it wrote
        source = applied_records(self.db)
        if source is None and self.tuning.get("trials") and self.db is not False:
            source = default_path()
        contested = []  # copies of the tasks whose records hold another program, on that program
        for task in tasks:
            chosen = tuned_schedule([task.outputs], self.target, source) if source is not None else None
            if chosen is not None and chosen.trace.to_json() != task.trace.to_json():
                contested.append(replace(task, trace=chosen.trace))
        if contested:
            tuned_kernels = build_kernels(contested, self.target)
            plan = functools.partial(make_plan, target=self.target)
            kernels, self.choices = choose_programs(graph, tasks, kernels, tuned_kernels, _arrays(inputs), plan=plan)
            by_key = {task.key: task for task in tasks}
            for tuned in contested:
                if kernels[tuned.nodes[0]] is tuned_kernels[tuned.nodes[0]]:  # kept inside the model
                    by_key[tuned.key].trace = tuned.trace
        if bucket is not None:
            return graph, tasks, DynamicPlan(graph, kernels, dims, self.dynamic)
        return graph, tasks, make_plan(graph, kernels, self.target)

    @property
    def compiled_shapes(self) -> list:
        """The input shapes this model holds kernels for: with dynamic shapes, the largest of
        each bucket compiled so far (an input of any smaller size in the bucket runs them)."""
        return [[list(v.shape) for v in graph.inputs] for graph, _, _ in self._variants.values()]

    @classmethod
    def restored(cls, variants: dict, example_inputs, target, dynamic, source: str) -> CompiledModel:
        """A compiled model rebuilt from a saved file (compiler.load): {shapes or bucket: (graph,
        tasks, plan)}."""
        self = cls.__new__(cls)
        self.model, self.target, self.db, self.fallback, self.tuning = None, target, False, True, {}
        self.layout, self.dynamic, self.dtype = "auto", dynamic, "float32"
        self.example_inputs, self.tune_results, self.choices, self.source = tuple(example_inputs), [], [], source
        self.fallbacks = []  # compiled before it was saved: its fallbacks' nodes are torch nodes of the graph
        self._variants = variants
        self.graph, self.tasks, self.plan = next(iter(variants.values()))
        return self

    def compile_every_bucket(self) -> None:
        """With dynamic shapes, compile the buckets no call has used yet (before saving)."""
        import itertools

        sizes = [self.dynamic.bucket_sizes(s) for s in range(len(self.dynamic.symbols))]
        for bucket in itertools.product(*sizes):
            if bucket not in self._variants:
                self._variants[bucket] = self._compile(None, bucket)

    def save(self, path) -> None:
        """Write the graph, its constants and each task's trace to one file (minitc.frontend.saved)."""
        if isinstance(self.plan, EagerPlan):
            raise saved.SavedModelError(
                "this model runs through PyTorch as a whole (compiling it failed inside minitc: "
                "compiled.fallbacks says where), so it has no kernels to save"
            )
        if self.dtype != "float32":
            raise saved.SavedModelError(f"a model compiled with dtype={self.dtype!r} cannot be saved yet (issue 54)")
        saved.save(self, path)

    def benchmark(self, repeats: int = 20) -> dict:
        """Median milliseconds of the whole model on its example inputs (`total_ms`) and of
        each task's kernels per call, summed over the nodes that run them (`tasks_ms`, by
        task description), and of the nodes run through PyTorch (`torch_ms`)."""
        arrays = _arrays(self.example_inputs)
        plan = self._select(self.example_inputs)
        plan.run(arrays)  # the first call checks and binds the kernel calls
        totals, steps = [], []  # each call's seconds, in all and per node: medians of the same calls

        def call():
            steps.append({})
            start = time.perf_counter()
            plan.run(arrays, steps[-1])
            totals.append(time.perf_counter() - start)

        measure({"model": call}, repeats=repeats)  # warm-up, settling and quiet pools (minitc.timing)
        of_node = {n: str(t) for t in self.tasks for n in t.nodes}
        of_node.update({node.name: what.name for _, node, what in plan.steps if node.op == LOWP_OP})
        per_task: dict = {}
        for name in steps[0]:
            key = of_node.get(name, "torch" if name in plan.torch_nodes else "views")
            per_task.setdefault(key, []).append([s[name] for s in steps])
        summed = {k: 1e3 * float(np.median(np.sum(v, axis=0))) for k, v in per_task.items()}
        return {
            "total_ms": 1e3 * float(np.median(totals)),
            "tasks_ms": {k: v for k, v in summed.items() if k not in ("torch", "views")},
            "torch_ms": summed.get("torch", 0.0),
        }

    def __call__(self, *inputs):
        import torch

        if isinstance(self.plan, DevicePlan):  # tensors stay where they are: copied into the plan's buffers
            self.plan.check_inputs(inputs, shapes=False)
            plan = self._select(inputs)
            plan.check_inputs(inputs)
            outs = plan.call(list(inputs))
            return outs[0] if len(outs) == 1 else tuple(outs)
        arrays = _arrays(inputs)
        self.plan.check_inputs(arrays, shapes=False)  # another shape compiles again; another dtype is an error
        plan = self._select(inputs)
        plan.check_inputs(arrays)
        outs = [torch.from_numpy(a) for a in plan.run(arrays)]
        return outs[0] if len(outs) == 1 else tuple(outs)


def load(path) -> CompiledModel:
    """The compiled model saved in `path` (CompiledModel.save), its kernels built from the saved
    traces for the target it was compiled for. A damaged file raises SavedModelError."""
    target, inputs, dynamic, parts = saved.read(path)
    variants = {}
    for bucket, graph, traces, dims in parts:
        tasks = extract_tasks(graph, target)
        try:
            for task in tasks:
                task.trace = traces[tuple(task.nodes)]
        except KeyError as e:
            raise saved.SavedModelError(f"{path}: damaged saved model (no trace for the task of nodes {e})") from None
        kernels = build_kernels(tasks, target)
        plan = make_plan(graph, kernels, target) if bucket is None else DynamicPlan(graph, kernels, dims, dynamic)
        variants[bucket if bucket is not None else tuple(tuple(v.shape) for v in graph.inputs)] = (graph, tasks, plan)
    return CompiledModel.restored(variants, inputs, target, dynamic, source=str(path))


def as_torch(x):
    """A torch tensor of the input `x` (numpy arrays shared, CuPy arrays through the CUDA array
    interface), for torch.export."""
    import torch

    if isinstance(x, torch.Tensor) or not hasattr(x, "__array__"):
        return x
    return torch.as_tensor(x, device="cuda") if hasattr(x, "__cuda_array_interface__") else torch.from_numpy(x)


def _arrays(inputs) -> list:
    import torch

    return [t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in inputs]


def compile_model(
    model,
    example_inputs,
    target: str = "llvm",
    db=None,
    fallback: bool = True,
    trials: int = 0,
    strategy: str = "tlm",
    progress=None,
    layout: str = "auto",
    dynamic_shapes=None,
    scheduler="gradient",
    runner=None,
    space=None,
    dtype: str = "float32",
) -> CompiledModel:
    """Compile the `torch.nn.Module` `model` for inputs like `example_inputs` (a tuple of
    tensors, or one tensor). `target`: a CPU target (`llvm`, `llvm -mcpu=...`), `cuda` (an NVIDIA
    GPU: weights on the device, one arena, the calls replayed as a CUDA graph;
    minitc/frontend/device_runtime.py) or `cuda-sim` (the same plan with the simulator's kernels).
    `db`: the records database whose best programs are candidates (each kept only where it is
    faster inside the model than the template's: choice.py) and where tuning writes. Without
    `db`, the templates, unless inside a `tc.records(...)` block or after tuning (which writes
    to the user's database, default_path). `trials`: measurements spread over the model's tasks
    by `scheduler` (a name of minitc.autotune.task_scheduler.TASK_SCHEDULERS, by default
    "gradient": by expected gain, or a TaskScheduler), with `strategy`, measured by `runner` (a
    Runner or a registered runner's name: `tc.RayRunner(address)` measures on a Ray cluster),
    in the design space `space` (tc.tune's: "template", "generic", a SpaceGenerator...);
    `progress(task index, session)` after each round. `fallback=False` raises
    UnsupportedOpsError, listing every operator minitc cannot compile, instead of running them
    through PyTorch. `layout`: "auto" keeps a CNN's activations in channel blocks where the
    target's vectors fill them (NCHW[c], minitc/frontend/layout.py), "nchw" keeps PyTorch's
    layout. `dynamic_shapes`: torch.export's
    argument (`{"input_ids": {1: torch.export.Dim("seq", max=512)}}`): one compile serves every
    size in the Dims' ranges, one specialisation per bucket of sizes used (dynamic.py).
    `dtype`: "float32" (the default), "bfloat16" (weights cast once, dense layers on the bf16
    GEMM with float32 accumulation) or "int8" (weights quantized per output channel,
    activations per tensor at run time, like ONNX Runtime's quantize_dynamic); softmax, layer
    norm and residuals stay float32 (minitc/frontend/lowp.py, docs/low-precision.md)."""
    dtype = check_dtype(dtype, target)
    if dtype != "float32" and dynamic_shapes is not None:
        raise ConfigError(f"dtype={dtype!r} does not combine with dynamic_shapes yet (issue 54)")
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    tuning = None
    if trials:
        tuning = dict(
            trials=trials, strategy=strategy, progress=progress, scheduler=scheduler, runner=runner, space=space
        )
    dynamic = None
    if dynamic_shapes is not None:
        dynamic = DynamicShapes.of_program(export(model, tuple(example_inputs), dynamic_shapes))
    return CompiledModel(model, tuple(example_inputs), target, db, fallback, tuning, layout, dynamic, dtype)
