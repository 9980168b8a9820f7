"""The tensor language (lm/): sentences print and parse back exactly and replay to the same
program, malformed or foreign sentences raise SentenceError, every legal decision value has
tokens (constrained decoding: test_lm_decode.py)."""

import numpy as np
import pytest
import torch
from lm_helpers import check_domain, check_round_trip, draw, where

import minitc as tc
from minitc.autotune.space import Space
from minitc.autotune.workload_key import workload_key
from minitc.errors import ScheduleError
from minitc.lm.decode import Decoder
from minitc.lm.hardware import hardware
from minitc.lm.language import (
    Hardware,
    Loc,
    Sentence,
    SentenceError,
    SentenceWriter,
    WrittenStage,
    parse,
    sentence,
    space_values,
)
from minitc.lm.model import ModelConfig, TensorLM
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.training_set import HELD_OUT, TRAINING

OPS = sorted(tc.ops.OPS)
WORKLOADS = {**TRAINING, **HELD_OUT}
SPACES_PER_OP, SAMPLES_PER_OP_SPACE, SAMPLES_PER_WORKLOAD = 3, 16, 20  # 1200 + 860 programs


# -- shared set-up ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def op_samples():
    """op name -> [(space, candidates)] for a few random small instances of the op."""
    rng = np.random.default_rng(2024)
    out = {}
    for name in OPS:
        out[name] = []
        for _ in range(SPACES_PER_OP):
            space = Space(tc.ops.OPS[name].instantiate("small", rng).output, "llvm")
            out[name].append((space, draw(space, rng, SAMPLES_PER_OP_SPACE)))
    return out


@pytest.fixture(scope="module")
def workload_samples():
    """workload name -> (space, candidates), training and held-out workloads."""
    rng = np.random.default_rng(7)
    out = {}
    for name, make in WORKLOADS.items():
        space = Space(make(), "llvm")
        out[name] = (space, draw(space, rng, SAMPLES_PER_WORKLOAD))
    return out


def _all_samples(op_samples, workload_samples):
    for groups in op_samples.values():
        yield from groups
    yield from workload_samples.values()


# -- 1. grammar round trip -------------------------------------------------------------------------


@pytest.mark.heavy
def test_op_sentences_round_trip(op_samples, hw):
    checked = 0
    for name in OPS:
        for space, candidates in op_samples[name]:
            prompt = sentence(space, hw)
            assert prompt.decisions == () and prompt.prompt().endswith("\n=>")
            assert str(prompt).strip() == prompt.prompt()
            assert parse(str(prompt)) == prompt  # a prompt alone is a sentence with no decisions
            for c in candidates:
                check_round_trip(space, c, hw)
                assert sentence(space, hw, c.decisions).prompt() == prompt.prompt()
                checked += 1
    assert checked == len(OPS) * SPACES_PER_OP * SAMPLES_PER_OP_SPACE
    # both sketches of the spaces were exercised
    sketches = {c.sketch for groups in op_samples.values() for _, cs in groups for c in cs}
    assert sketches == {"template", "generic"}


@pytest.mark.parametrize("group", ["training", "held-out"])
def test_workload_sentences_round_trip(workload_samples, hw, group):
    names = TRAINING if group == "training" else HELD_OUT
    for name in names:
        space, candidates = workload_samples[name]
        for c in candidates:
            check_round_trip(space, c, hw)


def test_prompt_shows_the_hand_templates_program(workload_samples, hw, tok):
    with_template = 0
    for name, (space, _) in workload_samples.items():
        prompt = sentence(space, hw)
        if "template" not in space.sketches:
            assert prompt.defaults == () and "\ndefault " not in prompt.prompt()
            continue
        with_template += 1
        template = sentence(space, hw, space.replay(space.default_values()).decisions)
        assert prompt.defaults == template.decisions, name  # what tc.build runs, as decisions
        assert "\ndefault sketch = template ; " in prompt.prompt()
        assert (
            space_values(space, Sentence(prompt.stages, hw, prompt.sketches, prompt.defaults)) == space.default_values()
        )
        # a vocabulary from before the `default` keyword gets the prompt it was trained on
        old = Tokenizer([t for t in tok.vocab if t != "default"])
        assert "default" not in old.prompt_text(prompt) and old.unk not in old.prompt_ids(prompt)
        assert tok.prompt_text(prompt) == prompt.prompt() and tok.unk not in tok.prompt_ids(prompt)
    assert with_template >= len(workload_samples) // 2


