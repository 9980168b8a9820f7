"""The templates' declared parameters (minitc/templates/params.py): every template declares its
keywords with a meaning, a host-independent domain and a default rule; the design space reads
them, so a program recorded on one machine replays on every other (the whole of lm/data on the
recorded hosts of tests/fixtures/hosts); docs/parameters.md is generated from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import HOSTS, recorded_target

import minitc as tc
from minitc.autotune.space import Space
from minitc.errors import ScheduleError
from minitc.templates import PARAMS, TEMPLATES, load_templates
from minitc.templates.gpu import GPU_PARAMS, GPU_TEMPLATES, load_gpu_templates
from minitc.templates.params import SWITCH, Ints, OneOf, Param
from minitc.templates.params_page import parameters_page

FIXTURES = sorted(p.name for p in HOSTS.glob("*.json"))
DOC = Path(__file__).resolve().parents[2] / "docs" / "parameters.md"
ph = tc.placeholder


def _schemas() -> list:
    load_templates()
    load_gpu_templates()
    return [(TEMPLATES, PARAMS), (GPU_TEMPLATES, GPU_PARAMS)]


def test_every_template_declares_each_of_its_parameters_once():
    for templates, schemas in _schemas():
        assert set(schemas) == set(templates)
        for tag, params in schemas.items():
            names = [p.name for p in params]
            assert len(set(names)) == len(names), tag
            for p in params:
                assert p.meaning and p.default and "\n" not in p.meaning, (tag, p.name)
                assert all(v in p.domain for v in p.candidates), (tag, p.name)


def test_a_template_whose_keywords_differ_from_its_parameters_is_refused():
    from minitc.templates.registry import template_registrar

    table, schemas = {}, {}
    register = template_registrar(table, schemas)

    def schedule(s, out, target, mr=4, nr=8):
        pass

    with pytest.raises(TypeError, match=r"takes \['mr', 'nr'\]"):
        register("x", (Param("nr", "columns", Ints(1, 8), "8"), Param("mr", "rows", Ints(1, 8), "4")))(schedule)
    register("x", (Param("mr", "rows", Ints(1, 8), "4"), Param("nr", "columns", Ints(1, 8), "8")))(schedule)
    assert table["x"] is schedule and [p.name for p in schemas["x"]] == ["mr", "nr"]


def test_domains_are_exact_about_types_and_bounds():
    assert 0 in Ints(0, 4) and 4 in Ints(0, 4) and 5 not in Ints(0, 4) and True not in Ints(0, 4)
    assert False in SWITCH and 0 not in SWITCH and "root" in OneOf(("tile", "root")) and "x" not in OneOf(("tile",))
    p = Param("l2", "ahead", Ints(0, 64), "0", candidates=(0, 8))
    assert p.offered(0, derived=(4, 100)) == (0, 4, 8)  # a derived value outside the domain is no candidate
    assert p.offered(0, recorded=12) == (0, 8, 12) and p.offered(0, recorded=65) == (0, 8)
    with pytest.raises(ValueError, match="outside its domain"):
        p.offered(65)
    with pytest.raises(ValueError, match="outside its domain"):
        Param("mr", "rows", Ints(1, 8), "4", candidates=(0,))


def _workloads():
    X = ph((1, 4, 28, 28, 16), name="X")
    yield tc.ops.matmul(ph((1024, 1024), name="A"), ph((1024, 1024), name="B"))
    yield tc.ops.dense(ph((1, 768), name="A"), ph((3072, 768), name="W"))  # gemv_dot
    yield tc.ops.conv2d(ph((1, 3, 224, 224), name="X"), ph((64, 3, 7, 7), name="W"), stride=2, padding=3)
    yield tc.ops.depthwise_conv2d(ph((1, 96, 112, 112), name="X"), ph((96, 1, 3, 3), name="W"), stride=2, padding=1)
    yield tc.ops.conv2d_nchwc(X, ph((4, 4, 3, 3, 16, 16), name="W"), padding=1)
    yield tc.ops.conv2d_winograd_nchwc(X, ph((4, 4, 4, 4, 16, 16), name="U"), padding=1)
    yield tc.ops.softmax(ph((1536, 128), name="X"))
    yield tc.ops.sum(ph((768, 128), name="X"), axis=0)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_default_lies_in_its_domain_on_each_recorded_host(fixture):
    """The defaults each host derives are points of the host-independent space: the hand
    template's program replays, and every value offered is legal."""
    target = recorded_target(fixture)
    for out in _workloads():
        space = Space(out, target)
        for d in space.replay(space.default_values()).decisions[1:]:
            param = next(p for p in PARAMS[space.tag] if p.name == d.name.rsplit(".", 1)[-1])
            assert all(v in param.domain for v in d.domain), (space.tag, d)


def test_a_value_another_host_derived_replays_here_and_one_outside_the_domain_does_not():
    """The prefetch distance 12 of lm/data's Rocket Lake (its measured L2 latency) is no
    candidate on the recorded Intel server (0, 2, 4, 8): it replays, as every value of the
    slot's domain does; a distance beyond the domain is refused."""
    space = Space(
        tc.ops.matmul(ph((256, 256), name="A"), ph((256, 256), name="B")),
        recorded_target("intel-sapphirerapids-kvm.json"),
    )
    values = space.default_values()
    decisions = space.replay(values).decisions
    n = [d.name.rsplit(".", 1)[-1] for d in decisions].index("l2")
    assert 12 not in decisions[n].domain
    values[n] = 12
    replayed = space.replay(values)
    assert replayed.decisions[n].value == 12 and '"prefetch"' in replayed.trace
    values[n] = 1000
    with pytest.raises(ScheduleError, match="not one of its legal values"):
        space.replay(values)


