"""Design spaces: every rule on every operator yields only legal, numpy-correct candidates;
decisions replay to the same program; the hand templates are points of their spaces."""

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.mutators import MUTATORS, is_switch, mutate, switch_flips
from minitc.autotune.sampler import Sampler, factorizations
from minitc.autotune.space import Space

OPS = sorted(tc.ops.OPS)


def _args(inst):
    return list(inst.placeholders) + [inst.output]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy) if "winograd" in n else n for n in OPS])
def test_random_candidates_are_legal_and_correct(name):
    """Both sketches (template and generic rules), several random draws per op: each builds
    and matches numpy, and its decisions replay to the same trace."""
    rng = np.random.default_rng(7)
    checked = 0
    for draw in range(8):
        inst = tc.ops.OPS[name].instantiate("tiny" if draw % 2 else "small", rng)
        space = Space(inst.output, "llvm")
        sketch = space.sketches[draw % len(space.sketches)]
        c = space.sample(rng, sketch=sketch)
        assert c.sketch == sketch
        f = tc.build(c.schedule, args=_args(inst))
        np.testing.assert_allclose(f(*inst.arrays), inst.expected(), rtol=1e-3, atol=1e-3, err_msg=c.trace)
        assert space.replay(c.values).trace == c.trace
        checked += 1
    assert checked == 8


@pytest.mark.parametrize("name", OPS)
def test_hand_template_is_a_point_of_the_space(name):
    inst = tc.ops.OPS[name].instantiate("small", np.random.default_rng(3))
    space = Space(inst.output, "llvm")
    assert space.sketches[0] == "template"
    candidate = space.replay(space.default_values())
    assert str(tc.lower(candidate.schedule, args=_args(inst))) == str(
        tc.lower(inst.output, args=_args(inst), target="llvm", db=False)
    )


def test_user_defined_computation_gets_the_generic_space():
    A = tc.placeholder((24, 20), name="A")
    k = tc.reduce_axis(20, name="k")
    B = tc.compute((24,), lambda i: tc.sum(A[i, k] * A[i, k], axis=k), name="B")
    C = tc.compute((24,), lambda i: tc.sqrt(B[i]) + 1.0, name="C")
    space = Space(C, "llvm")
    assert space.sketches == ("generic",)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 20)).astype("float32")
    for _ in range(10):
        c = space.sample(rng)
        np.testing.assert_allclose(tc.build(c.schedule)(a), np.sqrt((a * a).sum(1)) + 1, rtol=1e-4)


def test_factorizations_and_sampler_domains():
    assert factorizations(12, 2) == ((1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1))
    assert all(a * b * c == 60 for a, b, c in factorizations(60, 3))
    assert all(t[-1] <= 8 for t in factorizations(64, 3, 8))
    s = Sampler(np.random.default_rng(0))
    tile = s.perfect_tile("x", 48, 4)
    assert np.prod(tile) == 48 and s.decisions[0].domain == factorizations(48, 4)
    replay = Sampler(forced=[list(tile)])
    assert replay.perfect_tile("x", 48, 4) == tile
    with pytest.raises(tc.ScheduleError, match="is not one of its legal values"):
        Sampler(forced=[(5, 5, 1, 1)]).perfect_tile("x", 48, 4)
    with pytest.raises(tc.ScheduleError, match="was not recorded"):
        Sampler(forced=[]).categorical("u", (0, 16))


def test_mutations_stay_in_the_space():
    A = tc.placeholder((64, 48), name="A")
    B = tc.placeholder((48, 32), name="B")
    C = tc.ops.matmul(A, B)
    rng = np.random.default_rng(1)
    for sketch in ("template", "generic"):
        space = Space(C, "llvm")
        c = space.sample(rng, sketch=sketch)
        changed = 0
        for _ in range(20):
            values = mutate(c.decisions, rng)
            assert values is not None and len(values) == len(c.values)
            child = space.replay(values, rng, strict=False)
            changed += child.key != c.key
            assert all(d.value in d.domain for d in child.decisions)
        assert changed > 0
    assert abs(sum(w for _, w in MUTATORS) - 1.0) < 1e-9


def test_switch_flips_change_exactly_one_switch_each():
    X = tc.placeholder((1, 8, 10, 10), name="X")
    W = tc.placeholder((8, 8, 3, 3), name="W")
    space = Space(tc.ops.conv2d(X, W, padding=1), "llvm")
    c = space.replay(space.default_values())
    switches = {d.name: d for d in c.decisions if is_switch(d)}
    assert set(switches) == {"conv2d.unroll_window", "conv2d.pad"}  # not the sketch, not the tile sizes
    flips = switch_flips(space, c)
    changed = []
    for f in flips:
        (n,) = [n for n, (a, b) in enumerate(zip(f.values, c.values)) if a != b]
        changed.append((f.decisions[n].name, f.values[n]))
    want = {(name, v) for name, d in switches.items() for v in d.domain if v != d.value}
    assert sorted(changed, key=str) == sorted(want, key=str) and len({f.key for f in flips} | {c.key}) == len(flips) + 1
