"""The scalar data types minitc knows, and how they combine."""

import numpy as np

from minitc.errors import DTypeError

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
BOOL = "bool"
INDEX = "int64"  # loop variables and index arithmetic
ALL = FLOATS + INTS + (BOOL,)
_BITS = {"float32": 32, "float64": 64, "int32": 32, "int64": 64, "bool": 1}


def check(dtype) -> str:
    """Normalise a dtype given as a string, numpy dtype or type; raise DTypeError if unknown."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in ALL:
        raise DTypeError(f"unsupported dtype {dtype!r}; minitc supports {', '.join(ALL)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def bits(dtype: str) -> int:
    return _BITS[dtype]


def promote(a: str, b: str, what: str = "operands") -> str:
    """Result dtype of a binary operation: the wider of two ints or of two floats.
    Mixing an int and a float needs an explicit cast, as in most compilers' IRs."""
    if a == b:
        return a
    if (is_int(a) and is_int(b)) or (is_float(a) and is_float(b)):
        return a if bits(a) >= bits(b) else b
    raise DTypeError(f"{what} have dtypes {a} and {b}; use tc.cast(x, dtype) to convert explicitly")


def min_value(dtype: str):
    return -float("inf") if is_float(dtype) else int(np.iinfo(dtype).min)


def max_value(dtype: str):
    return float("inf") if is_float(dtype) else int(np.iinfo(dtype).max)
