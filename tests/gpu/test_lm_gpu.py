"""GPU sentences of the tensor language (lm/): the GPU hardware line, sentences of the CUDA design
space (GPU templates and GPU rules) that print, parse and replay exactly, a vocabulary that
writes every legal GPU decision with no `<unk>`, and a shipped CPU model that still loads with
the same token ids and refuses GPU spaces instead of writing nonsense. No GPU is needed."""

import dataclasses

import numpy as np
import pytest
import torch
from lm_helpers import check_domain, check_round_trip, draw, one_torch_thread, where

import minitc as tc
from minitc.autotune import gpu_space_rules
from minitc.autotune.space import Space
from minitc.lm.decode import Decoder
from minitc.lm.hardware import ARCH_SMS, gpu_hardware, hardware
from minitc.lm.language import (
    GpuHardware,
    Hardware,
    Sentence,
    SentenceError,
    SentenceWriter,
    WrittenStage,
    parse,
    sentence,
    space_values,
)
from minitc.lm.model import LMError, ModelConfig, TensorLM
from minitc.lm.pipeline import SHIPPED, load_model
from minitc.lm.tokenizer import (
    CUDA_ARCHS,
    GEMV_TAGS,
    GPU_KEYWORDS,
    IMPLICIT_GEMM_TAGS,
    LATER_KEYWORDS,
    LATER_PARAMS,
    LATER_TEMPLATES,
    NEWER_PARAMS,
    WINOGRAD_TAGS,
    Tokenizer,
    blocked_tokens,
    cpu_vocab,
    default_vocab,
    gpu_tokens,
    schema_tokens,
)
from minitc.templates.gpu import GPU_PARAMS, load_gpu_templates
from minitc.templates.params import OneOf

OPS = sorted(tc.ops.OPS)
SPACES_PER_OP, SAMPLES_PER_OP_SPACE = 2, 10  # 500 programs over every op
SAMPLES_PER_WORKLOAD = 60  # 300 round trips of the five named workloads
H100 = "hardware cuda sm_90 sms 132 warp 32 smem 48 regs 64 threads 1024 gflops 0 gbps 0"
_TINY_PROMPT = f"workload stage input float32 [1] {H100} space generic =>\n"


def _ph(*shapes):
    return [tc.placeholder(s, "float32", name=n) for s, n in zip(shapes, "ABCDEFGH")]


def _dense_bias_gelu():
    X, W, b = _ph((24, 40), (32, 40), (32,))
    return tc.ops.dense(X, W, b, activation="gelu")


def _conv_padded():
    X, W = _ph((1, 8, 10, 10), (16, 8, 3, 3))
    return tc.ops.conv2d(X, W, stride=1, padding=1)


WORKLOADS = {
    "matmul": lambda: tc.ops.matmul(*_ph((48, 40), (40, 32))),
    "dense-bias-gelu": _dense_bias_gelu,
    "conv2d-pad": _conv_padded,
    "softmax": lambda: tc.ops.softmax(*_ph((12, 96))),
    "batch_matmul": lambda: tc.ops.batch_matmul(*_ph((3, 16, 24), (3, 24, 20))),
}


@pytest.fixture(scope="module")
def hw():
    return hardware("cuda")  # conftest.py's `tok`


@pytest.fixture(scope="module")
def workload_samples():
    rng = np.random.default_rng(90)
    out = {}
    for name, make in WORKLOADS.items():
        space = Space(make(), "cuda")
        out[name] = (space, draw(space, rng, SAMPLES_PER_WORKLOAD))
    return out


@pytest.fixture(scope="module")
def op_samples():
    rng = np.random.default_rng(2025)
    out = []
    for name in OPS:
        for _ in range(SPACES_PER_OP):
            space = Space(tc.ops.OPS[name].instantiate("small", rng).output, "cuda-sim")
            out.append((space, draw(space, rng, SAMPLES_PER_OP_SPACE)))
    return out


# -- 1. the hardware line --------------------------------------------------------------------------


