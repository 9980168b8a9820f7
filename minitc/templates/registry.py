"""The registries the CPU templates fill as their modules load (`@template`, `@defaults`,
`@choices`); minitc.templates reads them. Kept apart so that a template module imports this
small module, not the package that loads it."""

from __future__ import annotations

TEMPLATES: dict = {}  # tag -> fn(s, out_stage_name, target, **params)
DEFAULTS: dict = {}  # tag -> fn(s, out_stage_name, target) -> params
CHOICES: dict = {}  # tag -> fn(s, out_stage_name, target) -> {param: candidate values for this target}
SPECIALIZED: dict = {}  # stage tag -> [fn(s, out_stage_name) -> the tag of the template for this shape, or None]


def registrar(table: dict):
    """A decorator factory: `@registrar(TABLE)(tag)` puts the function in TABLE under `tag`."""

    def by_tag(tag: str):
        def register(fn):
            table[tag] = fn
            return fn

        return register

    return by_tag


template = registrar(TEMPLATES)  # @template("matmul"): the schedule function of a tag
defaults = registrar(DEFAULTS)  # @defaults("matmul"): its tile sizes for a shape and target
# @choices("matmul"): the candidate values a tag's parameters take in the tuner's design space
# beyond the shape-independent ones (minitc/autotune/space.py), derived from the shape and the
# target's hardware, so the space holds what the analytical model would also pick
choices = registrar(CHOICES)


def specializes(*tags: str):
    """`@specializes("dense", "dense_epilogue")`: a function of (s, out) naming the template
    that schedules those of the tags' stages it takes (a dense of a few rows: "gemv"), or None
    for the tag's own template; `template_tag` asks it."""

    def register(fn):
        for tag in tags:
            SPECIALIZED.setdefault(tag, []).append(fn)
        return fn

    return register
