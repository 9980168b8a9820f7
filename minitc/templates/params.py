"""The declared parameters of the templates: one `Param` per keyword of a template, next to the
template (`@template("matmul", GEMM_PARAMS)`), the one table that the design space, the
language model's vocabulary, `tc.explain`, the explorer and docs/parameters.md read.

A parameter's `domain` is every value the template accepts, the same on every machine, so a
program recorded on one machine replays on any other. What a machine derives (the `@defaults`
of a template, from the shape and the target description, and its `@choices`) are defaults and
priors that the search tries first, never what is legal:

    Param("mr", "rows of the register tile", Ints(1, 16), "the register tile ...", candidates=(1, 2, 4))

The space offers a parameter's `candidates`, the values the template's @choices derive that lie
in the domain, and its default; a recorded value replays wherever it lies in the domain.

`python -m minitc.templates.params_page` writes docs/parameters.md, the table of every parameter.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class Ints:
    """The whole numbers from lo to hi."""

    lo: int
    hi: int

    def __contains__(self, value) -> bool:
        return type(value) is int and self.lo <= value <= self.hi

    def __str__(self) -> str:
        return f"{self.lo} to {self.hi}"


@dataclass(frozen=True)
class OneOf:
    """A fixed set of values (named options, switches)."""

    values: tuple

    def __contains__(self, value) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)

    def __str__(self) -> str:
        return ", ".join(word(v) for v in self.values)


SWITCH = OneOf((False, True))
PLACES = OneOf(("tile", "inline", "root"))  # where a padding stage is computed


def word(value) -> str:
    """A value as the tensor language and the docs write it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Param:
    """One template parameter: `meaning` in a line, the `domain` of legal values, and how the
    template's @defaults derive the `default` from the shape and the target description;
    `candidates`: values every search also offers (shape- and machine-independent); `before`:
    for a parameter added to a template after programs were recorded, the value that gives
    the programs they measured (a recorded sentence without it replays with it), else None."""

    name: str
    meaning: str
    domain: Ints | OneOf
    default: str
    candidates: tuple = ()
    before: object = None

    def __post_init__(self):
        outside = [v for v in self.candidates if v not in self.domain]
        if outside:
            raise ValueError(f"parameter {self.name}: candidates {outside} lie outside its domain {self.domain}")

    def offered(self, default, derived=(), recorded=None) -> tuple:
        """The values a design space offers, in a fixed order: the whole of a fixed set, else
        the candidates, the derived values that are legal, the default, and a `recorded` value
        being replayed where it is legal (another machine may have derived it)."""
        if default not in self.domain:
            raise ValueError(f"parameter {self.name}: the default {default!r} lies outside its domain {self.domain}")
        if isinstance(self.domain, OneOf):
            return self.domain.values
        extra = (recorded,) if recorded is not None and recorded in self.domain else ()
        values = {*self.candidates, *(v for v in derived if v in self.domain), default, *extra}
        return tuple(sorted(values))


def check_signature(fn, params: tuple) -> None:
    """A template's keywords after (s, out, target) must be its parameters' names, in order:
    decisions are recorded by position."""
    names = [p.name for p in list(inspect.signature(fn).parameters.values())[3:]]
    if names != [p.name for p in params]:
        raise TypeError(f"{fn.__name__} takes {names}, but its parameters declare {[p.name for p in params]}")