# Workloads of lm/data whose space changed since they were measured: a dense of one row takes
# the gemv_dot template (templates/gemv.py), the GPU convolution gained two parameters, the GPU
# depthwise convolution a template
OLDER_SPACES = {("resnet-fc", "llvm"), ("resnet-stem", "cuda"), ("resnet18-c2-s2", "cuda"), ("resnet18-c3", "cuda")}
OLDER_SPACES |= {("mbv2-dw-32-112", "cuda"), ("mbv2-dw-96-112-s2", "cuda")}
# workloads whose computation changed since their programs were recorded: softmax's exp stage
# writes 0 below -70 (ops/norm.py FLUSH_BELOW, 2026-12-08), so its 187 recorded CPU programs are
# refused as written for another workload (lm's training skips them) until it is recorded again
CHANGED_WORKLOADS = {("gpt2-softmax", "llvm")}


@pytest.mark.heavy
def test_the_whole_dataset_replays_on_the_recorded_hosts():
    """Every program of lm/data replays (its CPU programs on the recorded hosts' descriptions in
    turn, its GPU ones on their CUDA target), except those written for an older space of their
    workload (a template added or specialised since), or for a computation that changed since
    (CHANGED_WORKLOADS): those are refused as such, on every host alike, and lm's training skips
    them."""
    from minitc.lm.dataset import load
    from minitc.lm.language import SentenceError, space_values
    from minitc.lm.training_set import workload

    entries = load()
    spaces, replayed, older, changed = {}, 0, set(), set()
    for n, e in enumerate(entries):
        if e.target.startswith("cuda"):
            key = (e.name, e.target)
        else:
            key = (e.name, FIXTURES[n % len(FIXTURES)], int(re.search(r"-num-cores=(\d+)", e.target).group(1)))
        if key not in spaces:
            spaces[key] = Space(workload(e.name), e.target if len(key) == 2 else recorded_target(key[1], key[2]))
        try:
            values = space_values(spaces[key], e.parsed)
        except SentenceError as err:
            if "written for another workload" in str(err):
                changed.add((e.name, e.target.split()[0]))
                continue
            assert "space line" in str(err), (e.where, str(err))
            older.add((e.name, e.target.split()[0]))
            continue
        spaces[key].replay(values)
        replayed += 1
    assert replayed >= 7100 and older == OLDER_SPACES and changed == CHANGED_WORKLOADS


def test_the_parameters_page_is_up_to_date():
    text = DOC.read_text()
    assert text == parameters_page(), "run python -m minitc.templates.params_page"
    for _, schemas in _schemas():
        for params in schemas.values():
            assert all(f"| `{p.name}` | {p.meaning} | {p.domain} |" in text for p in params)


def test_the_vocabulary_writes_every_parameter_and_keeps_the_shipped_models_ids():
    """The language model's vocabulary has a token for every template's tag and every
    parameter's name and named value, and each shipped checkpoint's vocabulary is its
    beginning (the ids it was trained with)."""
    from minitc.lm.model import load_checkpoint
    from minitc.lm.pipeline import SHIPPED, SHIPPED_GPU
    from minitc.lm.tokenizer import Tokenizer, schema_tokens

    tok = Tokenizer.default()
    assert schema_tokens([]) and not schema_tokens(tok.vocab)
    assert all(set(templates) <= set(tok.vocab) for templates, _ in _schemas())  # a space line names its template
    for path in (SHIPPED, SHIPPED_GPU):
        _, vocab, _ = load_checkpoint(path)
        assert tok.vocab[: len(vocab)] == vocab, path
    for _, schemas in _schemas():
        for p in (p for params in schemas.values() for p in params if isinstance(p.domain, OneOf)):
            assert all(tok.value_tokens(v)[-1] == ";" for v in p.domain.values)  # raises for a missing token


def _extremes(domain) -> tuple:
    return domain.values if isinstance(domain, OneOf) else (domain.lo, domain.hi)


@pytest.mark.parametrize("target", ["intel-haswell-avx2.json", "cuda-sim"])
def test_every_parameter_takes_the_ends_of_its_domain(target):
    """A template accepts every value of its parameters' domains: each end of each domain, the
    others at their defaults, lowers, or is a ScheduleError (a combination the space re-draws),
    never another error."""
    outs = list(_workloads())[:4] if target == "cuda-sim" else list(_workloads())
    target = target if target == "cuda-sim" else recorded_target(target)
    lowered = 0
    for out in outs:
        space = Space(out, target)
        first = space.replay(space.default_values())
        for n, (p, _) in enumerate(space.parameters(first), 1):
            for value in _extremes(p.domain):
                values = first.values
                values[n] = value
                try:
                    tc.lower(space.replay(values).schedule, target=space.target.string)
                    lowered += 1
                except ScheduleError:
                    pass
    assert lowered >= 40
