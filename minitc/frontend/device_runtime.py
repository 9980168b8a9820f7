"""Running a graph on the GPU: the plan of runtime.py with every buffer a torch tensor on the device.

    plan = DevicePlan(graph, kernels)            # weights uploaded once, one arena, static inputs
    outputs = plan.call(inputs)                  # torch tensors in (CUDA or CPU), CUDA tensors out

- The constants (weights, already packed by the graph passes) are uploaded once and stay.
- Every kernel result lives in one device arena planned by liveness (memory.py), the graph's
  outputs in buffers of their own; the inputs are copied into static input buffers.
- Kernels, views and fallback operators run in order on the caller's current stream: minitc's
  kernels take the torch tensors as they are (DLPack, no copy) and launch on torch's current
  stream; fallback operators are torch's own.
- On CUDA, the first call runs the steps as they are (modules load, temporaries are allocated);
  the second **captures them as a CUDA graph** and every call after that replays it: a call is
  then the input copies, one graph launch and the output copies, whatever the number of kernels.
  Fallback operators are captured too (torch allocates their results in the graph's pool).
- The outputs are copies: the next call overwrites the static buffers.

On the simulator (`cuda-sim`) the same plan runs on CPU tensors, without a graph.
"""

from __future__ import annotations

import contextlib

import numpy as np

from minitc.backends.cuda.runtime import ALIGNMENT
from minitc.backends.function import torch_dtype
from minitc.frontend.memory import nbytes, plan_arena
from minitc.frontend.runtime import Plan, _torch_args, check_inputs


def make_plan(graph, kernels: dict, target):
    """The plan that runs `graph` with `kernels` built for `target`: numpy buffers on a CPU
    (runtime.Plan), device tensors on a GPU, CPU tensors for the simulator's kernels."""
    from minitc.target import is_gpu, parse_target

    if not is_gpu(target):
        return Plan(graph, kernels)
    return DevicePlan(graph, kernels, device="cpu" if parse_target(target).kind == "cuda-sim" else "cuda")


