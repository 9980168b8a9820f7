"""A numpy simulator of the GPU: slow but exact, and it checks what a GPU would not.

`SimFunction(program)` runs a GpuProgram (minitc/lowering/gpu.py) launch by launch. All threads of
a launch run together, one numpy lane per thread (over chunks of whole blocks when there are
many), in lockstep through the loop nest, compiled once into closures (sim_exprs.py):

- serial loops (and `vthread`) have static extents, so every lane iterates together; a loop
  bound to a block or thread index sets its variable to each lane's index, and where it is
  shorter than the launch dimension it masks the lanes beyond it; an IfThenElse masks the lanes
  whose condition is false, and `select` evaluates each branch only on its own lanes;
- loads and stores are gathers and scatters on the active lanes; global buffers are the arrays,
  shared buffers have one copy per block, local buffers one per lane; temporaries and every
  allocation start filled with nan (floats) like the reference interpreter's;
- an out-of-bounds index on an active lane is an IRError; a barrier reached by only some
  threads of a block is a RaceError; and every access is checked for races (sim_memory.py):
  two threads touching one element, at least one writing, with no barrier between them (shared
  memory and threads of one block) or at all (threads of different blocks, global memory,
  within one launch), raise a RaceError that names the kernel, buffer, element and threads.

Threads that do not race give the same result in any interleaving, so lockstep order is exact.
"""

from __future__ import annotations

import numpy as np

from minitc.backends.cuda.sim_exprs import Context, compile_access, compile_expr
from minitc.backends.cuda.sim_memory import Chunk, Env, Mem, Tracker
from minitc.backends.function import HostCallable
from minitc.errors import IRError, RaceError
from minitc.interp import binding, fill_value, loop_extent
from minitc.ir import GPU_TAGS, Allocate, Barrier, For, IfThenElse, Prefetch, Seq, ShuffleXor, Store, walk_stmts
from minitc.lowering.allreduce import WARP

MAX_LANES = 1 << 17  # lanes simulated at once; bigger launches run in chunks of whole blocks
MAX_LOCAL_BYTES = 1 << 28  # per-lane (local) buffers of a chunk, all together


class SimFunction(HostCallable):
    """A GpuProgram as a callable, run by the simulator. Call it like a `tc.Function`:
    `f(*inputs)` returns new outputs (nan-filled before the run, so elements nobody writes show),
    `f(*inputs, out=...)` or `f(*inputs, *outputs)` writes in place; numpy arrays or contiguous
    CPU torch tensors. `check_races=False` skips the race detector (2-3x faster); bounds and
    barriers are always checked."""

    def __init__(self, program, check_races: bool = True):
        self.program = program
        self.kernel = program.kernel
        self.check_races = check_races
        self._launches = [_Launch(launch, program.buffers, check_races) for launch in program.launches]

    def _new_output(self, buf):
        return np.full(buf.shape, fill_value(buf.dtype), buf.dtype)

    def _run(self, arrays: list) -> None:
        self.run(arrays)

    def run(self, arrays: list) -> None:
        """Run every launch on checked, C-contiguous arrays (kernel params in order)."""
        temps = [np.full(b.shape, fill_value(b.dtype), b.dtype) for b in self.program.temporaries]
        flat = [a.reshape(-1) for a in list(arrays) + temps]
        with np.errstate(all="ignore"):
            for launch in self._launches:
                launch.run(flat)

    def __repr__(self):
        params = ", ".join(b.name for b in self.kernel.params)
        temps = "".join(f", temporary {b.name}" for b in self.program.temporaries)
        return f"<minitc.SimFunction {self.name}({params}): {len(self._launches)} launch(es){temps}>"


