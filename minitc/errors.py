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


def warn_user(message: str, category: type = UserWarning) -> None:
    """warnings.warn pointing at the caller's line outside minitc (the user's `tc.tune(...)`,
    not the minitc line that noticed), however deep inside minitc the warning is raised."""
    import sys
    import warnings

    frame, level = sys._getframe(1), 2  # stacklevel 2 is warn_user's caller
    while frame is not None and frame.f_code.co_filename.startswith(_package_dirs()):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def _package_dirs() -> tuple:
    """The directories of minitc's packages (lm/, backends/ and benchmarks/ are minitc.lm,
    minitc.backends and minitc.benchmarks, but live beside minitc/ in the source tree)."""
    global _DIRS
    if _DIRS is None:
        import importlib.util
        import os

        found = []
        for name in ("minitc", "minitc.lm", "minitc.backends", "minitc.benchmarks"):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                found.append(os.path.dirname(spec.origin) + os.sep)
        _DIRS = tuple(found)
    return _DIRS


_DIRS = None
