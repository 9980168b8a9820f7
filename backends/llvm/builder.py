"""A tiny LLVM IR text builder: typed values, basic blocks and functions.

Codegen writes IR as text (not through llvmlite.ir) so that every flag, attribute and
metadata node is visible in one place and rendering needs no LLVM at all.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from minitc import dtypes
from minitc.errors import BuildError

# uint8 is LLVM's i8 too: signedness lives in the instructions (zext, uitofp, icmp ult, udiv)
SCALAR_TYPES = {
    "float32": "float",
    "float64": "double",
    "bfloat16": "bfloat",
    "float16": "half",
    "int32": "i32",
    "int64": "i64",
    "int8": "i8",
    "uint8": "i8",
    "bool": "i1",
    "ptr": "ptr",
}
MANGLE = {
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "float16": "f16",
    "int32": "i32",
    "int64": "i64",
    "int8": "i8",
    "uint8": "i8",
    "bool": "i1",
}


def scalar_type(dtype: str) -> str:
    try:
        return SCALAR_TYPES[dtype]
    except KeyError:
        raise BuildError(f"the LLVM backend does not support dtype {dtype!r}") from None


def vec_type(dtype: str, lanes: int) -> str:
    """`float` for lanes == 0, `<8 x float>` otherwise."""
    t = scalar_type(dtype)
    return f"<{lanes} x {t}>" if lanes else t


def mangle(dtype: str, lanes: int) -> str:
    """Overload suffix of an intrinsic: f32, v8f32, i64 ..."""
    return f"v{lanes}{MANGLE[dtype]}" if lanes else MANGLE[dtype]


def elem_bytes(dtype: str) -> int:
    return max(1, dtypes.bits(dtype) // 8)


HALF_PREFIX = {"float16": "0xH", "bfloat16": "0xR"}  # LLVM's hex literals of half and bfloat


def format_const(value, dtype: str) -> str:
    """An exact LLVM literal. Floats are printed as the hex of their double value (the only
    exact form LLVM accepts for float too), so inf, -inf and nan survive."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtypes.is_int(dtype):
        v = int(value)
        lo, hi = -(1 << (dtypes.bits(dtype) - 1)), (1 << (dtypes.bits(dtype) - 1)) - 1
        if not lo <= v <= hi:
            v = (v - lo) % (1 << dtypes.bits(dtype)) + lo  # wrap like numpy (uint8 200 is i8 -56)
        return str(v)
    if dtype in HALF_PREFIX:  # 16-bit floats: their own bits, rounded to nearest even
        bits16 = np.asarray(value, dtype=dtype).view(np.uint16)
        return "%s%04X" % (HALF_PREFIX[dtype], int(bits16))
    v = float(value)
    if dtype == "float32" and math.isfinite(v):
        try:
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        except OverflowError:
            v = math.copysign(math.inf, v)
    if math.isnan(v):
        return "0x7FF8000000000000"
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", v))[0]


@dataclass(frozen=True)
class Value:
    """An SSA value or literal: `ref` is what appears in an instruction (`%t3`, `0x...`,
    `<i64 0, i64 1>`), `lanes` is 0 for scalars."""

    ref: str
    dtype: str
    lanes: int = 0

    @property
    def ty(self) -> str:
        return vec_type(self.dtype, self.lanes)

    @property
    def typed(self) -> str:
        return f"{self.ty} {self.ref}"

    @property
    def is_const(self) -> bool:
        return not self.ref.startswith("%")


def const(value, dtype: str) -> Value:
    return Value(format_const(value, dtype), dtype)


def splat_const(v: Value, lanes: int) -> Value:
    """A constant vector with every lane equal to the scalar constant `v`."""
    return Value(f"splat ({scalar_type(v.dtype)} {v.ref})", v.dtype, lanes)


def lane_ids(lanes: int) -> Value:
    """The vector <0, 1, ..., lanes-1> of i64: the lane variable of a vectorized loop."""
    return Value("<" + ", ".join(f"i64 {i}" for i in range(lanes)) + ">", "int64", lanes)


class Block:
    __slots__ = ("label", "lines", "terminated")

    def __init__(self, label: str):
        self.label, self.lines, self.terminated = label, [], False


class Function:
    """One function being built: an entry block holding every alloca, then the body blocks."""

    def __init__(self, header: str):
        self.header = header  # "define void @f(...) #0"
        self.allocas: list = []
        self.blocks: list = []
        self.counter = 0
        self.cur = self.new_block("start")

    def fresh(self, hint: str = "t") -> str:
        self.counter += 1
        return f"{hint}.{self.counter}"

    def new_block(self, hint: str) -> Block:
        block = Block(self.fresh(hint))
        self.blocks.append(block)
        return block

    def goto(self, block: Block):
        self.cur = block

    def emit(self, line: str):
        if self.cur.terminated:
            raise BuildError(f"internal codegen error: instruction after terminator: {line}")
        self.cur.lines.append(line)

    def assign(self, rhs: str, hint: str = "t") -> str:
        """Emit `%name = rhs` and return `%name`."""
        name = "%" + self.fresh(hint)
        self.emit(f"{name} = {rhs}")
        return name

    def alloca(self, llvm_type: str, align: int, hint: str = "buf") -> str:
        name = "%" + self.fresh(hint)
        self.allocas.append(f"{name} = alloca {llvm_type}, align {align}")
        return name

    def terminate(self, line: str):
        self.emit(line)
        self.cur.terminated = True

    def br(self, block: Block):
        self.terminate(f"br label %{block.label}")

    def cond_br(self, cond: str, then: Block, orelse: Block):
        self.terminate(f"br i1 {cond}, label %{then.label}, label %{orelse.label}")

    def text(self) -> str:
        if not self.cur.terminated:
            self.terminate("ret void")
        out = [self.header + " {", "entry:"]
        out += ["  " + a for a in self.allocas]
        out.append(f"  br label %{self.blocks[0].label}")
        for b in self.blocks:
            out.append(f"{b.label}:")
            out += ["  " + line for line in b.lines]
        out.append("}")
        return "\n".join(out)
