"""Design spaces: every program the tuner may try for a workload, as (sketch, decisions).

A workload's space has up to two sketches:

- `template`: the operator's hand template (minitc/templates, or minitc/templates/gpu for a
  CUDA target) with each declared parameter (templates/params.py) a categorical decision over
  what it offers: its fixed candidates, the values the template's `@choices` derive from the
  shape and the hardware that lie in its domain (the GEMMs: every register tile that fits,
  both orders' k blocks), and the template's own default, so the hand-written schedule is one
  point of the space. What is legal is the parameter's domain, the same on every machine: a
  program recorded on another machine replays here;
- `generic`: the MetaSchedule-style rules of space_rules.py (gpu_space_rules.py on a GPU), for any
  computation.

`Space(outputs, target, generators)` takes other sketches instead (generators.py: a user's
schedule program with sampling instructions, the generic rules with rules of one's own, or a
list of sketches; `tc.tune`'s `space=`). The first decision picks the sketch.
`Space.sample(rng)` draws a random candidate; `Space.replay(decisions)` rebuilds one from its
decisions (what mutation, the database and the language model use).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from minitc.autotune.generators import ScheduleFn, SpaceGenerator, generators_of
from minitc.autotune.sampler import DefaultSampler, Sampler
from minitc.autotune.workload import Workload
from minitc.errors import ConfigError, ScheduleError
from minitc.schedule.recorder import Schedule
from minitc.target import is_gpu, parse_target
from minitc.templates import CHOICES, DEFAULTS, PARAMS, TEMPLATES, load_templates, template_tag


def _registry(target) -> tuple:
    """(templates, their parameters, defaults, choices) for the target: the GPU ones for a CUDA
    target."""
    if is_gpu(target):
        from minitc.templates.gpu import GPU_DEFAULTS, GPU_PARAMS, GPU_TEMPLATES, load_gpu_templates

        load_gpu_templates()
        return GPU_TEMPLATES, GPU_PARAMS, GPU_DEFAULTS, {}
    load_templates()
    return TEMPLATES, PARAMS, DEFAULTS, CHOICES


def template_params(tag: str, s, out: str, target, sampler: Sampler) -> dict:
    """Draw a value for every declared parameter of the tag's template (templates/params.py)
    among what its Param offers: its candidates, the values the template's `@choices` derive
    for this shape and target, and its default. A replayed value is legal wherever it lies in
    the parameter's domain, whatever this machine derives."""
    choices_of = _registry(target)[3]
    derived = dict(choices_of[tag](s, out, target)) if tag in choices_of else {}
    params = {}
    for p, default in _declared(tag, s, out, target):
        name = f"{out}.{p.name}"
        try:
            offered = p.offered(default, derived.get(p.name, ()), sampler.recorded(name))
        except ValueError as e:
            raise ScheduleError(f"the {tag} template: {e}") from None
        params[p.name] = sampler.categorical(name, offered)
    return params


def _declared(tag: str, s, out: str, target) -> list:
    """(Param, default) of the template's parameters that its @defaults set for this shape and
    target: one it leaves out (the prefetch slot where gemm_prefetch.offered is false) is no
    decision of the space, and the template's own default applies."""
    _, schemas, defaults_of, _ = _registry(target)
    defaults = dict(defaults_of[tag](s, out, target)) if tag in defaults_of else {}
    return [(p, defaults[p.name]) for p in schemas[tag] if p.name in defaults]


def template_defaults(tag: str, s, out: str, target) -> dict:
    """The values `tc.build` uses, as the space's decisions would give them."""
    return {p.name: default for p, default in _declared(tag, s, out, target)}


@dataclass
class Candidate:
    sketch: str
    decisions: list  # Decision objects, in order (the first one is the sketch)
    schedule: Schedule

    @property
    def values(self) -> list:
        return [d.value for d in self.decisions]

    @property
    def trace(self) -> str:
        return self.schedule.trace.to_json()

    @property
    def key(self) -> str:
        """Structural hash: two candidates with equal traces are the same program."""
        return hashlib.sha256(self.trace.encode()).hexdigest()[:24]


