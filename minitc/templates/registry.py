"""The registries the CPU templates fill as their modules load (`@template` with the template's
declared parameters, `@defaults`, `@choices`); minitc.templates reads them. Kept apart so that
a template module imports this small module, not the package that loads it."""

from __future__ import annotations

from minitc.templates.params import check_signature

TEMPLATES: dict = {}  # tag -> fn(s, out_stage_name, target, **params)
PARAMS: dict = {}  # tag -> its template's parameters (params.Param), in the order of its keywords
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


def template_registrar(table: dict, schemas: dict):
    """`@template_registrar(TABLE, SCHEMAS)(tag, params)` puts the function in TABLE and its
    declared parameters in SCHEMAS under `tag`."""

    def by_tag(tag: str, params: tuple = ()):
        def register(fn):
            check_signature(fn, params)
            table[tag], schemas[tag] = fn, tuple(params)
            return fn

        return register

    return by_tag


template = template_registrar(TEMPLATES, PARAMS)  # @template("matmul", GEMM_PARAMS): a tag's schedule function
defaults = registrar(DEFAULTS)  # @defaults("matmul"): its tile sizes for a shape and target
# @choices("matmul"): values of a tag's parameters derived from the shape and the target's
# hardware, which the tuner's design space offers where they lie in the parameter's domain
# (minitc/autotune/space.py), so the space holds what the analytical model would also pick
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
