"""The schedule `tc.build` runs for output tensors when no tuning record applies: the
operator's hand template, else the generic design space's analytical default
(space_rules.py with rule_defaults.py: a register tile, parallel outer tiles, unrolled), so a
computation written with `tc.compute` that no template covers is not left as the naive loop
nest, whose cost a user would only find out by timing it. The same program is the first one
`tc.tune` measures (Space.first_program)."""

from __future__ import annotations

from minitc.autotune.space import Space
from minitc.errors import ConfigError, ScheduleError
from minitc.schedule.recorder import Schedule
from minitc.target import is_gpu
from minitc.templates import TEMPLATES, load_templates, template_schedule, template_tag


def generic_default(outputs, target) -> Schedule | None:
    """The generic space's program with every decision at its analytical default, or None
    where the generic rules do not apply (several outputs, a GPU target: its kernels need
    thread bindings, which the GPU templates give)."""
    if is_gpu(target):
        return None
    try:
        return Space(outputs, target, "generic").first_program().schedule
    except (ScheduleError, ConfigError):
        return None


def default_schedule(outputs, target) -> Schedule:
    """The hand template for `target`; without one, the generic default; else the naive nest."""
    if is_gpu(target) or has_template(outputs):
        return template_schedule(outputs, target)
    return generic_default(outputs, target) or Schedule(outputs)


def has_template(outputs) -> bool:
    """Whether a CPU template covers the computation (one may leave a tiny computation as it
    is); several outputs count as covered: the generic space takes one."""
    load_templates()
    s = Schedule(outputs)
    return len(s.state.outputs) != 1 or template_tag(s, s.state.outputs[0]) in TEMPLATES