class TemplateSketch(SpaceGenerator):
    """The operator's hand template with each declared parameter a categorical decision."""

    name = "template"

    def applies(self, space) -> bool:
        return space.tag in space.templates

    def apply(self, s, space, sampler: Sampler) -> None:
        params = template_params(space.tag, s, space.out, space.target, sampler)
        space.templates[space.tag](s, space.out, space.target, **params)


class Space:
    """Every program the tuner may try for one workload on one target. `generators`: the
    sketches (generators.generators_of: None for the template and the generic rules; a
    SpaceGenerator, a user's schedule function, "template", "generic", or a list of them)."""

    def __init__(self, outputs, target, generators=None):
        """`outputs`: the output tensors, or a Workload (workload.py) describing them."""
        workload = outputs if isinstance(outputs, Workload) else Workload(outputs)
        self.outputs = workload.outputs
        self.target = parse_target(target)
        self.gpu = is_gpu(self.target)
        self.templates = _registry(self.target)[0]
        probe = workload.schedule
        if len(probe.state.outputs) != 1:
            raise ScheduleError("design spaces cover single-output computations")
        self.out = probe.state.outputs[0]
        self.tag = probe.state.stage(self.out).tag if self.gpu else template_tag(probe, self.out)
        given = generators_of(generators, TemplateSketch())
        self.generators = [g for g in given if g.applies(self)]
        if not self.generators:
            names = ", ".join(g.name for g in given)
            raise ConfigError(f"no sketch of the space ({names}) applies to {self.out} (no template for {self.tag})")
        self.sketches = tuple(g.name for g in self.generators)
        for g in self.generators:
            g.check(self)

    def _apply(self, sampler: Sampler) -> Candidate:
        s = Schedule(self.outputs)
        sketch = sampler.categorical("sketch", self.sketches)
        s.sampler = sampler  # the schedule's sampling instructions ask it too
        try:
            self.generators[self.sketches.index(sketch)].apply(s, self, sampler)
        finally:
            s.sampler = None
        return Candidate(sketch, list(sampler.decisions), s)

    def sample(self, rng, sketch: str | None = None) -> Candidate:
        """A random candidate (of one sketch if given); raises ScheduleError if the draw is
        illegal (the caller draws again)."""
        forced = [sketch] if sketch is not None else None
        return self._apply(Sampler(rng, forced=forced, on_invalid="random"))

    def replay(self, values: list, rng=None, strict: bool = True) -> Candidate:
        """The candidate with these decision values. With strict=False, values that are no
        longer legal (an earlier decision changed) are re-drawn at random."""
        return self._apply(Sampler(rng, forced=values, on_invalid="raise" if strict else "random"))

    def default_values(self) -> list:
        """The decisions of the hand template with its default parameters."""
        if "template" not in self.sketches:
            raise ScheduleError(f"{self.out} has no template")
        s = Schedule(self.outputs)
        params = template_defaults(self.tag, s, self.out, self.target)
        return ["template"] + list(params.values())

    def declared(self) -> tuple:
        """The template's declared parameters (templates/params.py), () without a template."""
        return _registry(self.target)[1][self.tag] if "template" in self.sketches else ()

    def parameters(self, candidate: Candidate) -> list:
        """(Param, Decision) of the template parameters a candidate of the template sketch sets
        (templates/params.py: their meanings and domains); [] for another sketch."""
        if candidate.sketch != "template":
            return []
        declared = {f"{self.out}.{p.name}": p for p in self.declared()}
        return [(declared[d.name], d) for d in candidate.decisions if d.name in declared]

    def first_program(self) -> Candidate | None:
        """What `tc.build` runs, as a program of this space: the hand template with its
        defaults, else the first user schedule program with its instructions' defaults, else
        the generic rules' analytical defaults (rule_defaults.py), else None (tc.tune's
        `template_first` measures it first)."""
        if "template" in self.sketches:
            return self.replay(self.default_values())
        fns = [g for g in self.generators if isinstance(g, ScheduleFn)]
        if fns:
            return self._apply(DefaultSampler(first=fns[0].name))
        return self._apply(DefaultSampler(first="generic")) if "generic" in self.sketches else None