class _Launch:
    """One launch compiled to closures; `run(arrays)` simulates it on flat arrays, one per
    buffer of the program."""

    def __init__(self, launch, buffers: list, check_races: bool):
        self.launch = launch
        self.name, self.grid, self.block = launch.name, tuple(launch.grid), tuple(launch.block)
        self.ctx = ctx = Context(launch.name)
        for b in buffers:
            ctx.buffers[b] = ctx.new_slot(b.name)
        self.buffers = buffers
        self.check_races = check_races
        stmts = list(walk_stmts(launch.body))
        # only a buffer this launch writes can race; reads of the others need no tracking
        self.written = {s.buffer for s in stmts if isinstance(s, Store) and s.buffer.scope == "global"}
        self.local_bytes = sum(s.buffer.nbytes for s in stmts if isinstance(s, Allocate) and s.buffer.scope == "local")
        self.body = compile_stmt(launch.body, ctx)

    def run(self, arrays: list) -> None:
        tpb = self.block[0] * self.block[1] * self.block[2]
        nblocks = self.grid[0] * self.grid[1] * self.grid[2]
        per_block = tpb * max(1, self.local_bytes)
        chunk = max(1, min(nblocks, MAX_LANES // tpb, MAX_LOCAL_BYTES // per_block))
        mems = []
        for b, a in zip(self.buffers, arrays):
            tracker = Tracker(b, b.size, tpb) if self.check_races and b in self.written else None
            mems.append(Mem(b, a, tracker))
        epoch = np.zeros(nblocks, np.int64)
        for b0 in range(0, nblocks, chunk):
            blocks = Chunk(self.name, self.grid, self.block, b0, min(chunk, nblocks - b0), epoch)
            env = Env(len(self.ctx.slot_names), blocks, self.check_races)
            env.slots[: len(mems)] = mems
            self.body(env)


# ---------------------------------------------------------------------------------------------
# statements: compile_stmt(stmt, ctx) -> fn(env)


def compile_stmt(s, ctx: Context):
    compile_fn = STMT_COMPILERS.get(type(s))
    if compile_fn is None:
        raise IRError(f"the GPU simulator does not know the statement {type(s).__name__}")
    return compile_fn(s, ctx)


def _compile_for(s: For, ctx: Context):
    tag, extent = s.kind, loop_extent(s)
    bound = tag in GPU_TAGS and tag != "vthread"  # a vthread runs as a serial loop
    slot = ctx.new_slot(s.var.name)
    with binding(ctx.vars, s.var, (slot, bound)):
        body = compile_stmt(s.body, ctx)
    if bound:

        def run_bound(env):
            index = env.chunk.tags[tag]
            env.slots[slot] = index
            if extent >= env.chunk.dims[tag]:
                body(env)
                return
            _masked(env, (index if env.lanes is None else index[env.lanes]) < extent, body)

        return run_bound
    values = [np.int64(v) for v in range(extent)]

    def run_for(env):
        slots = env.slots
        for v in values:
            slots[slot] = v
            body(env)

    return run_for


def _masked(env: Env, mask, body) -> None:
    """Run body on the active lanes where mask holds (none: skip it)."""
    if mask.all():
        body(env)
    elif mask.any():
        saved = env.narrow(mask)
        try:
            body(env)
        finally:
            env.restore(saved)


def _compile_seq(s: Seq, ctx: Context):
    stmts = tuple(compile_stmt(c, ctx) for c in s.stmts)

    def run_seq(env):
        for stmt in stmts:
            stmt(env)

    return run_seq


def _compile_if(s: IfThenElse, ctx: Context):
    cond = compile_expr(s.cond, ctx)
    then = compile_stmt(s.then, ctx)
    orelse = compile_stmt(s.orelse, ctx) if s.orelse is not None else None

    def run_if(env):
        c = cond(env)
        if np.ndim(c) == 0:  # the same on every lane
            if c:
                then(env)
            elif orelse is not None:
                orelse(env)
            return
        _masked(env, c, then)
        if orelse is not None:
            _masked(env, ~c, orelse)

    return run_if


def _compile_allocate(s: Allocate, ctx: Context):
    b = s.buffer
    if b.scope == "global":
        raise IRError(
            f"kernel {ctx.name} allocates the global buffer {b.name} inside a launch; global temporaries "
            "belong at the root of the kernel, where plan_launches makes them program temporaries"
        )
    slot = ctx.new_slot(b.name)
    with binding(ctx.buffers, b, slot):
        body = compile_stmt(s.body, ctx)
    fill, dtype, shared = fill_value(b.dtype), np.dtype(b.dtype), b.scope == "shared"

    def run_allocate(env):
        c = env.chunk
        data = np.full((c.nb if shared else c.nl) * b.size, fill, dtype)
        tracker = None
        if shared and env.trackers is not None:
            # the same shared memory on every execution: a race may span two of them
            tracker = env.trackers.get(s)
            if tracker is None:
                tracker = env.trackers[s] = Tracker(b, c.nb * b.size, c.tpb)
        old = env.slots[slot]
        env.slots[slot] = Mem(b, data, tracker)
        body(env)
        env.slots[slot] = old

    return run_allocate


def _compile_store(s: Store, ctx: Context):
    value = compile_expr(s.value, ctx)
    slot, flat = compile_access(s.buffer, s.indices, ctx, "store to")

    def run_store(env):
        v = value(env)
        mem = env.slots[slot]
        key = mem.keys(env, flat(env))
        if mem.tracker is not None:
            mem.tracker.write(env, key)
        mem.data[key] = v

    return run_store


def _compile_barrier(s: Barrier, ctx: Context):
    name = ctx.name

    def run_barrier(env):
        c = env.chunk
        if env.lanes is None:
            c.epoch[c.b0 : c.b0 + c.nb] += 1
        else:
            counts = np.bincount(c.lblock[env.lanes], minlength=c.nb)
            partial = (counts > 0) & (counts < c.tpb)
            if partial.any():
                lb = int(np.argmax(partial))
                inside = env.lanes[c.lblock[env.lanes] == lb]
                missing = np.setdiff1d(np.arange(lb * c.tpb, (lb + 1) * c.tpb), inside)[0]
                raise RaceError(
                    f"kernel {name}: a barrier is reached by only some threads of a block: "
                    f"{c.thread(c.lane0 + inside[0])} waits at it, {c.thread(c.lane0 + missing)} never gets there; "
                    "a barrier must not sit under a condition that differs between the threads of a block"
                )
            c.epoch[c.b0 + np.flatnonzero(counts)] += 1
        env._info = None  # the lanes' epochs changed

    return run_barrier


SHUFFLE_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}  # nan-propagating, as on the GPU


def _compile_shuffle(s: ShuffleXor, ctx: Context):
    """`__shfl_xor_sync` with the mask of every thread of the warp: all of them must be active,
    and each reads the partner lane's value from before the step."""
    slot = ctx.buffer_slot(s.buffer, "shuffle of")
    fn, offset, name = SHUFFLE_COMBINE[s.combiner], s.offset, ctx.name

    def run_shuffle(env):
        c = env.chunk
        act = env.active()
        tid = act % c.tpb
        warps = -(-c.tpb // WARP)
        key = c.lblock[act] * warps + tid // WARP
        counts = np.bincount(key, minlength=c.nb * warps)
        expected = np.minimum(WARP, c.tpb - (np.arange(c.nb * warps) % warps) * WARP)
        partial = (counts > 0) & (counts < expected)
        partner = tid ^ offset
        if partial.any() or (partner >= c.tpb).any():
            lane = c.lane0 + int(act[np.argmax(partial[key] | (partner >= c.tpb))])
            raise RaceError(
                f"kernel {name}: a warp shuffle of {s.buffer.name} is reached by only some threads of a warp "
                f"({c.thread(lane)}), or reads a lane that does not exist; every thread of the warp must take part"
            )
        data = env.slots[slot].data  # local: one element per lane
        data[act] = fn(data[act], data[act - tid + partner])

    return run_shuffle


STMT_COMPILERS = {
    Prefetch: lambda s, ctx: lambda env: None,  # a CPU cache hint: nothing to simulate
    ShuffleXor: _compile_shuffle,
    Barrier: _compile_barrier,
    For: _compile_for,
    Seq: _compile_seq,
    IfThenElse: _compile_if,
    Allocate: _compile_allocate,
    Store: _compile_store,
}
