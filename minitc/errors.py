"""Exceptions raised by minitc. Every user mistake maps to one of these, with a message that
names the object at fault and what to do about it."""


class MinitcError(Exception):
    """Base class of every error minitc raises on purpose."""


class ScheduleError(MinitcError):
    """An illegal schedule primitive, or a schedule that cannot be lowered correctly."""


class ShapeError(MinitcError, ValueError):
    """Tensor shapes that do not fit: wrong rank, wrong extent, index count mismatch."""


class DTypeError(MinitcError, TypeError):
    """Mismatched or unsupported data types."""


class LayoutError(MinitcError, ValueError):
    """An argument that is not a contiguous, host-resident array."""


class BuildError(MinitcError):
    """Code generation or compilation failed, or the target is not usable here."""


class ConfigError(MinitcError, ValueError):
    """A setting out of range: an argument such as `tc.tune`'s `trials`, or an environment
    variable such as MINITC_NUM_THREADS that does not parse."""


class IRError(MinitcError):
    """The loop-nest IR is malformed (raised by the verifier)."""


class RaceError(ScheduleError):
    """GPU threads of a schedule race on memory: the simulator saw two threads touch the same
    element, at least one writing, with no barrier between them."""
