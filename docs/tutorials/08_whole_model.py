# %% [markdown]
# # 8. A whole model
#
# So far each kernel was one operator. A model is a graph of many: `tc.compile(model,
# inputs)` takes a PyTorch `nn.Module`, captures its graph with `torch.export`, rewrites the
# graph (folds batch norm into the convolution weights, fuses elementwise ops into the
# kernel that produces their input), compiles one minitc kernel per distinct operator and
# shape (a *task*), plans the memory of the intermediate results, and runs the model as a
# fixed list of steps. With `trials=N` it tunes the tasks first.
#
# This tutorial compiles a small residual CNN written in plain `torch.nn` (nothing is
# downloaded), reads its graph, tasks and memory plan, checks it against PyTorch, times it
# against PyTorch eager, tunes it, and saves and loads it. docs/models.md describes the
# front end (`minitc/frontend/`).

# %%
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

import minitc as tc
import minitc.frontend
from minitc.benchmarks.machine import host_cpu
from minitc.frontend.memory import lifetimes
from minitc.timing import BackgroundLoad, measure

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
OUT = Path(os.environ.get("MINITC_TUTORIAL_OUT", "tutorial-output"))
OUT.mkdir(parents=True, exist_ok=True)
DB = OUT / "08-records.db"  # this tutorial's records database, not the user's

CHANNELS, SIZE, BATCH = (8, 16, 1) if FAST else (32, 32, 8)
TRIALS = 0 if FAST else 32  # measurements spread over the model's tasks
CPU = "{cpu} ({llvm_cpu})".format(**host_cpu())
print(f"CPU: {CPU}; {tc.get_num_threads()} threads")

# %% [markdown]
# ## The model
#
# A stem convolution, two residual blocks (convolution, batch norm, ReLU, convolution,
# batch norm, add the block's input, ReLU), a global average pool and a linear classifier:
# the shape of a small ResNet. The batch-norm statistics are set to random values, as after
# training, so that folding them is not a no-op. `eval()`: batch norm uses its running
# statistics, which is what lets the compiler fold it into constants.


# %%
class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class SmallResNet(nn.Module):
    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(Residual(channels), Residual(channels))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


torch.manual_seed(0)
model = SmallResNet(CHANNELS).eval()
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.5, 0.5)
        m.running_var.uniform_(0.5, 2.0)
        m.weight.data.uniform_(0.5, 1.5)
        m.bias.data.uniform_(-0.5, 0.5)
x = torch.randn(BATCH, 3, SIZE, SIZE)
with torch.no_grad():
    expected = model(x)
print(f"input {list(x.shape)}, output {list(expected.shape)}")

# %% [markdown]
# ## Compiling it, and the graph it runs
#
# `print(compiled.graph)` shows the graph after the passes. Read it from the top:
#
# - the parameters became constants. Each batch norm was folded into the convolution before
#   it: new weights `w * scale` (`..._folded`) and a per-channel bias `b * scale + shift`
#   added after the convolution. The linear layer's weight is stored transposed
#   (`fc.weight_t`, [in, out]), which the dense template packs by plain copies;
# - each `fused[conv2d, add, relu]` is one kernel: the convolution's template applies the
#   bias and the ReLU to each tile of results while it is still in registers, so the
#   convolution's output is never written to memory and read back. The second convolution
#   of a block also takes the residual `add` of the block's input;
# - the average pool is a `mean` reduction, the classifier a `dense` with its bias fused.

# %%
compiled = tc.compile(model, (x,), db=DB)
print(compiled.graph)

# %% [markdown]
# ## Tasks
#
# Nodes with the same operator, attributes and input shapes compute the same function, so
# they share one kernel: a *task*. The two residual blocks have the same shapes, so each
# of their two convolutions is one task run by two nodes (`x2`). Tuning works per task, and
# a task's weight (how many nodes run it) tells the tuner how much its speed matters. Each
# task's kernel is built from its best record in the records database, else from the
# operator's template (`task.trace` is the schedule it was built from).

