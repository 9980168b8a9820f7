"""Memory for the GPU simulator (sim.py): the lanes of a chunk of blocks, where each buffer's
elements live, bounds-checked flat indexing, and the race detector.

A buffer is one flat numpy array and every access turns into one flat *key* per active lane:
global buffers are the arrays themselves (key = flat index), shared buffers hold one copy per
block of the chunk (key = block * size + flat), local buffers one copy per lane
(key = lane * size + flat).
"""

from __future__ import annotations

import numpy as np

from minitc.errors import IRError, RaceError

NONE, MANY = -1, -2  # reader/writer slots: nobody yet, several threads (or blocks)


class Chunk:
    """The blocks [b0, b0 + nb) of a launch, simulated together with one lane per thread."""

    def __init__(self, name: str, grid: tuple, block: tuple, b0: int, nb: int, epoch: np.ndarray):
        self.name, self.grid, self.block = name, grid, block
        self.tpb = tpb = block[0] * block[1] * block[2]
        self.b0, self.nb, self.nl = b0, nb, nb * tpb
        self.all = np.arange(self.nl, dtype=np.int64)
        self.lblock = self.all // tpb  # block of each lane, within the chunk
        self.lane0 = b0 * tpb  # launch-wide id of the chunk's first lane
        t, g = self.all % tpb, self.lblock + b0
        (bx, by, _), (gx, gy, _) = block, grid
        self.tags = {
            "threadIdx.x": t % bx,
            "threadIdx.y": t // bx % by,
            "threadIdx.z": t // (bx * by),
            "blockIdx.x": g % gx,
            "blockIdx.y": g // gx % gy,
            "blockIdx.z": g // (gx * gy),
        }
        self.dims = dict(zip(("threadIdx.x", "threadIdx.y", "threadIdx.z"), block))
        self.dims.update(zip(("blockIdx.x", "blockIdx.y", "blockIdx.z"), grid))
        self.epoch = epoch  # barriers passed, per block of the launch (shared by every chunk)

    def thread(self, lane: int) -> str:
        """'thread (x, y, z) of block (x, y, z)' for a launch-wide lane id."""
        b, t = divmod(int(lane), self.tpb)
        bx, by, _ = self.block
        return f"thread ({t % bx}, {t // bx % by}, {t // (bx * by)}) of {self.block_name(b)}"

    def block_name(self, b: int) -> str:
        """'block (x, y, z)' for a launch-wide block id."""
        gx, gy, _ = self.grid
        return f"block ({b % gx}, {b // gx % gy}, {b // (gx * gy)})"


class LaneInfo:
    """Per active lane: chunk lane, launch-wide lane id, block id, chunk block, barrier epoch."""

    __slots__ = ("act", "lane", "block", "lblock", "epoch")

    def __init__(self, c: Chunk, act: np.ndarray):
        self.act, self.lblock = act, c.lblock[act]
        self.lane, self.block = act + c.lane0, self.lblock + c.b0
        self.epoch = c.epoch[self.block]


class Env:
    """Run-time state of one chunk: slots (loop variables: a scalar for serial loops, one value
    per chunk lane for bound loops; buffers: Mem), and the active lanes (None: all of them)."""

    __slots__ = ("slots", "chunk", "lanes", "n", "_info", "trackers")

    def __init__(self, nslots: int, chunk: Chunk, check_races: bool = True):
        self.slots, self.chunk = [None] * nslots, chunk
        self.lanes, self.n, self._info = None, chunk.nl, None
        self.trackers = {} if check_races else None  # shared Allocate -> Tracker, across its executions

    def active(self) -> np.ndarray:
        return self.chunk.all if self.lanes is None else self.lanes

    def narrow(self, mask) -> tuple:
        """Keep the active lanes where mask holds; returns what `restore` needs."""
        saved = (self.lanes, self.n)
        self.lanes = self.active()[mask]
        self.n, self._info = len(self.lanes), None
        return saved

    def restore(self, saved: tuple) -> None:
        (self.lanes, self.n), self._info = saved, None

    def info(self) -> LaneInfo:
        if self._info is None:  # cached until the lanes change or a barrier passes
            self._info = LaneInfo(self.chunk, self.active())
        return self._info


class Mem:
    """One buffer's storage for a chunk: `data` is flat, `tracker` the race detector or None."""

    __slots__ = ("buffer", "data", "tracker", "size")

    def __init__(self, buffer, data: np.ndarray, tracker=None):
        self.buffer, self.data, self.tracker, self.size = buffer, data, tracker, buffer.size

    def keys(self, env: Env, flat) -> np.ndarray:
        scope = self.buffer.scope
        if scope == "global":
            return flat if np.ndim(flat) else np.full(env.n, flat, np.int64)
        if scope == "shared":
            return env.info().lblock * self.size + flat
        return env.active() * self.size + flat