class DevicePlan:
    """The steps of a graph on `device` ("cuda", or "cpu" for the simulator's kernels)."""

    def __init__(self, graph, kernels: dict, device: str = "cuda", capture: bool | None = None):
        import torch

        self.graph, self.device = graph, torch.device(device)
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.offsets, self.arena_bytes = plan_arena(graph)
        arena = torch.empty(max(1, self.arena_bytes), dtype=torch.uint8, device=self.device)
        values = {k: torch.from_numpy(np.asarray(v, order="C")).to(self.device) for k, v in graph.constants.items()}
        self._inputs = [self._empty(v) for v in graph.inputs]
        values.update({v.name: t for v, t in zip(graph.inputs, self._inputs)})
        self.steps = []
        for node in graph.nodes:
            if node.op in ("view", "torch"):
                self.steps.append((node.op, node, node.aten if node.op == "torch" else None))
                continue
            if node.name in self.offsets:
                start = self.offsets[node.name]
                view = arena[start : start + nbytes(node)].view(torch_dtype(node.dtype)).view(node.shape)
                values[node.name] = view
            else:  # a graph output: a buffer of its own
                values[node.name] = self._empty(node)
            self.steps.append(("kernel", node, kernels[node.name]))
        self._values, self._replay, self._captured, self._calls = values, None, None, 0

    def _empty(self, value):
        import torch

        return torch.empty(value.shape, dtype=torch_dtype(value.dtype), device=self.device)

    @property
    def replaying(self) -> bool:
        """Whether calls replay the captured CUDA graph (from the second call on, when capturing)."""
        return self._replay is not None

    def capture_again(self) -> None:
        """Capture the steps at the second call from now, even on the simulator's device (which
        otherwise runs them plainly: it has no CUDA graphs)."""
        self.capture, self._calls, self._replay, self._captured = True, 0, None, None

    @property
    def torch_nodes(self) -> set:
        return {node.name for kind, node, _ in self.steps if kind == "torch"}

    def check_inputs(self, inputs: list, shapes: bool = True) -> None:
        check_inputs(self.graph.inputs, inputs, shapes)

    def call(self, inputs: list) -> list:
        """The outputs (new tensors on the device) for `inputs` (torch tensors or numpy arrays,
        already checked)."""
        import torch

        with torch.inference_mode():
            self._load(inputs)
            if self._replay is None and self.capture and self._calls >= 1:
                self._replay, self._captured = self._capture()  # after one plain run: modules loaded
            if self._replay is not None:
                self._replay()
                values = self._captured
            else:
                values = self._execute(None)
            self._calls += 1
            return [values[o].clone() for o in self.graph.outputs]

    def _capture(self) -> tuple:
        """(replay, the values the captured steps write): the steps captured as a CUDA graph
        on the current stream's device. The fallback operators' results are allocated in the
        graph's pool, so the captured values stay valid across replays."""
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            values = self._execute(None)
        return graph.replay, values  # capturing runs nothing: the caller replays

    def run(self, arrays: list, times: dict | None = None) -> list:
        """Plan.run's contract (numpy in and out), for CompiledModel.benchmark: the steps run one
        by one; with `times`, the seconds of each go there by node name (CUDA events on a GPU)."""
        import torch

        with torch.inference_mode():
            self._load(arrays)
            values = self._execute(times)
            return [values[o].cpu().numpy() for o in self.graph.outputs]

    def _load(self, inputs: list) -> None:
        import torch

        for buffer, x in zip(self._inputs, inputs):
            if isinstance(x, np.ndarray):
                x = torch.from_numpy(np.asarray(x, order="C"))
            elif not isinstance(x, torch.Tensor):  # a CuPy array: shared through the CUDA array interface
                x = torch.as_tensor(x, device=self.device)
            buffer.copy_(x)

    def _execute(self, times: dict | None) -> dict:
        """Run the steps; returns every value by name (the static buffers, and what the views
        and fallback operators of this run made)."""
        values, clock = dict(self._values), _Clock(self.device, times)
        with _cupy_on_torch_stream(self.device):
            self._steps(values, clock)
        clock.finish()
        return values

    def _steps(self, values: dict, clock) -> None:
        for kind, node, what in self.steps:
            clock.start()
            if kind == "kernel":
                what(*[_aligned(values[i]) for i in node.inputs], out=values[node.name])
            elif kind == "view":
                values[node.name] = values[node.inputs[0]].contiguous().view(node.shape)
            else:
                target, args, kwargs = what
                values[node.name] = _contiguous(target(*_torch_args(args, values), **_torch_args(kwargs, values)))
            clock.stop(node.name)


def _cupy_on_torch_stream(device):
    """On a GPU, CuPy's current stream made torch's current one for the steps: the kernels then
    take their torch tensors through DLPack without a cross-stream wait (which a CUDA graph
    being captured would refuse) and launch where torch's fallback operators run."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    import cupy
    import torch

    return cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream)


def _contiguous(value):
    """A fallback operator's result with its tensors contiguous, for the kernels that read them."""
    if isinstance(value, (list, tuple)):
        return type(value)(_contiguous(v) for v in value)
    return value.contiguous() if hasattr(value, "contiguous") else value


def _aligned(tensor):
    """The tensor, or a copy where it starts off the 16-byte alignment the kernels' float4
    accesses assume (a slice that a fallback operator returned)."""
    return tensor.clone() if hasattr(tensor, "data_ptr") and tensor.data_ptr() % ALIGNMENT else tensor


class _Clock:
    """Seconds per step into `times` (nothing when it is None): CUDA events on a GPU, read once
    at the end so that the steps run back to back; the host clock elsewhere."""

    def __init__(self, device, times: dict | None):
        self.times, self.cuda = times, device.type == "cuda"
        self.marks: list = []

    def start(self) -> None:
        if self.times is not None:
            self.marks.append([self._now()])

    def stop(self, name: str) -> None:
        if self.times is not None:
            self.marks[-1] += [self._now(), name]

    def _now(self):
        if not self.cuda:
            import time

            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish(self) -> None:
        if self.times is None:
            return
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        for begin, end, name in self.marks:
            self.times[name] = begin.elapsed_time(end) / 1e3 if self.cuda else end - begin
