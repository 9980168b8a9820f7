"""Operator templates (hand-written default schedules): one function per operator family, written only with the public
primitives and taking its tile sizes as arguments, so every template is a point of the design
space the tuner searches.

A template is registered for an operator tag (`tc.compute(..., tag=...)`, set by `tc.ops`):

    @template("matmul", GEMM_PARAMS)                  # its parameters: minitc/templates/params.py
    def schedule_matmul(s, out, target, mr=6, nr=16, ...): ...

    @defaults("matmul")
    def matmul_defaults(s, out, target) -> dict: ...   # good tile sizes for this host

    @choices("matmul")
    def matmul_choices(s, out, target) -> dict: ...    # {param: values}: priors of the tuner's search

`template_schedule(outputs, target)` looks up the template of the (single) output's tag and
applies it with its defaults; `tc.build(tensor)` uses it. A hand-written matrix product
(`tc.compute` of a sum of products, gemm.is_contraction) takes the matmul template; other
outputs without a template keep the naive loop nest.
"""

from __future__ import annotations

from minitc.errors import ScheduleError
from minitc.schedule.recorder import Schedule
from minitc.target import is_gpu, parse_target
from minitc.templates.registry import CHOICES, DEFAULTS, PARAMS, SPECIALIZED, TEMPLATES, choices, defaults, template

__all__ = [
    "CHOICES", "DEFAULTS", "PARAMS", "SPECIALIZED", "TEMPLATES", "choices", "defaults", "template", "load_templates",
    "template_schedule", "template_tag",
]  # fmt: skip

_LOADED = False


def load_templates() -> None:
    """Import the template modules (they register themselves); cheap after the first call.
    Call it rather than testing `if not TEMPLATES`: importing one template module (the GPU
    rules import gemm and elementwise) registers only that module's templates."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    _LOADED = True


def template_tag(s, out: str) -> str:
    """The tag whose CPU template schedules stage `out`: its own, or the one a specialization
    names for its shape (a dense of a few rows: "gemv", gemv.py), or "matmul" for a matrix
    product written by hand with tc.compute (gemm.is_contraction), "matmul_epilogue" for an
    elementwise epilogue of one (bias, activation: gemm.contraction_under), "reduce" for a
    reduction written by hand that is no contraction (contraction.py; a convolution written by
    hand is one, and takes the generic rules' register tile) and "reduce_epilogue" for an
    elementwise output of such a reduction."""
    load_templates()
    tag = s.state.stage(out).tag
    for specialize in SPECIALIZED.get(tag, ()):
        special = specialize(s, out)
        if special in TEMPLATES:
            return special
    if tag in TEMPLATES:
        return tag
    from minitc.templates.contraction import find_contraction, reduction_under
    from minitc.templates.gemm import contraction_under, is_contraction

    if is_contraction(s, out):
        return "matmul"
    st = s.state.stage(out)
    if st.reduce_axes:  # a sum, max or min that is no contraction: the reduction template
        return "reduce" if find_contraction(st) is None else tag  # a contraction: the generic rules
    if contraction_under(s, out):
        return "matmul_epilogue"
    return "reduce_epilogue" if reduction_under(s, out) else tag


def template_schedule(outputs, target="llvm", **params) -> Schedule:
    """The schedule `tc.build(tensor)` uses: the operator's template with default tile sizes
    for `target`, or the naive loop nest when the operator has no template. Keyword arguments
    override template parameters (CPU templates: `template_schedule(C, "llvm", mr=4, nr=24)`)."""
    if is_gpu(target):
        from minitc.templates.gpu import gpu_template_schedule

        if params:
            raise ScheduleError("template parameters can be given for CPU targets only; GPU templates take defaults")

        return gpu_template_schedule(outputs, target)
    load_templates()
    s = Schedule(outputs)
    if len(s.state.outputs) != 1:
        return s
    out = s.state.outputs[0]
    tag = template_tag(s, out)
    if tag not in TEMPLATES:
        if params:
            raise ScheduleError(f"{out} ({tag}) has no template to take parameters {', '.join(params)}")
        return s
    tgt = parse_target(target)
    params = {**(DEFAULTS[tag](s, out, tgt) if tag in DEFAULTS else {}), **params}
    try:
        TEMPLATES[tag](s, out, tgt, **params)
    except ScheduleError as e:  # a template must never make a computation unbuildable
        raise ScheduleError(f"the default {tag} template failed on {out}: {e}") from e
    return s