def compile_flat(buffer, fns: tuple, loops, name: str, what: str):
    """fn(env) -> the flat index (scalar or one per active lane), bounds-checked on the active
    lanes. `loops`: (name, slot, per_lane) of the loop variables in scope, for the message."""
    if len(fns) != len(buffer.shape):
        raise IRError(f"{what} {buffer.name} with {len(fns)} indices; the buffer has shape {buffer.shape}")
    strides, stride = [], 1
    for extent in reversed(buffer.shape):
        strides.insert(0, stride)
        stride *= extent
    dims = tuple(zip(fns, buffer.shape, strides))

    def fail(env):
        values = [np.broadcast_to(f(env), (env.n,)) for f in fns]
        bad = np.zeros(env.n, bool)
        for v, extent in zip(values, buffer.shape):
            bad |= (v < 0) | (v >= extent)
        p = int(np.argmax(bad))
        lane = int(env.active()[p])
        at = [f"{n}={env.slots[s][lane] if per_lane else env.slots[s]}" for n, s, per_lane in loops]
        text = ", ".join(str(int(v[p])) for v in values)
        raise IRError(
            f"kernel {name}: out-of-bounds {what} {buffer.name}[{text}]: shape is {buffer.shape} "
            f"({env.chunk.thread(lane + env.chunk.lane0)}{', at ' + ', '.join(at) if at else ''})"
        )

    def flat(env):
        total = 0
        for f, extent, stride in dims:
            i = f(env)
            if np.ndim(i) == 0:
                if not 0 <= i < extent:
                    fail(env)
            elif i.min() < 0 or i.max() >= extent:
                fail(env)
            total = total + i * stride
        return total

    return flat


class Tracker:
    """Who last touched each element: the writer lane and its epoch; the reader lane (or MANY),
    its block (or MANY: read by several blocks, so any write races) and its epoch. Two accesses
    of different threads conflict unless they are in the same block with a barrier between
    them (different epochs); the last writer and the readers since are all that can conflict,
    because any earlier access is ordered before them or was already reported."""

    def __init__(self, buffer, nkeys: int, tpb: int):
        self.buffer, self.tpb = buffer, tpb
        self.w_lane = np.full(nkeys, NONE, np.int64)
        self.w_epoch = np.zeros(nkeys, np.int64)
        self.r_lane = np.full(nkeys, NONE, np.int64)
        self.r_block = np.full(nkeys, NONE, np.int64)
        self.r_epoch = np.zeros(nkeys, np.int64)

    def read(self, env: Env, key: np.ndarray) -> None:
        s = env.info()
        w = self.w_lane[key]
        bad = (w >= 0) & (w != s.lane) & ((w // self.tpb != s.block) | (self.w_epoch[key] == s.epoch))
        if bad.any():
            p = int(np.argmax(bad))
            self._race(env, key[p], s.lane[p], "reads", int(w[p]), "wrote")
        old_block = self.r_block[key]
        same = old_block == s.block
        again = same & (self.r_epoch[key] == s.epoch) & (self.r_lane[key] != s.lane)
        lanes = np.where(again, MANY, s.lane)
        blocks = np.where(same | (old_block == NONE), s.block, MANY)
        for state, new in ((self.r_block, blocks), (self.r_lane, lanes)):
            state[key] = new  # several lanes on one key: one of them wins...
            lost = state[key] != new
            if lost.any():  # ...and the others make it MANY
                state[key[lost]] = MANY
        self.r_epoch[key] = s.epoch

    def write(self, env: Env, key: np.ndarray) -> None:
        s = env.info()
        old, old_epoch = self.w_lane[key], self.w_epoch[key]
        self.w_lane[key] = s.lane
        lost = self.w_lane[key] != s.lane
        if lost.any():
            p = int(np.argmax(lost))
            self._race(env, key[p], s.lane[p], "writes", int(self.w_lane[key[p]]), "writes", same_store=True)
        bad = (old >= 0) & (old != s.lane) & ((old // self.tpb != s.block) | (old_epoch == s.epoch))
        if bad.any():
            p = int(np.argmax(bad))
            self._race(env, key[p], s.lane[p], "writes", int(old[p]), "wrote")
        rb = self.r_block[key]
        bad = (rb == MANY) | (
            (rb >= 0) & ((rb != s.block) | ((self.r_epoch[key] == s.epoch) & (self.r_lane[key] != s.lane)))
        )
        if bad.any():
            p = int(np.argmax(bad))
            reader = int(self.r_lane[key[p]]) if rb[p] != MANY else MANY
            self._race(env, key[p], s.lane[p], "writes", reader, "read", cross=rb[p] != s.block[p])
        self.w_epoch[key] = s.epoch

    def _race(self, env: Env, key, lane, verb: str, other: int, other_verb: str, cross=None, same_store=False):
        c, b, lane, key = env.chunk, self.buffer, int(lane), int(key)
        several = "threads of several blocks" if self.r_block[key] == MANY else "several threads of another block"
        where = ""
        if b.scope == "shared":
            where = f" (in {c.block_name(c.b0 + key // b.size)})"
            key %= b.size
        index = ", ".join(str(int(i)) for i in np.unravel_index(key, b.shape))
        if cross is None:
            cross = other // self.tpb != lane // self.tpb
        if other >= 0:
            who = c.thread(other)
        else:
            who = several if cross else "several other threads of its block"
        if cross:
            why = "threads of different blocks are not ordered within a launch; split it into separate launches"
        else:
            why = "no barrier orders them; put a barrier between the two accesses"
        when = "in the same store" if same_store else "before it"
        raise RaceError(
            f"kernel {c.name}: race on {b.scope} buffer {b.name}[{index}]{where}: {c.thread(lane)} {verb} it and "
            f"{who} {other_verb} it {when}; {why}"
        )
