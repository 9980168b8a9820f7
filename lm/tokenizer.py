"""Tokens of the tensor language, from a closed vocabulary derived from the grammar and the
templates' declared parameters (minitc/templates/params.py), so that every legal decision of
every workload can be written.

Numbers are written digit by digit, with a different token for a number's first digit (`7`)
and its later digits (`##7`): `(8 1 64 1)` is `( 8 1 6 ##4 1 )`, so any tile factor, extent or
size is expressible and no separator is needed. Every decision value ends with `;`, which is
how the model says a number is complete.

    tok = Tokenizer.default()
    ids, mask = tok.encode(sentence)       # mask: the decision-value tokens (trained on)
    tok.value_ids(value)                   # one value, as the decoder writes it

The vocabulary only grows at its end: the CPU vocabulary of the first shipped model (441
tokens: lm/checkpoints/cpu.pt stores it) comes first, in its order, then the GPU tokens (the GPU
hardware line, CUDA architectures, GPU template parameters and GPU rule slots). A checkpoint
always decodes with the vocabulary it stores, so its token ids never move; a checkpoint whose
vocabulary lacks the GPU tokens cannot write GPU sentences (`missing_tokens` says which), and
the decoder refuses GPU spaces for it. Then `default`, the keyword of the prompt line that
shows the hand template's own program: a vocabulary without it (the first models') is given
prompts without that line, as those models were trained. Last, the channel-blocked operators'
tags and template parameters (`conv2d_nchwc`, `pixels`), and the implicit-GEMM convolution's
tags (`conv2d_gemm`, `im2col`), later template parameters (`streams`) and the Winograd
convolution's tags: an older vocabulary reads them as `<unk>`, and the decoder still writes
only legal values for them. The parameters' words (names, named values) come from the
templates' schemas, and every template's tag is a word (a space line names its template); a word that a
later template or parameter brings is appended at the very end (`schema_tokens`), until it is
frozen into LATER_PARAMS or LATER_TEMPLATES (tests/gpu/test_lm_gpu.py asks for that), so that no
later schema moves it.
"""

from __future__ import annotations

import re

from minitc.errors import MinitcError
from minitc.expr import BINARY_OPS, COMPARE_OPS, INTRINSICS
from minitc.lm.language import Loc, Sentence
from minitc.target.cpu import CPU_FEATURES
from minitc.templates import PARAMS, TEMPLATES, load_templates
from minitc.templates.gpu import GPU_PARAMS, GPU_TEMPLATES, load_gpu_templates
from minitc.templates.params import OneOf

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
KEYWORDS = (
    "workload stage input reduce read ops hardware cores simd l1 l2 l3 gflops gbps space "
    "| : => = ; ( ) [ ] true false null"
).split()
DTYPES = ["float32", "float64", "int32", "int64"]
DIGITS = [str(d) for d in range(10)] + [f"##{d}" for d in range(10)]
INDEX = ["*", "+", "-", "?"]
MAX_STAGES, MAX_AXES, MAX_LOCATIONS = 64, 32, 128
# Stage kinds: the operator tags of tc.ops (and untagged computations).
TAGS = (
    "compute input pad matmul batch_matmul dense dense_epilogue conv2d depthwise_conv2d max_pool2d "
    "avg_pool2d softmax softmax_max softmax_exp softmax_sum layer_norm layer_norm_mean layer_norm_var "
    "elementwise reduce"
).split()
TARGETS = ["llvm", "cuda"]
# Slot names of the generic rules (autotune/space_rules.py) and label pieces (describe.decision_label).
RULE_SLOTS = ["sketch", "inline", "cache_write", "parallel", "unroll", "location", "cache", "local"]
# The sketch names and the template words of the first vocabulary, in its order (frozen: the
# shipped lm/checkpoints/cpu.pt was trained with these ids); the schemas' other words follow.
FIRST_TEMPLATE_WORDS = (
    "template generic mr nr nc ku kc mc kb ohb owv lanes rcb kgroups oht vector rows chunk unroll_window pack_b "
    "pack_a auto n m batch none tile root"
).split()

