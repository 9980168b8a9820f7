"""Space generators: the sketches a design space (space.py) chooses from with its first
decision, each a schedule program whose numbers come from a sampler (MetaSchedule's
SpaceGenerator: PostOrderApply over the rules, ScheduleFn for a user's function).

    GenericSketch()                  # the generic rules (space_rules.RULES; the GPU's on a GPU)
    GenericSketch(rules=[...])       # the given ScheduleRules instead
    ScheduleFn(my_space)             # a user's schedule program with sampling instructions
    space.TemplateSketch()           # the operator's hand template, its parameters as decisions

`tc.tune(C, space=...)` takes one of these, a function (made a ScheduleFn), the names
"template" and "generic", or a list of them (the first decision then picks one).
"""

from __future__ import annotations

from minitc.autotune.gpu_space_rules import gpu_generic_sketch
from minitc.autotune.sampler import DefaultSampler, Sampler
from minitc.autotune.space_rules import ScheduleRule, apply_rules, generic_sketch
from minitc.errors import ConfigError, MinitcError, ScheduleError


class SpaceGenerator:
    """One sketch of a design space. A subclass sets `name` and writes `apply`:

        name                          # the sketch's name: the value of the space's first
                                      # decision and the `sketch` of its records
        applies(space) -> bool        # optional: whether it can schedule this workload
        apply(s, space, sampler)      # schedule `s`, a fresh Schedule of space.outputs

    `apply` takes every number from `sampler` (perfect_tile, categorical, compute_location:
    sampler.py), or through the schedule's own sampling instructions (`s.sample_perfect_tile`,
    ...), which ask the same sampler while the space runs it. The same answers must always
    give the same primitives: that is how a candidate replays from its decisions. An illegal
    draw raises ScheduleError (the search draws again)."""

    name = ""

    def applies(self, space) -> bool:
        return True

    def apply(self, s, space, sampler: Sampler) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define apply(s, space, sampler)")

    def check(self, space) -> None:
        """Hook: raise a clear error now if this sketch cannot work for `space` (called once,
        when the space is made)."""


class GenericSketch(SpaceGenerator):
    """The generic rules: `rules` (ScheduleRules, in order), by default the registered ones
    (space_rules.RULES, read when the space runs); on a GPU target the GPU rules."""

    name = "generic"

    def __init__(self, rules=None):
        if rules is not None and not all(isinstance(r, ScheduleRule) for r in rules):
            raise ConfigError(f"GenericSketch(rules=...) takes ScheduleRules, got {list(rules)!r}")
        self.rules = None if rules is None else list(rules)

    def apply(self, s, space, sampler: Sampler) -> None:
        if space.gpu:
            gpu_generic_sketch(s, space.out, space.target, sampler)
        elif self.rules is None:
            generic_sketch(s, space.out, space.target, sampler)
        else:
            apply_rules(s, space.out, space.target, sampler, self.rules)


class ScheduleFn(SpaceGenerator):
    """A user's schedule program `fn(s)` as a sketch: its sampling instructions are the
    decisions. Named after the function unless `name` is given. Outside tuning the same
    function on a plain `tc.Schedule` runs with the instructions' defaults, and it must be
    legal with them (checked when the space is made): that is the program `tc.build` gets."""

    def __init__(self, fn, name: str | None = None):
        if not callable(fn):
            raise ConfigError(f"a design space is a function of a Schedule, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "") or type(fn).__name__

    def apply(self, s, space, sampler: Sampler) -> None:
        try:
            self.fn(s)
        except MinitcError:
            raise  # ScheduleError: an illegal draw; the rest say what is wrong themselves
        except Exception as e:
            raise ConfigError(f"the design space {self.name} raised {type(e).__name__}: {e}") from e

    def check(self, space) -> None:
        try:
            space._apply(DefaultSampler(first=self.name))
        except ScheduleError as e:
            raise ScheduleError(
                f"the design space {self.name} is illegal with its default decisions (the program tc.build of "
                f"its schedule runs): {e}"
            ) from e


def generators_of(space, template) -> list:
    """The SpaceGenerators `space` (tc.tune's `space=`) names: None for the default ones (the
    hand template if there is one, then the generic rules); `template` is the TemplateSketch."""
    if space is None:
        return [template, GenericSketch()]
    items = list(space) if isinstance(space, (list, tuple)) else [space]
    if not items:
        raise ConfigError("space=[]: name at least one sketch")
    out = []
    for item in items:
        if isinstance(item, SpaceGenerator):
            out.append(item)
        elif item == "template":
            out.append(template)
        elif item == "generic":
            out.append(GenericSketch())
        elif isinstance(item, str):
            raise ConfigError(f"space={item!r}: the built-in sketches are 'template' and 'generic'")
        else:
            out.append(ScheduleFn(item))
    names = [g.name for g in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"the sketches of a space need distinct names, got {names}")
    return out