# %%
for number, task in enumerate(compiled.tasks):
    print(f"task {number}: {task}\n    nodes: {', '.join(task.nodes)}; {len(task.trace.steps)} schedule steps")

# %% [markdown]
# ## The memory plan
#
# The runtime is a static plan: one step per node, and one preallocated *arena* for all
# intermediate results. Each result lives from the step that writes it to the last step
# that reads it; results whose lifetimes do not overlap share bytes (largest first, at the
# lowest free offset aligned to 64 bytes). The model's output is not in the arena: it is
# handed to the caller. No plan can use less than the largest total of results alive at
# one step (the peak); the greedy placement may leave gaps above it. The plot shows each
# result as a box over the steps it lives and the bytes it takes.

# %%
plan = compiled.plan
sizes = {n.name: int(np.prod(n.shape)) * np.dtype(n.dtype).itemsize for n in compiled.graph.nodes}
spans = lifetimes(compiled.graph)
print(f"{'result':>10} {'offset':>9} {'bytes':>9}  steps")
for name, offset in sorted(plan.offsets.items(), key=lambda item: spans[item[0]]):
    print(f"{name:>10} {offset:9,} {sizes[name]:9,}  {spans[name][0]}-{spans[name][1]}")
unshared = sum(sizes[name] for name in plan.offsets)
steps = range(len(compiled.graph.nodes))
live = [sum(sizes[n] for n, (first, last) in spans.items() if first <= step <= last) for step in steps]
print(f"arena: {plan.arena_bytes:,} bytes; each result in its own buffer: {unshared:,} bytes")
peak_step = int(np.argmax(live))
print(f"peak of the results alive at one step: {max(live):,} bytes at step {peak_step} (no plan can use less)")

# %%
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(7, 3.5))
for n, (name, offset) in enumerate(plan.offsets.items()):
    first, last = spans[name]
    box = (first - 0.4, offset / 1024), last - first + 0.8, sizes[name] / 1024
    ax.add_patch(plt.Rectangle(*box, facecolor=f"C{n % 10}", edgecolor="black", alpha=0.6))
    ax.text(first - 0.3, (offset + sizes[name] / 2) / 1024, name, va="center", fontsize=8)
ax.set_xlim(-1, len(compiled.graph.nodes))
ax.set_ylim(0, plan.arena_bytes / 1024 * 1.05)
ax.set_xlabel("step (node of the graph)")
ax.set_ylabel("arena offset (KiB)")
ax.set_title(f"memory plan: {plan.arena_bytes / 1024:.0f} KiB instead of {unshared / 1024:.0f} KiB")
fig.tight_layout()
path = OUT / "08-memory-plan.png"
fig.savefig(path, dpi=120)
print("saved", path)

# %% [markdown]
# ## Running it and checking it against PyTorch
#
# The compiled model takes and returns torch tensors. Its result should match PyTorch's to
# float32 rounding: the folded batch norm and a different order of additions change the
# last bits, nothing more.

# %%
y = compiled(x)
np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
print(f"agrees with PyTorch eager: max difference {float((y - expected).abs().max()):.2e}")

# %% [markdown]
# ## Timing
#
# `compiled.benchmark()` runs the plan and reports the median time in all and per task
# (summed over the nodes that run it). Against PyTorch eager we time both the same way,
# interleaved (`minitc.timing.measure`). The figures depend on this CPU and on
# how busy the machine is; at these small shapes a call takes well under a millisecond, and
# fixed costs per operator (PyTorch's dispatch, minitc's per-step overhead) count. When
# another process keeps a core busy, a multi-threaded library's threads wait for each other
# for whole scheduler ticks (a 0.1 ms PyTorch call can take tens of milliseconds), so the
# cell also reports the load of other processes (`BackgroundLoad`).