# -- GPU tokens (appended after the CPU vocabulary) ------------------------------------------------
GPU_KEYWORDS = ["sms", "warp", "smem", "regs", "threads"]  # the GPU hardware line
# CUDA architectures, Maxwell to Blackwell; another `sm_<N>` is written `sm_ N` (digits), `a` suffix `##a`.
CUDA_ARCHS = [f"sm_{n}" for n in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)]
CUDA_ARCHS += ["sm_90a", "sm_100a", "sm_101a", "sm_103a", "sm_120a", "sm_121a", "sm_", "##a"]
# Slot names of the GPU rules (autotune/gpu_space_rules.py): `s2.a0.threads`, `s2.local.a2.step`, `s4.block`, ...
GPU_RULE_SLOTS = ["threads", "tile", "step", "inner", "unroll", "shared", "block", "inline"]
# Tokens added after the GPU ones: the keyword of the template-defaults line of a prompt.
LATER_KEYWORDS = ["default"]
# Then the operators on channel-blocked data (minitc/ops/nchwc.py) and the parameter their
# templates added then (rows_task, added since, is one of NEWER_PARAMS).
BLOCKED_TAGS = ["conv2d_nchwc", "depthwise_conv2d_nchwc", "max_pool2d_nchwc", "avg_pool2d_nchwc"]
BLOCKED_PARAMS = ["pixels"]
# Then the stages of the implicit-GEMM convolution (tc.ops.conv2d_gemm; its templates' parameters are the GEMMs').
IMPLICIT_GEMM_TAGS = ["conv2d_gemm", "im2col"]
# Then template parameters added since (the reduce template's rows read side by side).
LATER_PARAMS = ["streams"]
# Then the stages of the Winograd convolutions (tc.ops.conv2d_winograd_nchwc, then the GPU's
# tc.ops.conv2d_winograd; their templates' parameters are already words).
WINOGRAD_TAGS = ["conv2d_winograd_nchwc", "winograd_input", "winograd_gemm", "conv2d_winograd", "winograd_patch"]
# Then the templates a dense of a few rows takes (minitc/templates/gemv.py; their parameters are already words).
GEMV_TAGS = ["gemv", "gemv_dot"]
# Then the tags of templates added since (a space line names its template: `template : matmul_epilogue mr ...`).
LATER_TEMPLATES = ["matmul_epilogue", "reduce_epilogue"]
# Then template parameters added after those (conv2d_nchwc's task order).
NEWER_PARAMS = ["rows_task"]


class TokenizerError(MinitcError):
    """A value or sentence that the vocabulary cannot write."""


def schema_words(templates: dict, schemas: dict, tags=None) -> list:
    """The words of the templates' declared parameters (their names, then the named values of
    their domains), module by module in name order (the order in which load_templates imports
    them, whatever imported some of them first), each module's templates in registration order."""
    tags = sorted(tags if tags is not None else templates, key=lambda tag: templates[tag].__module__)
    params = [p for tag in tags for p in schemas[tag]]
    values = [v for p in params if isinstance(p.domain, OneOf) for v in p.domain.values if isinstance(v, str)]
    return list(dict.fromkeys([p.name for p in params] + values))


def _gpu_design_space_words() -> list:
    """The words of the GPU templates' parameters (minitc/templates/gpu)."""
    load_gpu_templates()
    return schema_words(GPU_TEMPLATES, GPU_PARAMS)


def _cpu_names() -> list:

    return sorted(CPU_FEATURES)


def cpu_vocab() -> list:
    """The vocabulary of CPU sentences (that of the shipped lm/checkpoints/cpu.pt), in its order."""
    words = SPECIAL + KEYWORDS + DTYPES + DIGITS + INDEX + ["sum", "max", "min"]
    words += [f"s{n}" for n in range(MAX_STAGES)] + [f"a{n}" for n in range(MAX_AXES)]
    words += [f"@{n}" for n in range(MAX_LOCATIONS)]
    words += TAGS + TARGETS + RULE_SLOTS + FIRST_TEMPLATE_WORDS + _cpu_names()
    words += list(BINARY_OPS) + list(COMPARE_OPS) + list(INTRINSICS) + ["select", "cast", "not"]
    return list(dict.fromkeys(words))  # unique, in a fixed order


def gpu_tokens() -> list:
    """The tokens GPU sentences need beyond the CPU vocabulary."""
    cpu = set(cpu_vocab())
    words = GPU_KEYWORDS + CUDA_ARCHS + _gpu_design_space_words() + GPU_RULE_SLOTS
    return [w for w in dict.fromkeys(words) if w not in cpu]


def blocked_tokens() -> list:
    """The tags of the channel-blocked operators and the parameter names their templates had
    beyond the CPU vocabulary's (frozen: later ones are appended by schema_tokens)."""
    return BLOCKED_TAGS + BLOCKED_PARAMS


def schema_tokens(vocab: list) -> list:
    """The templates' tags (a sentence's space line names its template) and the words of their
    parameters, CPU and GPU, that `vocab` lacks."""
    load_templates()
    known = set(vocab)
    words = sorted(TEMPLATES) + schema_words(TEMPLATES, PARAMS) + _gpu_design_space_words() + sorted(GPU_TEMPLATES)
    return [w for w in dict.fromkeys(words) if w not in known]


def default_vocab() -> list:
    """The vocabulary of new models: the CPU vocabulary, then the GPU tokens, then the later
    keywords, then the channel-blocked operators' words, then the implicit GEMM's tags, then
    later template parameters, then the Winograd convolution's tags, then the matrix-vector
    templates', then later templates' tags and parameters, then any template tag or parameter word still
    missing (appended, so a token keeps its id in every vocabulary that has it)."""
    later = IMPLICIT_GEMM_TAGS + LATER_PARAMS + WINOGRAD_TAGS + GEMV_TAGS + LATER_TEMPLATES + NEWER_PARAMS
    vocab = cpu_vocab() + gpu_tokens() + LATER_KEYWORDS + blocked_tokens() + later
    return vocab + schema_tokens(vocab)