def test_gpu_hardware_line_without_a_gpu(monkeypatch):
    import minitc.backends.cuda.device as device
    from minitc.target.gpu import CudaTarget, parse_cuda_target

    def no_gpu():
        raise AssertionError("the hardware line must not query a GPU")

    monkeypatch.setattr(device, "current_device", no_gpu)
    assert str(hardware("cuda")) == H100  # no queried device: an H100's SM count
    assert str(hardware("cuda-sim")) == H100  # the simulator reads as the GPU it simulates
    assert str(hardware(parse_cuda_target("cuda"))) == H100
    assert hardware("cuda -arch=sm_80").sms == ARCH_SMS["sm_80"] == 108
    assert hardware("cuda -arch=sm_86").sms == 0  # no single usual part: unknown
    queried = CudaTarget("cuda", "sm_89", device_name="NVIDIA L4", sm_count=58)
    assert str(hardware(queried)) == "hardware cuda sm_89 sms 58 warp 32 smem 48 regs 64 threads 1024 gflops 0 gbps 0"
    measured = gpu_hardware("cuda", measured={"gflops": 51234.5, "gbps": 3349.9})
    assert (measured.gflops, measured.gbps) == (51000, 3300)  # 2 significant digits, like the CPU's
    # a CPU target still gets the CPU line
    assert isinstance(hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0}), Hardware)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_90a", "sm_37", "sm_999a"])
def test_gpu_hardware_line_round_trips_and_tokenizes(tok, arch):
    line = GpuHardware("cuda", arch, 132, 32, 48, 64, 1024, 67000, 3300)
    s = Sentence((WrittenStage("input", "float32", (4, 8)),), line, (("generic", ()),), (("sketch", "generic"),))
    assert parse(str(s)) == s and isinstance(parse(str(s)).hardware, GpuHardware)
    assert str(parse(str(s))) == str(s)
    tokens = tok.text_tokens(str(line))
    assert "<unk>" not in tokens, tokens
    assert all(k in tokens for k in GPU_KEYWORDS)
    if arch in CUDA_ARCHS:
        assert arch in tokens
    else:  # an architecture the list does not name is spelled out
        assert tokens[2:5] == ["sm_", arch[3], f"##{arch[4]}"]


def test_writer_needs_the_line_of_its_space(hw):
    cpu_hw = hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})
    mm = WORKLOADS["matmul"]()
    with pytest.raises(SentenceError, match="GPU design space .* needs a GPU hardware line"):
        SentenceWriter(Space(mm, "cuda"), cpu_hw)
    with pytest.raises(SentenceError, match="CPU design space .* needs a CPU hardware line"):
        SentenceWriter(Space(mm, "llvm"), hw)


# -- 2. round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_gpu_sentences_round_trip(workload_samples, hw, name):
    space, candidates = workload_samples[name]
    assert space.gpu
    prompt = sentence(space, hw)
    assert prompt.hardware == hw and prompt.prompt().endswith("\n=>")
    assert parse(str(prompt)) == prompt
    for c in candidates:
        check_round_trip(space, c, hw)
        assert sentence(space, hw, c.decisions).prompt() == prompt.prompt()
    sketches = {c.sketch for c in candidates}
    assert sketches == set(space.sketches), sketches  # the GPU templates and the GPU rules


def test_gpu_skeletons_and_labels(workload_samples, hw):
    """The skeletons name the GPU templates' parameters; the labels name the GPU rules' slots."""
    skeletons = {name: sentence(space, hw).sketches for name, (space, _) in workload_samples.items()}
    assert skeletons["matmul"] == (("template", ("matmul", "bm", "bn", "tm", "tn", "bk", "shared")), ("generic", ()))
    assert skeletons["conv2d-pad"] == (
        ("template", ("conv2d", "kt", "vk", "wt", "vw", "bc", "shared", "oht", "ohb")),
        ("generic", ()),
    )
    assert skeletons["softmax"] == (("template", ("softmax", "threads", "rows")), ("generic", ()))
    slots = set()
    for space, candidates in workload_samples.values():
        for c in candidates:
            slots |= {label.rsplit(".", 1)[-1] for label, _ in sentence(space, hw, c.decisions).decisions}
    assert {"threads", "tile", "step", "inner", "unroll", "shared", "block", "inline", "bm", "kt"} <= slots, slots


def test_op_gpu_sentences_round_trip(op_samples, hw):
    for space, candidates in op_samples:
        for c in candidates:
            check_round_trip(space, c, hw)


def test_gpu_sentence_is_not_a_cpu_program(workload_samples, hw):
    """A GPU program does not replay in the CPU space of the same workload (or the reverse)."""
    gpu_space, candidates = workload_samples["matmul"]
    cpu_space = Space(gpu_space.outputs, "llvm")
    cpu_hw = hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})
    for c in candidates[:10]:
        with pytest.raises(SentenceError):
            space_values(cpu_space, parse(str(sentence(gpu_space, hw, c.decisions))))
    for c in draw(cpu_space, np.random.default_rng(0), 10):
        with pytest.raises(SentenceError):
            space_values(gpu_space, parse(str(sentence(cpu_space, cpu_hw, c.decisions))))


