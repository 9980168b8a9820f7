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


class RuntimeCheckError(MinitcError):
    """The checked mode (MINITC_CHECK=1) caught a kernel call that would read or write memory
    that is not its own: a null or stray pointer, a buffer of the wrong shape, an output over a
    value still in use, or a write past the end of an output."""


class RaceError(ScheduleError):
    """GPU threads of a schedule race on memory: the simulator saw two threads touch the same
    element, at least one writing, with no barrier between them."""


class GraphError(MinitcError):
    """A model graph that breaks the graph's rules (a name given to two values, a value read
    before it is computed): a graph pass's bug, caught when the pass returns (graph.verify)."""


class CompilerFallbackWarning(UserWarning):
    """minitc failed inside (an import, a graph pass, a kernel build raised) on a valid model,
    and compiled the model anyway: the pass skipped, or the node run through PyTorch. The
    compiled model lists what fell back in `compiled.fallbacks`; `tc.compile(...,
    fallback=False)` raises the error instead."""


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
    """The directories of minitc's code: the package, and beside it in a source tree the
    directories installed as its subpackages lm, backends and benchmarks (in a wheel they lie
    inside the package)."""
    import os

    package = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(package)
    beside = [os.path.join(root, name) for name in ("lm", "backends", "benchmarks")]
    return tuple(os.path.join(d, "") for d in (package, *beside))