_INDEX_PIECES = re.compile(r"a\d+|\d+|[-+*?]")
_WORDS = re.compile(r"\(|\)|\[|\]|[^\s()\[\]]+")


class Tokenizer:
    def __init__(self, vocab: list):
        self.vocab = list(vocab)
        self.ids = {t: n for n, t in enumerate(self.vocab)}
        if len(self.ids) != len(self.vocab) or self.vocab[: len(SPECIAL)] != SPECIAL:
            raise TokenizerError("a vocabulary must list unique tokens and start with " + " ".join(SPECIAL))
        self.pad, self.bos, self.eos, self.unk = range(len(SPECIAL))
        self.end = self.ids[";"]

    @classmethod
    def default(cls) -> Tokenizer:
        return cls(default_vocab())

    def __len__(self) -> int:
        return len(self.vocab)

    # -- words to tokens -------------------------------------------------------------------------
    @staticmethod
    def number(n: int) -> list:
        digits = str(int(n))
        if digits.startswith("-"):
            raise TokenizerError(f"negative number {n} in a decision")
        return [digits[0]] + [f"##{d}" for d in digits[1:]]

    def _word(self, word: str) -> list:
        if word.isdigit():
            return self.number(int(word))
        if word in self.ids:
            return [word]
        arch = re.fullmatch(r"sm_(\d+)(a?)", word)
        if arch and "sm_" in self.ids:  # a CUDA architecture the list does not name
            return ["sm_"] + self.number(int(arch.group(1))) + (["##a"] if arch.group(2) else [])
        if re.fullmatch(r"[-+*?a0-9]+", word):  # an access index like a2*2+a5-1
            pieces = []
            for p in _INDEX_PIECES.findall(word):
                pieces += self.number(int(p)) if p.isdigit() else [p]
            return pieces
        if "." in word:  # a decision label like cache.s3.local.a1
            return [t for part in word.split(".") for t in self._word(part)]
        return ["<unk>"]

    def text_tokens(self, text: str) -> list:
        return [t for w in _WORDS.findall(text) for t in self._word(w)]

    def value_tokens(self, value) -> list:
        """The tokens of one decision value, ending with `;`."""
        if isinstance(value, bool):
            out = ["true" if value else "false"]
        elif value is None:
            out = ["null"]
        elif isinstance(value, Loc):
            out = [str(value)]
        elif isinstance(value, int):
            out = self.number(value)
        elif isinstance(value, tuple):
            out = ["("] + [t for v in value for t in self.number(v)] + [")"]
        elif isinstance(value, str):
            out = [value]
        else:
            raise TokenizerError(f"cannot write decision value {value!r} of type {type(value).__name__}")
        missing = [t for t in out if t not in self.ids]
        if missing:
            raise TokenizerError(f"decision value {value!r} needs tokens outside the vocabulary: {missing}")
        return out + [";"]

    def missing_tokens(self, text: str) -> list:
        """The words of `text` this vocabulary cannot write (each would be `<unk>`), in order."""
        return list(dict.fromkeys(w for w in _WORDS.findall(text) if "<unk>" in self._word(w)))

    def writes_gpu(self) -> bool:
        """Whether this vocabulary has the tokens of GPU sentences (a model trained with it
        may still never have seen one: see the checkpoint's meta)."""
        return all(t in self.ids for t in GPU_KEYWORDS + GPU_RULE_SLOTS)

    # -- to ids ------------------------------------------------------------------------------------
    def to_ids(self, tokens: list) -> list:
        return [self.ids.get(t, self.unk) for t in tokens]

    def reads_defaults(self) -> bool:
        """Whether prompts show the hand template's program (the `default` line) to this
        vocabulary's models."""
        return "default" in self.ids

    def prompt_text(self, s: Sentence) -> str:
        return s.prompt(defaults=self.reads_defaults())

    def prompt_ids(self, s: Sentence) -> list:
        return [self.bos] + self.to_ids(self.text_tokens(self.prompt_text(s)))

    def label_ids(self, label: str) -> list:
        return self.to_ids(self._word(label) + ["="])

    def value_ids(self, value) -> list:
        return self.to_ids(self.value_tokens(value))

    def encode(self, s: Sentence) -> tuple:
        """(token ids, loss mask): the mask is True on decision-value tokens."""
        ids = self.prompt_ids(s)
        mask = [False] * len(ids)
        for label, value in s.decisions:
            lab, val = self.label_ids(label), self.value_ids(value)
            ids += lab + val
            mask += [False] * len(lab) + [True] * len(val)
        return ids + [self.eos], mask + [False]

    def decode(self, ids) -> list:
        return [self.vocab[i] if 0 <= i < len(self.vocab) else "<unk>" for i in ids]