# %%
report = compiled.benchmark()
print(f"minitc total: {report['total_ms']:.3f} ms")
for name, ms in report["tasks_ms"].items():
    print(f"  {ms:7.3f} ms  {name}")

with torch.no_grad(), BackgroundLoad() as load:
    timings = measure({"minitc": lambda: compiled(x), "torch eager": lambda: model(x)}, repeats=10, budget_s=0.5)
for name, t in timings.items():
    print(f"{name:>12}: {t.median * 1e3:.3f} ms")
print(f"minitc is {timings['torch eager'].median / timings['minitc'].median:.2f}x the speed of eager on {CPU}")
busy = load.cpus or 0.0
print(f"other processes kept {busy:.1f} CPUs busy meanwhile" + (": these timings are unreliable" if busy > 0.5 else ""))

# %%
fig, ax = plt.subplots(figsize=(7, 3))
number = {str(task): n for n, task in enumerate(compiled.tasks)}
labels = [f"task {number[name]}: {name.split()[0]} {name.split()[-1]}" for name in report["tasks_ms"]]
ax.barh(labels, list(report["tasks_ms"].values()))
ax.set_xlabel("ms per call (all nodes of the task)")
ax.set_title(f"where the time goes ({CPU}, {tc.get_num_threads()} threads)", fontsize=9)
ax.tick_params(axis="y", labelsize=7)
fig.tight_layout()
path = OUT / "08-time-per-task.png"
fig.savefig(path, dpi=120)
print("saved", path)

# %% [markdown]
# ## Tuning
#
# `tc.compile(model, inputs, trials=N)` tunes the tasks before building them, with the
# task scheduler: it spreads the N measurements over the tasks, each round giving the next
# ones to the task whose improvement would save the most time (its weight times its
# expected gain), with the default `tlm` strategy. Every measurement goes into the records
# database, so a later `tc.compile` of this model, or of another model that shares a task,
# builds from the best records without tuning again. Here the database is a file under OUT.