def test_sentences_do_not_depend_on_user_names(hw):
    """The same computation with other tensor and axis names writes the same sentences."""

    def one():
        A, B = tc.placeholder((24, 40), name="A"), tc.placeholder((40, 16), name="B")
        k = tc.reduce_axis(40, name="k")
        C = tc.compute((24, 16), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
        return Space(tc.compute((24, 16), lambda i, j: C[i, j] * 2.0, name="C_scaled"), "llvm")

    def two():
        X, W = tc.placeholder((24, 40), name="X"), tc.placeholder((40, 16), name="W")
        r = tc.reduce_axis(40, name="r")
        P = tc.compute((24, 16), lambda p, q: tc.sum(X[p, r] * W[r, q], axis=r), name="P")
        return Space(tc.compute((24, 16), lambda m, n: P[m, n] * 2.0, name="out"), "llvm")

    first, second = one(), two()
    rng = np.random.default_rng(1)
    for c in draw(first, rng, 40):
        text = str(sentence(first, hw, c.decisions))
        again = second.replay(space_values(second, parse(text)))
        assert str(sentence(second, hw, again.decisions)) == text
        words = set(text.replace("[", " ").replace("]", " ").replace(".", " ").split())
        assert not words & {"A", "B", "C", "C_scaled", "k", "i", "j"}, text


@pytest.mark.parametrize("cpu", ["znver2", "skylake-avx512", "x86-64-v3", "icelake-server"])
def test_hardware_line_round_trips_for_llvm_cpu_names(cpu):
    hw = Hardware("llvm", cpu, 16, 16, 48, 2048, 32768, 3300, 120)
    s = Sentence((WrittenStage("input", "float32", (4, 8)),), hw, (("generic", ()),), (("sketch", "generic"),))
    assert parse(str(s)) == s
    assert str(parse(str(s))) == str(s)


# -- 2. errors -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matmul_text(workload_samples, hw):
    space, candidates = workload_samples["matmul-256"]
    c = next(c for c in candidates if c.sketch == "template")
    return str(sentence(space, hw, c.decisions))


@pytest.mark.parametrize(
    "case, edit, at, got, expected",
    [
        (
            "truncated",
            lambda t: t[: t.index("sketch = ") + len("sketch = ")],
            None,
            "end of text",
            ["'('", "int", "loc", "word", "'true'"],
        ),
        (
            "bad value",
            lambda t: t.replace("sketch = template", "sketch = 3.5"),
            lambda t: t.index("3.5") + 1,
            "'.'",
            ["';'"],
        ),
        ("bad keyword", lambda t: t.replace(" cores ", " kores "), lambda t: t.index("kores"), "'kores'", ["'cores'"]),
        ("missing ;", lambda t: t.rstrip(" ;"), None, "end of text", ["';'"]),
        (
            "bad dtype",
            lambda t: t.replace("input float32", "input float16", 1),
            lambda t: t.index("float16"),
            "'float16'",
            ["dtype"],
        ),
        (
            "empty default",
            lambda t: t[: t.index("default ") + 7] + t[t.index("\n=>") :],
            lambda t: t.index("=>"),
            "'=>'",
            ["label"],
        ),
    ],
)
def test_malformed_sentences_name_line_column_and_expected_tokens(matmul_text, case, edit, at, got, expected):
    bad = edit(matmul_text)
    assert bad != matmul_text
    with pytest.raises(SentenceError) as info:
        parse(bad)
    message = str(info.value)
    if at is None:  # at the end of the text: lark names the last token's line
        assert f"malformed sentence at line {bad.count(chr(10)) + 1}, column" in message, message
    else:  # at the first character where the text stops being a sentence
        assert f"malformed sentence at {where(bad, at(bad))}" in message, message
    assert f"got {got}," in message, message
    listed = message.split("expected one of: ")[1].split(", ")
    assert all(e in listed for e in expected), message
    assert not any(e.startswith("__") or e.isupper() for e in listed), message  # no lark internals


def test_sentence_of_another_workload_is_rejected(workload_samples, hw):
    mm_space, mm = workload_samples["matmul-256"]
    conv_space, conv = workload_samples["resnet18-c3"]
    for a_space, a, b_space in [(mm_space, mm, conv_space), (conv_space, conv, mm_space)]:
        b_prompt = sentence(b_space, hw)
        for c in a[:5]:
            s = parse(str(sentence(a_space, hw, c.decisions)))
            with pytest.raises(SentenceError, match="applies only to the workload it was written for"):
                space_values(b_space, s)
            # with the right workload and space lines, the decisions themselves are checked
            relabelled = Sentence(b_prompt.stages, hw, b_prompt.sketches, s.decisions)
            with pytest.raises(SentenceError, match="where the space asks for"):
                space_values(b_space, relabelled)


def _generic_with_location(space, rng):
    for _ in range(200):
        try:
            c = space.sample(rng, sketch="generic")
        except ScheduleError:
            continue
        if any(d.kind == "location" for d in c.decisions):
            return c
    raise AssertionError("no generic candidate with a compute location")


def test_out_of_range_and_mistyped_values_are_rejected(workload_samples, hw):
    space, _ = workload_samples["resnet18-c3"]
    c = _generic_with_location(space, np.random.default_rng(3))
    s = sentence(space, hw, c.decisions)
    n = next(i for i, d in enumerate(c.decisions) if d.kind == "location")
    assert space_values(space, parse(str(s))) == c.values

    def with_value(value) -> Sentence:
        decisions = list(s.decisions)
        decisions[n] = (decisions[n][0], value)
        return parse(str(Sentence(s.stages, s.hardware, s.sketches, tuple(decisions))))

    with pytest.raises(SentenceError, match="legal locations"):
        space_values(space, with_value(Loc(99)))
    with pytest.raises(SentenceError, match="not one of its legal values"):
        space_values(space, with_value(c.decisions[n].value))  # a loop by its name, not `@N`
    with pytest.raises(SentenceError, match="not one of its legal values"):
        space_values(space, with_value(3))

    tile = next(i for i, d in enumerate(c.decisions) if d.kind == "tile")
    decisions = list(s.decisions)
    decisions[tile] = (decisions[tile][0], (5, 5, 5, 5))
    with pytest.raises(SentenceError, match="not one of its legal values"):
        space_values(space, Sentence(s.stages, s.hardware, s.sketches, tuple(decisions)))
    # too few and too many decisions
    with pytest.raises(SentenceError, match="asks for more"):
        space_values(space, Sentence(s.stages, s.hardware, s.sketches, s.decisions[:-1]))
    with pytest.raises(SentenceError, match="the program takes"):
        space_values(space, Sentence(s.stages, s.hardware, s.sketches, s.decisions + (("s3.unroll", 16),)))


def test_bool_is_not_an_int_decision(workload_samples, hw):
    """`s2.ku = true` must not replay as unroll factor 1 (True == 1 in Python)."""
    space, candidates = workload_samples["matmul-256"]
    c = next(c for c in candidates if c.sketch == "template")
    s = sentence(space, hw, c.decisions)
    n = next(i for i, (label, _) in enumerate(s.decisions) if label.endswith(".ku"))
    assert 1 in c.decisions[n].domain
    decisions = list(s.decisions)
    decisions[n] = (decisions[n][0], True)
    with pytest.raises(SentenceError, match="true is not one of its legal values"):
        space_values(space, parse(str(Sentence(s.stages, s.hardware, s.sketches, tuple(decisions)))))


# -- 3. tokenizer coverage -------------------------------------------------------------------------


_TINY_PROMPT = (
    "workload stage input float32 [1] hardware llvm znver2 cores 1 simd 8 l1 1 l2 1 l3 1 "
    "gflops 1 gbps 1 space generic =>\n"
)


def test_every_legal_value_of_every_slot_has_tokens(op_samples, workload_samples, tok):
    domains = {}
    for _, candidates in _all_samples(op_samples, workload_samples):
        for c in candidates:
            for d in c.decisions:
                domains.setdefault((d.kind, d.domain), None)
    assert {kind for kind, _ in domains} == {"tile", "categorical", "location"}
    checked = sum(check_domain(tok, kind, domain, _TINY_PROMPT) for kind, domain in domains)
    assert checked > 1000


def test_labels_and_prompts_have_no_unknown_tokens(op_samples, workload_samples, tok, hw):
    for space, candidates in _all_samples(op_samples, workload_samples):
        write = SentenceWriter(space, hw)  # sentence(space, hw, d) is SentenceWriter(space, hw)(d), set up once
        prompt = tok.prompt_ids(write())
        assert tok.unk not in prompt, write().prompt()
        assert prompt[0] == tok.bos
        for c in candidates:
            s = write(c.decisions)
            for label, _ in s.decisions:
                assert tok.unk not in tok.label_ids(label), label


def test_training_and_held_out_prompts_tokenize(workload_samples, tok, hw):
    for name in WORKLOADS:
        space, _ = workload_samples[name]
        s = sentence(space, hw)
        tokens = tok.text_tokens(s.prompt())
        assert "<unk>" not in tokens, (name, [w for w in s.prompt().split() if "<unk>" in tok.text_tokens(w)])
        assert tokens[-1] == "=>"


def test_encode_masks_exactly_the_value_tokens(op_samples, workload_samples, tok, hw):
    checked = 0
    for space, candidates in _all_samples(op_samples, workload_samples):
        write = SentenceWriter(space, hw)
        for c in candidates[:5]:
            s = write(c.decisions)
            ids, mask = tok.encode(s)
            assert len(ids) == len(mask) and ids[0] == tok.bos and ids[-1] == tok.eos
            assert tok.unk not in ids
            values = [tok.value_ids(v) for v in s.values]
            assert sum(mask) == sum(len(v) for v in values)
            assert [i for i, m in zip(ids, mask) if m] == [t for v in values for t in v]
            assert ids[: len(tok.prompt_ids(s))] == tok.prompt_ids(s) and not any(mask[: len(tok.prompt_ids(s))])
            checked += 1
    assert checked > 300


def test_tokenizer_rejects_values_it_cannot_write(tok):
    from minitc.lm.tokenizer import TokenizerError

    with pytest.raises(TokenizerError):
        tok.value_tokens(-3)
    with pytest.raises(TokenizerError):
        tok.value_tokens(2.5)
    with pytest.raises(TokenizerError):
        tok.value_tokens("no_such_word")
    assert tok.value_tokens((8, 1, 64, 1)) == ["(", "8", "1", "6", "##4", "1", ")", ";"]


# -- 4. held-out workloads -------------------------------------------------------------------------


def test_held_out_workloads_are_unseen_in_training(workload_samples, hw):
    training = {workload_key(TRAINING[name]()) for name in TRAINING}
    held_out = {workload_key(HELD_OUT[name]()) for name in HELD_OUT}
    assert len(training) == len(TRAINING) and len(held_out) == len(HELD_OUT)  # no duplicates
    assert not training & held_out
    assert not set(TRAINING) & set(HELD_OUT)
    # nor does the model ever see a held-out prompt during training
    prompts = {name: sentence(workload_samples[name][0], hw).prompt() for name in WORKLOADS}
    assert not {prompts[n] for n in TRAINING} & {prompts[n] for n in HELD_OUT}


def _winograd_space():
    X = tc.placeholder((1, 2, 14, 14, 16), "float32", name="X")
    U = tc.placeholder((4, 4, 2, 2, 16, 16), "float32", name="U")
    return Space(tc.ops.conv2d_winograd_nchwc(X, U, padding=1), "llvm -mcpu=znver4 -num-cores=2")


def test_a_stage_with_dozens_of_reads_lists_its_distinct_ones_and_at_most_eight(hw):
    """The Winograd output transform reads 36 values of its products (16 distinct); every stage
    of the dataset has at most 5 reads, and keeps them all, repeats included."""
    from minitc.lm.describe import MAX_READS

    stages = sentence(_winograd_space(), hw).stages
    (output,) = [st for st in stages if st.kind == "conv2d_winograd_nchwc"]
    assert len(output.reads) == MAX_READS == len(set(output.reads))
    x = tc.placeholder((8, 8), "float32", name="x")
    twice = tc.compute((8, 8), lambda i, j: x[i, j] * x[i, j] + x[i, j], name="twice")
    (st,) = [st for st in sentence(Space(twice, "llvm"), hw).stages if st.kind != "input"]
    assert len(st.reads) == 3  # repeats kept below the cap


def test_programs_longer_than_the_models_context_are_dropped_with_a_warning(tok, hw):
    from minitc.lm.decode import ContextWarning

    torch.manual_seed(0)
    space = _winograd_space()
    prompt = len(Decoder(TensorLM(ModelConfig(vocab_size=len(tok), max_len=1024)), tok, space, hw).prompt)
    for max_len, expect_some in ((prompt + 30, True), (prompt, False)):
        model = TensorLM(ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64, max_len=max_len))
        with pytest.warns(ContextWarning, match="did not fit the language model's context"):
            candidates, failures = Decoder(model.eval(), tok, space, hw).generate(12, np.random.default_rng(0))
        assert len(candidates) + failures == 12 and failures > 0
        assert bool(candidates) == expect_some  # the template sketch's two decisions fit in 30 tokens
        for c in candidates:
            assert space.replay(c.values).key == c.key