# -- 3. errors -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generic_text(workload_samples, hw):
    space, candidates = workload_samples["matmul"]
    c = next(c for c in candidates if c.sketch == "generic")
    return str(sentence(space, hw, c.decisions))


@pytest.mark.parametrize(
    "case, edit, at, got, expected",
    [
        ("bad keyword", lambda t: t.replace(" sms ", " sns "), lambda t: t.index("sns"), "'sns'", ["'sms'", "'cores'"]),
        ("bad count", lambda t: t.replace("warp 32", "warp x"), lambda t: t.index("warp x") + 5, "'x'", ["int"]),
        (
            "threads missing",
            lambda t: t.replace(" threads 1024", ""),
            lambda t: t.index("gflops"),
            "'gflops'",
            ["'threads'"],
        ),
        (
            "truncated",
            lambda t: t[: t.index(".threads = ") + len(".threads = ")],
            None,
            "end of text",
            ["int", "'true'", "'('"],
        ),
        (
            "bad value",
            lambda t: t.replace("sketch = generic", "sketch = 0.5"),
            lambda t: t.index("0.5") + 1,
            "'.'",
            ["';'"],
        ),
    ],
)
def test_malformed_gpu_sentences_name_position_and_expected_tokens(generic_text, case, edit, at, got, expected):
    bad = edit(generic_text)
    assert bad != generic_text
    with pytest.raises(SentenceError) as info:
        parse(bad)
    message = str(info.value)
    if at is None:
        assert f"malformed sentence at line {bad.count(chr(10)) + 1}, column" in message, message
    else:
        assert f"malformed sentence at {where(bad, at(bad))}" in message, message
    assert f"got {got}," in message, message
    listed = message.split("expected one of: ")[1].split(", ")
    assert all(e in listed for e in expected), message
    assert not any(e.startswith("__") or e.isupper() for e in listed), message


def test_out_of_range_gpu_values_are_rejected(workload_samples, hw):
    space, candidates = workload_samples["matmul"]
    c = next(c for c in candidates if c.sketch == "generic")
    s = sentence(space, hw, c.decisions)
    n = next(i for i, (label, _) in enumerate(s.decisions) if label.endswith(".threads"))
    for bad in (3, True, 4096):
        decisions = list(s.decisions)
        decisions[n] = (decisions[n][0], bad)
        with pytest.raises(SentenceError, match="not one of its legal values"):
            space_values(space, parse(str(Sentence(s.stages, s.hardware, s.sketches, tuple(decisions)))))


# -- 4. the vocabulary -----------------------------------------------------------------------------


def test_every_legal_gpu_value_and_label_has_tokens(op_samples, workload_samples, tok, hw):
    domains, checked = {}, 0
    for space, candidates in op_samples + list(workload_samples.values()):
        prompt = sentence(space, hw)
        assert tok.missing_tokens(prompt.prompt()) == [], prompt.prompt()
        for c in candidates:
            s = sentence(space, hw, c.decisions)
            ids, mask = tok.encode(s)
            assert tok.unk not in ids, str(s)
            assert sum(mask) == sum(len(tok.value_ids(v)) for v in s.values)
            for d in c.decisions:
                domains.setdefault(d.domain, None)
            checked += 1
    assert checked == len(OPS) * SPACES_PER_OP * SAMPLES_PER_OP_SPACE + len(WORKLOADS) * SAMPLES_PER_WORKLOAD
    # and every value the GPU rules and templates can offer, sampled or not
    for values in (
        gpu_space_rules.THREAD_FACTORS,
        gpu_space_rules.REGISTER_FACTORS,
        gpu_space_rules.BLOCK_SIZES,
        gpu_space_rules.REDUCE_STEPS,
        (True, False),
    ):
        domains.setdefault(tuple(values), None)
    load_gpu_templates()
    for params in GPU_PARAMS.values():
        for p in params:
            domains.setdefault(p.domain.values if isinstance(p.domain, OneOf) else p.candidates, None)
    assert len(domains) > 20 and sum(check_domain(tok, "categorical", domain, _TINY_PROMPT) for domain in domains) >= 80