# %%
if TRIALS:
    with warnings.catch_warnings():  # the language model's hardware warning, if any: tutorial 6
        warnings.simplefilter("ignore")
        tuned = tc.compile(model, (x,), db=DB, trials=TRIALS)
    np.testing.assert_allclose(tuned(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    for task, result in zip(tuned.tasks, tuned.tune_results):
        print(f"  {result.trials:3} trials, best {result.best_ms * 1e3:8.1f} us  {task}")
    with torch.no_grad():
        timings = measure(
            {"templates": lambda: compiled(x), "tuned": lambda: tuned(x), "torch eager": lambda: model(x)},
            repeats=10,
            budget_s=0.5,
        )
    for name, t in timings.items():
        print(f"{name:>12}: {t.median * 1e3:.3f} ms")
    again = tc.compile(model, (x,), db=DB)  # no trials: each task's best record, or its template
    changed = [a.trace != b.trace for a, b in zip(again.tasks, compiled.tasks)]
    print(f"compiled again without tuning: {sum(changed)} of {len(changed)} tasks now run a tuned program")
    np.testing.assert_allclose(again(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
else:
    print("fast mode: tuning skipped (the full tutorial tunes with 32 trials)")

# %% [markdown]
# ## Saving and loading
#
# `compiled.save(path)` writes one zip file: the graph, each task's schedule trace and the
# constants. `minitc.frontend.load(path)` rebuilds the kernels from the traces, without the
# PyTorch model or the records database: what a deployment needs. A loaded model runs the
# shapes it was compiled for; other shapes need the PyTorch model to compile again.

# %%
path = OUT / "08-small-resnet.minitc"
compiled.save(path)
loaded = minitc.frontend.load(path)
np.testing.assert_allclose(loaded(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
print(f"saved {path} ({path.stat().st_size / 1024:.0f} KiB); the loaded model agrees with PyTorch")
try:
    loaded(torch.randn(BATCH + 1, 3, SIZE, SIZE))
except tc.ShapeError as e:
    print("ShapeError:", e)

# %% [markdown]
# ## Operators minitc does not compile
#
# A node minitc has no kernel for runs through PyTorch, and one warning lists them all;
# `fallback=False` raises an error instead. Here a softmax over the batch axis (minitc's
# softmax takes the last axis):

# %%
odd = nn.Sequential(nn.Linear(16, 8), nn.Softmax(dim=0)).eval()
v = torch.randn(4, 16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mixed = tc.compile(odd, (v,), db=DB)
print("warning:", caught[0].message if caught else "none")
with torch.no_grad():
    np.testing.assert_allclose(mixed(v).numpy(), odd(v).numpy(), rtol=1e-5, atol=1e-6)
print("the model with a PyTorch node agrees with PyTorch")
try:
    tc.compile(odd, (v,), db=DB, fallback=False)
except minitc.frontend.UnsupportedOpsError as e:
    print("UnsupportedOpsError:", e)

# %% [markdown]
# ## `torch.compile(model, backend="minitc")`
#
# minitc is also a `torch.compile` backend: `torch.compile(model, backend="minitc")` hands
# each graph that TorchDynamo captures to the same compiler (with the records database of
# `$MINITC_DB` or the user's). TorchDynamo passes the model's parameters and buffers to the
# backend as inputs of the graph. The backend tells them from the real inputs by where
# dynamo read them (a module's `_parameters` or `_buffers`), copies them, and compiles them
# as constants, as `tc.compile` does: the batch norms fold into their convolutions, the
# linear weight is transposed once, nothing runs through PyTorch and there is no warning.
# The graph it compiles has the same nodes and constants as `tc.compile`'s above.
#
# `"minitc"` is the registered name of `minitc.frontend.dynamo.backend`; `torch.compile`
# takes any function as a backend, so a wrapper around it can keep what it compiled, to
# look at.

# %%
from minitc.frontend import dynamo, unsupported  # noqa: E402

captured = []  # what the backend compiled: one entry per graph dynamo captured


def minitc_keeping_graphs(graph_module, example_inputs):
    captured.append(dynamo.backend(graph_module, example_inputs))
    return captured[-1]


dynamo_model = torch.compile(model, backend=minitc_keeping_graphs)
with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    np.testing.assert_allclose(dynamo_model(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
print("torch.compile(model, backend='minitc') agrees with PyTorch eager")
print("minitc's warnings:", [str(w.message) for w in caught if "minitc" in str(w.message)] or "none")
(graph,) = [g.compiled.graph for g in captured]
print(f"{len(captured)} graph; nodes run through PyTorch: {unsupported(graph) or 'none'}")
folded = [name for name in graph.constants if name.endswith(("_folded", "_t"))]
print(f"{len(graph.constants)} constants, among them {', '.join(folded)}")


def program(g):
    return [(n.op, tuple(b.op for b in n.body), n.value.shape) for n in g.nodes]


same = program(graph) == program(compiled.graph) and sorted(graph.constants) == sorted(compiled.graph.constants)
assert same
print(f"the same nodes and constants as tc.compile's graph: {same}")

# %% [markdown]
# Dynamo (torch 2.13) does not guard the weights: after one changes (in place under
# `no_grad`, `load_state_dict`, a new `nn.Parameter`) it calls the same compiled graph with
# the new tensors. The backend compares each weight with what it copied and compiles the graph
# again, with a warning, so the result follows the model. A change made in place through
# `.data` leaves no trace it can see (docs/models.md, "Changing a weight after compiling").

# %%
with torch.no_grad():
    model.fc.bias.add_(1.0)
    expected = model(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_allclose(dynamo_model(x).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
print("warning:", next((w.message for w in caught if "minitc" in str(w.message)), "none"))
print("after model.fc.bias.add_(1.0) the compiled model agrees with PyTorch again")
