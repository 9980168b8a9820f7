"""Design spaces: every program the tuner may try for a workload, as (sketch, decisions).

A workload's space has up to two sketches:

- `template`: the operator's hand template (minitc/templates, or minitc/templates/gpu for a
  CUDA target) with each keyword parameter a categorical decision over candidates: the fixed
  CANDIDATES, the values the template's `@choices` derive from the shape and the hardware (the
  GEMMs: every register tile that fits, both orders' k blocks), and the template's own
  default, so the hand-written schedule is one point of the space;
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
import inspect
from dataclasses import dataclass

from minitc.autotune.generators import ScheduleFn, SpaceGenerator, generators_of
from minitc.autotune.sampler import DefaultSampler, Sampler
from minitc.autotune.workload import Workload
from minitc.errors import ConfigError, ScheduleError
from minitc.schedule.recorder import Schedule
from minitc.target import is_gpu, parse_target
from minitc.templates import CHOICES, DEFAULTS, TEMPLATES, load_templates, template_tag


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


# Candidate values per template parameter name (shape-independent; the default is added).
CANDIDATES = {
    "mr": (1, 2, 3, 4, 5, 6, 8),
    "nr": (8, 16, 24, 32),
    "nc": (16, 32, 48, 64, 96, 128, 192, 256),
    "ku": (1, 2, 4, 8),
    "kc": (0, 64, 128, 256, 512),
    "mc": (0, 32, 64, 128),
    "kb": (1, 2, 3, 4, 6, 8),
    "ohb": (1, 2, 3, 4, 7),
    "owv": (1, 2, 3, 4),
    "lanes": (4, 7, 8, 16),
    "rcb": (0, 4, 8, 16, 32),
    "kgroups": (1, 2, 4),
    "oht": (1, 2, 4, 8, 14),
    "pixels": (2, 4, 6, 7, 8, 14),
    "vector": (8, 16, 32, 64),
    "rows": (1, 2, 4, 8, 16),
    "streams": (1, 2, 4, 8),
    "chunk": (64, 128, 256, 512, 1024),
    # GPU templates
    "bm": (16, 32, 64, 128),
    "bn": (16, 32, 64, 128),
    "tm": (1, 2, 4, 8),
    "tn": (1, 2, 4, 8),
    "bk": (4, 8, 16, 32),
    "kt": (2, 4, 8, 16),
    "vk": (1, 2, 4, 8),
    "wt": (4, 8, 16, 32),
    "vw": (1, 2, 4),
    "bc": (4, 8, 16),
    "threads": (8, 16, 32, 64, 128, 256, 512, 1024),  # threads per row (GPU reduce.py)
}
BOOLEAN = (False, True)


def _domain(name: str, default, derived=()):
    if isinstance(default, bool):
        return BOOLEAN
    if isinstance(default, str):
        options = {"parallel": ("auto", "n", "m", "batch", "none"), "pad": ("tile", "inline", "root")}
        return tuple(dict.fromkeys(options.get(name, ()) + (default,)))
    values = set(CANDIDATES.get(name, ())) | set(derived) | {default}
    return tuple(sorted(values, key=lambda v: (v is None, v)))


def _registry(target) -> tuple:
    """(templates, defaults, choices) for the target: the GPU ones for a CUDA target."""
    if is_gpu(target):
        from minitc.templates.gpu import GPU_DEFAULTS, GPU_TEMPLATES, load_gpu_templates

        load_gpu_templates()
        return GPU_TEMPLATES, GPU_DEFAULTS, {}
    load_templates()
    return TEMPLATES, DEFAULTS, CHOICES


def template_params(tag: str, s, out: str, target, sampler: Sampler) -> dict:
    """Draw a value for every keyword parameter of the tag's template, from the shape-independent
    CANDIDATES, the template's `@choices` for this shape and target, and its default."""
    templates, defaults_of, choices_of = _registry(target)
    fn = templates[tag]
    defaults = dict(defaults_of[tag](s, out, target)) if tag in defaults_of else {}
    derived = dict(choices_of[tag](s, out, target)) if tag in choices_of else {}
    params = {}
    for p in list(inspect.signature(fn).parameters.values())[3:]:
        if p.kind is not p.KEYWORD_ONLY and p.kind is not p.POSITIONAL_OR_KEYWORD:
            continue
        default = defaults.get(p.name, p.default)
        if default is inspect.Parameter.empty:
            continue
        domain = _domain(p.name, default, derived.get(p.name, ()))
        params[p.name] = sampler.categorical(f"{out}.{p.name}", domain)
    return params


def template_defaults(tag: str, s, out: str, target) -> dict:
    """The values `tc.build` uses, as the space's decisions would give them."""
    templates, defaults_of, _ = _registry(target)
    fn = templates[tag]
    defaults = dict(defaults_of[tag](s, out, target)) if tag in defaults_of else {}
    out_params = {}
    for p in list(inspect.signature(fn).parameters.values())[3:]:
        default = defaults.get(p.name, p.default)
        if default is not inspect.Parameter.empty:
            out_params[p.name] = default
    return out_params


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
    """The operator's hand template with each keyword parameter a categorical decision."""

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

    def first_program(self) -> Candidate | None:
        """What `tc.build` runs, as a program of this space: the hand template with its
        defaults, else the first user schedule program with its instructions' defaults, else
        None (tc.tune's `template_first` measures it first)."""
        if "template" in self.sketches:
            return self.replay(self.default_values())
        fns = [g for g in self.generators if isinstance(g, ScheduleFn)]
        return self._apply(DefaultSampler(first=fns[0].name)) if fns else None