def test_a_sentence_older_than_a_slot_replays_as_the_program_it_measured(monkeypatch):
    """A parameter's `before`: a GEMM space that grew the prefetch slot `l2` reads a sentence written
    before it (its space line lacks the slot) as the same program, prefetch off; a space line
    missing any other slot is still another space's."""
    from minitc.templates import gemm_prefetch

    out = tc.ops.matmul(tc.placeholder((64, 48), name="A"), tc.placeholder((48, 64), name="B"))
    target = "llvm -mcpu=x86-64-v3 -num-cores=2"
    line = hardware(target, measured={"gflops": 100.0, "gbps": 20.0})
    monkeypatch.setattr(gemm_prefetch, "IN_DESIGN_SPACE", False)
    before = Space(out, target)
    programs = [before.replay(before.default_values())] + [before.sample(np.random.default_rng(n)) for n in range(4)]
    texts = [str(sentence(before, line, c.decisions)) for c in programs]
    space_line = next(line for line in texts[0].splitlines() if line.startswith("space "))
    assert "matmul mr" in space_line and " l2" not in space_line
    monkeypatch.setattr(gemm_prefetch, "IN_DESIGN_SPACE", True)
    after = Space(out, target)
    for c, text in zip(programs, texts):
        if c.values[0] != "template":
            continue
        values = space_values(after, parse(text))
        assert len(values) == len(c.values) + 1 and after.replay(values).trace == c.trace
    template_text = texts[0]
    with pytest.raises(SentenceError, match="space line .* is not this space's"):
        space_values(after, parse(template_text.replace(" mr ", " ", 1)))
