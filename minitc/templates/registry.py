"""The registries the CPU templates fill as their modules load (`@template`, `@defaults`,
`@choices`); minitc.templates reads them. Kept apart so that a template module imports this
small module, not the package that loads it."""

from __future__ import annotations

TEMPLATES: dict = {}  # tag -> fn(s, out_stage_name, target, **params)
DEFAULTS: dict = {}  # tag -> fn(s, out_stage_name, target) -> params
CHOICES: dict = {}  # tag -> fn(s, out_stage_name, target) -> {param: candidate values for this target}


def template(tag: str):
    def register(fn):
        TEMPLATES[tag] = fn
        return fn

    return register


def defaults(tag: str):
    def register(fn):
        DEFAULTS[tag] = fn
        return fn

    return register


def choices(tag: str):
    """Register the candidate values a tag's parameters take in the tuner's design space beyond
    the shape-independent ones (minitc/autotune/space.py): values derived from the shape and
    the target's hardware, so the space holds what the analytical model would also pick."""

    def register(fn):
        CHOICES[tag] = fn
        return fn

    return register
