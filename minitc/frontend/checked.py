"""The checked mode of a model's plan (MINITC_CHECK=1; always on in the tests, issue 55).

A plan made while MINITC_CHECK is set runs each kernel through a `CheckedKernel`, which before
every call checks that

- every pointer the call will pass is non-null and lies, for the kernel's bytes of that
  parameter, inside a live allocation (the plan's arena, a constant, an input, a torch result),
  and is the address of the value the graph says the parameter is;
- each value has the shape and dtype of the kernel's parameter;
- the output overlaps no value that a later step still reads (nor the call's own inputs);

and the arena gives each result GUARD_BYTES of guard words after it, written when the result is
and checked after every call while it lives: a kernel that writes past its output is named.
Each failure raises RuntimeCheckError naming the kernel, the node and the value. A plan made
without MINITC_CHECK has none of this: its steps call the kernels themselves.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from minitc.backends import function as host
from minitc.errors import RuntimeCheckError

GUARD_BYTES = 64
_GUARD = np.frombuffer(bytes([0xA5, 0x5A, 0xC3, 0x3C]) * (GUARD_BYTES // 4), np.uint8)


def enabled() -> bool:
    """Whether plans made now are checked: MINITC_CHECK set to anything but "" or "0"."""
    return os.environ.get("MINITC_CHECK", "0") not in ("", "0")


class Checker:
    """The checks of one plan; `start(values)` at the beginning of each run."""

    def __init__(self, plan):
        self.plan = plan
        nodes = plan.graph.nodes
        names = [v.name for v in plan.graph.inputs] + list(plan.graph.constants) + [n.name for n in nodes]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:  # the plan keys values and kernels by name: one would run on the other's buffers
            raise RuntimeCheckError(f"the graph names more than one value {', '.join(twice)}")
        self.step = {node.name: k for k, node in enumerate(nodes)}
        end = len(nodes)
        self.last_read = {v.name: -1 for v in plan.graph.inputs}
        self.last_read.update({name: -1 for name in plan.graph.constants})
        for k, node in enumerate(nodes):
            self.last_read.setdefault(node.name, k)
            for name in node.inputs:
                self.last_read[name] = k
        for name in plan.graph.outputs:
            self.last_read[name] = end
        self.values: dict = {}
        self.live: dict = {}  # values in the arena, made and still read: name -> (first byte, end)
        self.cursor = 0  # the graph steps before it are in `live` (or dead)
        self.guarded: dict = {}  # arena result name -> its guard words' view, while it lives

    def start(self, values: dict) -> None:
        self.values, self.live, self.cursor, self.guarded = values, {}, 0, {}

    def wrap_steps(self, steps: list) -> list:
        """The plan's steps with each kernel that shows its parameters (`.kernel`) checked."""
        return [
            (kind, node, CheckedKernel(what, node, self) if kind == "kernel" and hasattr(what, "kernel") else what)
            for kind, node, what in steps
        ]

    # -- before a call ------------------------------------------------------------------------

    def before(self, kernel, node, arrays: list, pointers: list) -> None:
        names = [*node.inputs, node.name]
        where = f"kernel {kernel.name} (node {node.name})"
        params = kernel.kernel.params
        if len(arrays) != len(params) or len(pointers) != len(params):
            raise RuntimeCheckError(f"{where}: {len(pointers)} pointer(s) for {len(params)} parameter(s)")
        for array, pointer, param, name in zip(arrays, pointers, params, names):
            self._check_value(where, node, name, array, param)
            self._check_pointer(where, name, array, pointer, param, arrays)
        self._check_overlap(where, node, pointers[-1], arrays[-1].nbytes)
        self._arm_guard(node)

    def _check_value(self, where, node, name, array, param) -> None:
        if not isinstance(array, np.ndarray):
            raise RuntimeCheckError(f"{where}: value {name} is not a numpy array ({type(array).__name__})")
        if tuple(array.shape) != tuple(param.shape) or array.dtype != np.dtype(param.dtype):
            raise RuntimeCheckError(
                f"{where}: value {name} is {array.dtype}{list(array.shape)}, the kernel's parameter "
                f"{param.name} is {param.dtype}{list(param.shape)} (a buffer that is not its own)"
            )
        if not array.flags.c_contiguous:
            raise RuntimeCheckError(f"{where}: value {name} is not C-contiguous")
        if name == node.name:
            own = self.plan._buffer(node) if name in self.plan.offsets else array
        else:
            own = self.values.get(name, array)
        if own is array or not isinstance(own, np.ndarray):
            return
        if (_address(own), own.nbytes) != (_address(array), array.nbytes):
            raise RuntimeCheckError(f"{where}: the buffer passed as value {name} is not that value's")

    def _check_pointer(self, where, name, array, pointer, param, arrays) -> None:
        """The pointer is the array's address (then it lies in the array's live memory), else
        an error that says whether it lies in any live allocation of this plan."""
        if not pointer:
            raise RuntimeCheckError(f"{where}: the pointer for value {name} (parameter {param.name}) is null")
        if pointer == _address(array):
            return
        size = array.nbytes
        inside = any(lo <= pointer and pointer + size <= hi for lo, hi in self._allocations(arrays))
        raise RuntimeCheckError(
            f"{where}: the pointer for value {name} (parameter {param.name}) is {pointer:#x}, but the value "
            f"lives at {_address(array):#x}; with its {size} bytes it lies "
            + ("inside another value's memory" if inside else "in no live allocation of this plan")
        )

    def _allocations(self, arrays: list) -> list:
        """[(first byte, end)] of the memory a kernel of this plan may touch now: the arena, the
        values of this run, and the call's own arrays (a graph output's fresh array)."""
        spans = []
        arena = self.plan._arena
        if arena is not None:
            spans.append((_address(arena), _address(arena) + arena.nbytes))
        for value in [*self.values.values(), arrays]:
            for array in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(array, np.ndarray):
                    base = _owner(array)
                    spans.append((_address(base), _address(base) + base.nbytes))
        return spans

    def _check_overlap(self, where, node, lo: int, size: int) -> None:
        """The output's bytes [lo, lo + size) against the values in the arena that are made and
        still read (the call's inputs included): the only ones the arena's plan can put there."""
        now = self.step[node.name]
        self._track_live(now)
        hi = lo + size
        for name, (start, end) in self.live.items():
            if name != node.name and start < hi and lo < end:
                raise RuntimeCheckError(
                    f"{where}: its output {node.name} overlaps value {name}, which step "
                    f"{self.last_read.get(name)} still reads (an arena that gave both the same bytes)"
                )

    def _track_live(self, now: int) -> None:
        """Bring `live` ({name: (first byte, end)} of the values in the arena that are made and
        still read) to step `now`: add what the steps since the last kernel made, drop the dead."""
        arena = self.plan._arena
        if arena is not None:
            base = _address(arena)
            for node in self.plan.graph.nodes[self.cursor : now]:
                value = self.values.get(node.name)
                at = _address(value) if isinstance(value, np.ndarray) else -1
                if base <= at < base + arena.nbytes:
                    self.live[node.name] = (at, at + value.nbytes)
        self.cursor = max(self.cursor, now)
        for name in [n for n in self.live if self.last_read.get(n, -1) < now]:
            del self.live[name]

    def _arm_guard(self, node) -> None:
        now = self.step[node.name]
        for name in [n for n in self.guarded if self.last_read.get(n, -1) < now]:
            # dead since the last kernel call: its last reader was a view or a torch node (no
            # `after` ran then), and this kernel may be given its bytes
            del self.guarded[name]
        offset = self.plan.offsets.get(node.name)
        if offset is None or self.plan._arena is None:
            return
        start = offset + self.plan._buffer(node).nbytes
        guard = self.plan._arena[start : start + GUARD_BYTES]
        guard[...] = _GUARD
        self.guarded[node.name] = guard

    # -- after a call -------------------------------------------------------------------------

    def after(self, kernel, node) -> None:
        now = self.step[node.name]
        for name, guard in list(self.guarded.items()):
            if not np.array_equal(guard, _GUARD):
                raise RuntimeCheckError(
                    f"kernel {kernel.name} (node {node.name}) wrote past the end of value {name}: "
                    f"the guard words after it in the arena changed"
                )
            if self.last_read.get(name, -1) <= now and name != node.name:
                del self.guarded[name]  # dead: its bytes (guard included) may be reused


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _owner(array: np.ndarray) -> np.ndarray:
    """The ndarray at the bottom of `array`'s chain of views (what owns its memory)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class CheckedKernel:
    """A model kernel whose every call is checked (Checker.before and .after); the plan calls it
    as it would the kernel itself (call, run_unchecked, bind)."""

    def __init__(self, kernel, node, checker: Checker):
        self.kernel_fn, self.node, self.checker = kernel, node, checker

    @property
    def kernel(self):
        return self.kernel_fn.kernel

    @property
    def name(self) -> str:
        return self.kernel_fn.name

    def _checked(self, arrays: list, pointers: list, call) -> None:
        self.checker.before(self.kernel_fn, self.node, arrays, pointers)
        call()
        self.checker.after(self.kernel_fn, self.node)

    def __call__(self, *args, out=None):
        if out is None:  # a graph output: a fresh array, checked like the others
            out = self.kernel_fn._new_output(self.kernel.outputs[0])
        arrays = [*args, out]
        result = []
        self._checked(arrays, host._addresses(arrays), lambda: result.append(self.kernel_fn(*args, out=out)))
        return result[0]

    def run_unchecked(self, arrays: list) -> None:
        self._checked(arrays, host._addresses(arrays), lambda: self.kernel_fn.run_unchecked(arrays))

    def bind(self, arrays: list):
        run = self.kernel_fn.bind(arrays)
        # the addresses the bound call passes, where it shows them (a BoundCall or a partial of them)
        pointers = list(run.args) if isinstance(run, (host.BoundCall, functools.partial)) else host._addresses(arrays)
        if not all(isinstance(p, int) for p in pointers):
            pointers = host._addresses(arrays)
        return functools.partial(self._checked, list(arrays), pointers, run)
