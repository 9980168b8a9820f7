"""The built-in search strategies, each a `SearchStrategy` (interfaces.py: `seed`, `ask`,
`tell` and hooks):

    strategy.ask(n)                -> up to n new candidates to measure (never one measured before)
    strategy.tell(candidates, ms)  -> the measured latencies (inf for errors)

`RandomSearch` draws uniform random legal candidates. `NearTemplateSearch` draws the hand
template's program and its near variants (the target's own answer and its neighbourhood).
`EvolutionarySearch` is MetaSchedule's:
a population seeded from the best measured candidates plus random ones, evolved for a few
generations by mutation, scored by a cost model, and picked epsilon-greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitc.autotune.cost_model import default_cost_model
from minitc.autotune.interfaces import SearchStrategy
from minitc.autotune.mutators import edit, mutate
from minitc.autotune.space import Candidate, Space
from minitc.errors import ScheduleError


class RandomSearch(SearchStrategy):
    """The queued candidates (the hand template's program), then uniform random ones."""

    def __init__(self, space: Space | None = None, rng=None, max_failures: int = 200):
        self.max_failures = max_failures
        super().__init__(space, rng)

    def ask(self, n: int) -> list:
        first = self.queued(n)
        return first + self.random_candidates(n - len(first), {c.key for c in first})


class NearTemplateSearch(SearchStrategy):
    """The hand template's default program, then programs one to four mutations away from it
    (fewer more often), then random ones when the neighbourhood runs dry or the workload has
    no template. The defaults are derived from the target description, so on a new machine
    these programs are where its best ones usually lie; uniform samples of a large space seldom
    come near them, and a model's samples come near what other machines rewarded."""

    def bind(self, space: Space, rng=None) -> None:
        super().bind(space, rng)
        self.default = template_program(space)

    def ask(self, n: int) -> list:
        picked = self.queued(n)
        taken = {c.key for c in picked}
        default = self.default
        if default is not None and len(picked) < n and default.key not in self.measured and default.key not in taken:
            picked.append(default)
            taken.add(default.key)
        near = neighbours(self.space, default, n - len(picked), self.rng, exclude=set(self.measured) | taken)
        picked += near
        return picked + self.random_candidates(n - len(picked), taken | {c.key for c in near})


def template_program(space: Space):
    """The hand template's program with its default parameters, or None without a template."""
    if "template" not in space.sketches:
        return None
    try:
        return space.replay(space.default_values())
    except ScheduleError:
        return None


def neighbours(space: Space, program, count: int, rng, exclude=frozenset()) -> list:
    """Up to `count` distinct programs one to four mutations from `program` (fewer more often),
    none of them in `exclude` (candidate keys); none when `program` is None."""
    if program is None:
        return []
    out: dict = {}
    for _ in range(count * 4):
        if len(out) >= count:
            break
        c = edit(space, program, rng, steps=min(int(rng.geometric(0.5)), 4))
        if c.key not in exclude:
            out.setdefault(c.key, c)
    return list(out.values())


@dataclass
class EvolutionConfig:
    """MetaSchedule's defaults (population 512, 20% from the database, 4 generations, mutation
    0.85, eps-greedy 0.05), scaled down for a 2-core machine where a trial costs ~0.1-0.5 s."""

    population: int = 128
    init_measured_ratio: float = 0.2
    generations: int = 3
    mutate_prob: float = 0.85
    eps_greedy: float = 0.05


class EvolutionarySearch(SearchStrategy):
    """`cost_model` default: `default_cost_model()`."""

    def __init__(self, space: Space | None = None, cost_model=None, rng=None, config: EvolutionConfig | None = None):
        self.cost_model = cost_model if cost_model is not None else default_cost_model()
        self.config = config or EvolutionConfig()
        super().__init__(space, rng)

    def _replay(self, values: list):
        try:
            return self.space.replay(values, self.rng, strict=False)
        except ScheduleError:
            return None

    def _initial_population(self) -> tuple:
        cfg = self.config
        seeded = []
        for _, values in self.best[: int(cfg.population * cfg.init_measured_ratio)]:
            c = self._replay(values)
            if c is not None:
                seeded.append(c)
        fresh = self.random_candidates(cfg.population - len(seeded), {c.key for c in seeded})
        return seeded + fresh, fresh

    def _scores(self, population: list) -> np.ndarray:
        scores = np.asarray(self.cost_model.predict(self.workload, [c.trace for c in population]), dtype=float)
        return np.nan_to_num(scores, nan=-1e9, posinf=1e9, neginf=-1e9)

    def ask(self, n: int) -> list:
        first = self.queued(n)
        if first:
            return first + self.random_candidates(n - len(first), {c.key for c in first})
        cfg = self.config
        population, fresh = self._initial_population()
        if not population:
            return []
        pool: dict = {}  # key -> (score, candidate), unmeasured only
        for _ in range(cfg.generations):
            scores = self._scores(population)
            for c, sc in zip(population, scores):
                if c.key not in self.measured:
                    pool[c.key] = (sc, c)
            population = self._next_generation(population, scores)
        scores = self._scores(population)
        for c, sc in zip(population, scores):
            if c.key not in self.measured:
                pool[c.key] = (sc, c)
        ranked = [c for _, c in sorted(pool.values(), key=lambda sc: -sc[0])]
        picked, chosen = [], set()
        explore = [c for c in fresh if c.key not in self.measured]
        for c in ranked:
            if len(picked) >= n:
                break
            if explore and self.rng.random() < cfg.eps_greedy:
                c = explore.pop(int(self.rng.integers(len(explore))))
            if c.key not in chosen:
                chosen.add(c.key)
                picked.append(c)
        return picked

    def _next_generation(self, population: list, scores: np.ndarray) -> list:
        cfg = self.config
        weights = np.exp((scores - scores.max()) / (scores.std() + 1e-9))
        weights /= weights.sum()
        nxt, keys = [], set()
        for _ in range(len(population) * 2):
            if len(nxt) >= len(population):
                break
            parent: Candidate = population[int(self.rng.choice(len(population), p=weights))]
            child = None
            if self.rng.random() < cfg.mutate_prob:
                values = mutate(parent.decisions, self.rng)
                child = self._replay(values) if values is not None else None
            if child is None:
                child = parent
            if child.key not in keys:
                keys.add(child.key)
                nxt.append(child)
        return nxt or population

    def tell(self, candidates: list, latencies_ms: list) -> None:
        super().tell(candidates, latencies_ms)
        self.cost_model.fit(self.workload, [c.trace for c in candidates], list(latencies_ms))
