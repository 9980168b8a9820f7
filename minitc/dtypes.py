"""The scalar data types minitc knows, and how they combine.

Low precision: `bfloat16` and `float16` are floats, `int8` and `uint8` integers. numpy has no
bfloat16 of its own; minitc uses `ml_dtypes.bfloat16` (importing this module registers it, so
`np.dtype("bfloat16")` works), and a kernel also takes CPU torch tensors of any of these dtypes.
"""

import ml_dtypes  # noqa: F401 - registers numpy's "bfloat16" dtype
import numpy as np

from minitc.errors import DTypeError

FLOATS = ("float32", "float64", "bfloat16", "float16")
INTS = ("int32", "int64", "int8", "uint8")
UNSIGNED = ("uint8",)
BOOL = "bool"
INDEX = "int64"  # loop variables and index arithmetic
ALL = FLOATS + INTS + (BOOL,)
_BITS = {
    "float32": 32,
    "float64": 64,
    "bfloat16": 16,
    "float16": 16,
    "int32": 32,
    "int64": 64,
    "int8": 8,
    "uint8": 8,
    "bool": 1,
}


def check(dtype) -> str:
    """Normalise a dtype given as a string, numpy dtype or type; raise DTypeError if unknown."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype).removeprefix("torch.")  # torch.bfloat16 -> "bfloat16"
    if name not in ALL:
        raise DTypeError(f"unsupported dtype {dtype!r}; minitc supports {', '.join(ALL)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_unsigned(dtype: str) -> bool:
    return dtype in UNSIGNED


def bits(dtype: str) -> int:
    return _BITS[dtype]


def promote(a: str, b: str, what: str = "operands") -> str:
    """Result dtype of a binary operation: the wider of two ints or of two floats.
    Mixing an int and a float needs an explicit cast, as in most compilers' IRs; so do the two
    16-bit floats (neither holds the other) and uint8 with int8 (neither holds the other)."""
    if a == b:
        return a
    same_kind = (is_int(a) and is_int(b)) or (is_float(a) and is_float(b))
    if same_kind and bits(a) != bits(b):
        wide, narrow = (a, b) if bits(a) > bits(b) else (b, a)
        if not (is_unsigned(wide) and not is_unsigned(narrow)):
            return wide
    raise DTypeError(f"{what} have dtypes {a} and {b}; use tc.cast(x, dtype) to convert explicitly")


def min_value(dtype: str):
    return -float("inf") if is_float(dtype) else int(np.iinfo(dtype).min)


def max_value(dtype: str):
    return float("inf") if is_float(dtype) else int(np.iinfo(dtype).max)