def test_gpu_tokens_are_appended_after_the_cpu_vocabulary(tok):
    cpu = cpu_vocab()
    later = LATER_KEYWORDS + blocked_tokens() + IMPLICIT_GEMM_TAGS + LATER_PARAMS + WINOGRAD_TAGS + GEMV_TAGS
    later += LATER_TEMPLATES + NEWER_PARAMS
    assert not schema_tokens(cpu + gpu_tokens() + later), "freeze new words into LATER_PARAMS or LATER_TEMPLATES"
    assert tok.vocab == default_vocab() == cpu + gpu_tokens() + later
    assert blocked_tokens() == [
        "conv2d_nchwc",
        "depthwise_conv2d_nchwc",
        "max_pool2d_nchwc",
        "avg_pool2d_nchwc",
        "pixels",
    ]
    assert tok.reads_defaults() and not Tokenizer(cpu + gpu_tokens()).reads_defaults()
    assert len(cpu) == 441 and not set(gpu_tokens()) & set(cpu)
    assert tok.writes_gpu() and not Tokenizer(cpu).writes_gpu()
    assert {"sms", "warp", "smem", "regs", "threads", "sm_90", "bm", "kt", "shared", "step", "inner", "block"} <= set(
        gpu_tokens()
    )


# -- 5. the shipped CPU model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    return load_model(SHIPPED)


def test_shipped_checkpoint_keeps_its_token_ids(shipped, tok):
    model, shipped_tok, meta = shipped
    assert shipped_tok.vocab == cpu_vocab() == tok.vocab[: len(shipped_tok)]
    assert model.cfg.vocab_size == len(shipped_tok) == 441
    assert not shipped_tok.writes_gpu()
    # a CPU sentence has the same ids under the shipped and the extended vocabulary, but for the
    # `default` line, which the shipped vocabulary's prompts leave out
    space = Space(WORKLOADS["conv2d-pad"](), "llvm")
    cpu_hw = hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})
    for c in draw(space, np.random.default_rng(4), 8):
        s = sentence(space, cpu_hw, c.decisions)
        assert s.defaults and shipped_tok.encode(s) == tok.encode(dataclasses.replace(s, defaults=()))
        assert shipped_tok.unk not in shipped_tok.encode(s)[0]


def test_shipped_model_still_decodes_cpu_programs(shipped):
    model, shipped_tok, _ = shipped
    with one_torch_thread():
        space = Space(WORKLOADS["matmul"](), "llvm")
        cpu_hw = hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})
        candidates, failures = Decoder(model, shipped_tok, space, cpu_hw).generate(6, np.random.default_rng(0))
    assert failures == 0 and len(candidates) == 6
    for c in candidates:
        assert space.replay(c.values).key == c.key


def test_shipped_model_refuses_gpu_spaces(shipped, hw):
    from minitc.lm.strategy import tlm_search, trained_on_gpu

    model, shipped_tok, meta = shipped
    space = Space(WORKLOADS["matmul"](), "cuda")
    with pytest.raises(LMError, match="cannot write GPU sentences .*sms warp smem regs threads"):
        Decoder(model, shipped_tok, space, hw)
    assert not trained_on_gpu(meta)
    with pytest.raises(LMError, match="never on a GPU's sentences"):
        tlm_search(space, np.random.default_rng(0), lm=SHIPPED)
    assert trained_on_gpu({"hardware": "hardware llvm znver2 cores 2", "history": [{"hardware": H100}]})


def test_a_gpu_vocabulary_model_decodes_legal_gpu_programs(workload_samples, tok, hw):
    """Constrained decoding over the GPU design space (an untrained model of the extended
    vocabulary): every program is legal by construction (the GPU rules draw within the thread and
    register budgets, the templates make every combination legal), replays, and writes a
    sentence that parses back."""
    torch.manual_seed(0)
    with one_torch_thread():
        model = TensorLM(
            ModelConfig(vocab_size=len(tok), d_model=32, n_layers=1, n_heads=2, d_ff=64, max_len=1024)
        ).eval()
        rng = np.random.default_rng(3)
        for name in ("matmul", "conv2d-pad", "softmax"):
            space, _ = workload_samples[name]
            candidates, failures = Decoder(model, tok, space, hw).generate(16, rng)
            assert len(candidates) == 16 and failures == 0, (name, failures)
            for c in candidates:
                assert space.replay(c.values).key == c.key
                check_round_trip(space, c, hw)
