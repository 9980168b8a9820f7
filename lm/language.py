"""The tensor language: sentences that describe a workload, the machine, the design space (and
the hand template's own program, when it has a template) and the decisions of one program,
printed as text and parsed back with the lark grammar (grammar.lark). Printing and parsing are
exact inverses.

    s = sentence(space, hardware, candidate.decisions)   # a Sentence
    text = str(s)                                        # what the records database stores
    assert parse(text) == s
    values = space_values(space, s)                      # decisions to replay in the space

A sentence never names things by the user's names: stages are `s<N>` (their order in the
graph), axes `a<N>` (their order in the stage: spatial, then reduction), compute locations
`@<N>` (the position among the legal loops), so one workload's sentence is the same whatever
its tensors are called, and the vocabulary is closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lark import Lark, Transformer, UnexpectedInput

from minitc.autotune.sampler import Sampler
from minitc.errors import MinitcError, ScheduleError
from minitc.lm.describe import decision_label, describe_stages, space_skeleton
from minitc.schedule.state import from_tensors


class SentenceError(MinitcError):
    """Malformed or inconsistent tensor-language text."""


@dataclass(frozen=True)
class Loc:
    """A compute location, by its position among the legal loops (0 is usually `root`)."""

    index: int

    def __str__(self) -> str:
        return f"@{self.index}"


@dataclass(frozen=True)
class WrittenStage:
    """A stage of the workload as a sentence writes it (not minitc.schedule's Stage)."""

    kind: str  # "input", an operator tag, or "compute"
    dtype: str
    shape: tuple
    reduce: tuple | None = None  # (combiner, extents)
    reads: tuple = ()  # (stage number, (index text, ...)) per read
    ops: tuple = ()  # the arithmetic of the body, sorted

    def __str__(self) -> str:
        words = ["stage", self.kind, self.dtype, _dims(self.shape)]
        if self.reduce is not None:
            words += ["reduce", self.reduce[0], _dims(self.reduce[1])]
        for stage, index in self.reads:
            words += ["read", str(stage), "[" + " ".join(index) + "]"]
        if self.ops:
            words += ["ops", *self.ops]
        return " ".join(words)


@dataclass(frozen=True)
class Hardware:
    target: str  # "llvm"
    cpu: str
    cores: int
    simd: int  # float32 lanes per vector register
    l1: int  # KiB, per core
    l2: int
    l3: int
    gflops: int  # measured peak float32 FMA rate, all cores, 2 significant digits
    gbps: int  # measured STREAM-triad bandwidth, all cores

    def __str__(self) -> str:
        return (
            f"hardware {self.target} {self.cpu} cores {self.cores} simd {self.simd} l1 {self.l1} l2 {self.l2} "
            f"l3 {self.l3} gflops {self.gflops} gbps {self.gbps}"
        )


@dataclass(frozen=True)
class GpuHardware:
    """The hardware line of a GPU: `hardware cuda sm_90 sms 132 warp 32 smem 48 regs 64
    threads 1024 gflops 0 gbps 0` (gflops and gbps 0: not measured)."""

    target: str  # "cuda"
    arch: str  # "sm_90"
    sms: int  # streaming multiprocessors (0: unknown)
    warp: int  # threads per warp
    smem: int  # shared memory per block, KiB
    regs: int  # 32-bit registers per block, in units of 1024
    threads: int  # max threads per block
    gflops: int = 0  # measured peak float32 FMA rate, 2 significant digits; 0: not measured
    gbps: int = 0  # measured device-memory bandwidth; 0: not measured

    def __str__(self) -> str:
        return (
            f"hardware {self.target} {self.arch} sms {self.sms} warp {self.warp} smem {self.smem} regs {self.regs} "
            f"threads {self.threads} gflops {self.gflops} gbps {self.gbps}"
        )


@dataclass(frozen=True)
class Sentence:
    stages: tuple  # WrittenStage, producers first
    hardware: Hardware | GpuHardware
    sketches: tuple  # (sketch name, (its slot names, ...)) per sketch of the space
    decisions: tuple = ()  # (label, value) per decision, in the order the space takes them
    defaults: tuple = ()  # (label, value) per decision of the hand template's own program, if any

    def __str__(self) -> str:
        return self.prompt() + ("\n" + _decisions(self.decisions) if self.decisions else "")

    def prompt(self, defaults: bool = True) -> str:
        """Everything before the decisions (what the model is conditioned on), ending in `=>`;
        with `defaults=False` without the `default` line (for models trained before it)."""
        lines = ["workload"] + [f"  {st}" for st in self.stages] + [str(self.hardware)]
        lines.append("space " + _sketches(self.sketches))
        if defaults and self.defaults:
            lines.append("default " + _decisions(self.defaults))
        return "\n".join(lines) + "\n=>"

    @property
    def values(self) -> list:
        return [v for _, v in self.decisions]


def _decisions(pairs) -> str:
    return " ".join(f"{label} = {_value(v)} ;" for label, v in pairs)


def _dims(values) -> str:
    return "[" + " ".join(str(v) for v in values) + "]"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, tuple):
        return "(" + " ".join(str(x) for x in v) + ")"
    return str(v)


# -- from a design space -------------------------------------------------------------------------


class SentenceWriter:
    """Writes programs of one space on one machine as sentences. The workload, hardware and
    skeleton parts are the same for every program, so they are computed once."""

    def __init__(self, space, hardware: Hardware | GpuHardware):
        gpu = bool(getattr(space, "gpu", False))
        if gpu != isinstance(hardware, GpuHardware):
            raise SentenceError(
                f"a {'GPU' if gpu else 'CPU'} design space ({space.target}) needs a "
                f"{'GPU' if gpu else 'CPU'} hardware line, got `{hardware}` (lm.hardware.hardware(space.target))"
            )
        self.stages = tuple(WrittenStage(**d) for d in describe_stages(space.outputs))
        self.names = space_names(space)
        self.skeleton = space_skeleton(space)
        self.defaults = template_decisions(space, self.names)
        self.hardware = hardware

    def __call__(self, decisions=()) -> Sentence:
        """The sentence of a program (decisions: sampler Decision objects) or, with no
        decisions, the prompt that the model completes."""
        decisions = tuple(sentence_decision(d, self.names) for d in decisions)
        return Sentence(self.stages, self.hardware, self.skeleton, decisions, self.defaults)


def sentence(space, hardware: Hardware | GpuHardware, decisions=()) -> Sentence:
    """One sentence of `space` (see SentenceWriter, for writing many)."""
    return SentenceWriter(space, hardware)(decisions)


def space_names(space) -> dict:
    """stage name -> (`s<N>`, {axis name: `a<N>`}) for the stages of the space's graph."""
    state, _ = from_tensors(space.outputs)
    return {
        st.name: (f"s{n}", {a.name: f"a{k}" for k, a in enumerate(st.all_axes)}) for n, st in enumerate(state.stages)
    }


def template_decisions(space, names: dict) -> tuple:
    """The decisions of the hand template's program with its shape-derived defaults (what
    `tc.build` runs), as (label, value) pairs; () for a space without a template. The model
    sees them in the prompt, so it can learn what to change relative to the hand heuristics
    rather than the whole mapping from shapes to good decisions."""
    if "template" not in space.sketches:
        return ()
    try:
        candidate = space.replay(space.default_values())
    except ScheduleError:  # defaults the space cannot take (clamped away): no hint
        return ()
    return tuple(sentence_decision(d, names) for d in candidate.decisions)


def sentence_decision(decision, names: dict) -> tuple:
    """(label, sentence value) of one sampler Decision."""
    value = Loc(decision.domain.index(decision.value)) if decision.kind == "location" else decision.value
    return decision_label(decision.name, names), value


def later_slots(written: tuple, skeleton: tuple, later: dict) -> dict | None:
    """The slots of `later` (template parameters added after sentences were recorded: their
    Param's `before`, templates/params.py) that `skeleton` (the space's) has and the sentence's
    space line `written` lacks, with the values that give the programs those sentences
    measured; None where the two differ otherwise. So a space can grow without making the
    dataset unreadable."""
    if [name for name, _ in written] != [name for name, _ in skeleton]:
        return None
    missing = {}
    for (_, have), (_, want) in zip(written, skeleton):
        gone = [slot for slot in want if slot not in have]
        if [slot for slot in want if slot in have] != list(have) or any(slot not in later for slot in gone):
            return None
        missing.update((slot, later[slot]) for slot in gone)
    return missing


class _SentenceSampler(Sampler):
    """Replays a sentence's decisions in the space: checks each label and value against the
    slot the space asks for and turns `@N` back into a loop name. A template slot the sentence
    predates (`missing`: slot -> value, later_slots) takes the value its program had, without
    a decision of the sentence."""

    def __init__(self, decisions: tuple, names: dict, missing: dict | None = None):
        super().__init__(forced=[])
        self.sentence_decisions, self.names, self.missing = decisions, names, missing or {}
        self.filled = 0  # decisions answered from `missing`, not from the sentence

    def recorded(self, name: str):
        """The sentence's value for slot `name` (None for a slot it predates, or a location)."""
        n = len(self.decisions) - self.filled
        if decision_label(name, self.names).rsplit(".", 1)[-1] in self.missing or n >= len(self.sentence_decisions):
            return None
        value = self.sentence_decisions[n][1]
        return None if isinstance(value, Loc) else value

    def _take(self, kind, name, domain):
        expected = decision_label(name, self.names)
        slot = expected.rsplit(".", 1)[-1]
        if slot in self.missing:
            self.filled += 1
            self.forced = [d.value for d in self.decisions] + [self.missing[slot]]
            return super()._take(kind, name, domain)
        n = len(self.decisions) - self.filled
        if n >= len(self.sentence_decisions):
            raise SentenceError(f"the sentence has {n} decisions; the space asks for more (next: {expected})")
        label, value = self.sentence_decisions[n]
        if label != expected:
            raise SentenceError(f"decision {n}: the sentence has {label!r} where the space asks for {expected!r}")
        if isinstance(value, Loc):
            if kind != "location" or value.index >= len(domain):
                raise SentenceError(f"decision {n} ({label}): {value} is not one of its {len(domain)} legal locations")
            value = domain[value.index]
        elif kind == "location" or not any(type(v) is type(value) and v == value for v in domain):
            # exact types: `true` is not the unroll depth 1, a loop is named by `@N`, not by name
            raise SentenceError(f"decision {n} ({label}): {_value(value)} is not one of its legal values")
        self.forced = [d.value for d in self.decisions] + [value]
        return super()._take(kind, name, domain)


def check_workload(space, s: Sentence) -> dict:
    """Raise SentenceError unless sentence `s` was written for this space's workload and
    sketches: decisions that are legal in two spaces mean different programs in each. Returns
    the template slots that the space has and the sentence predates, with their values
    (later_slots)."""
    stages = tuple(WrittenStage(**d) for d in describe_stages(space.outputs))
    if len(s.stages) != len(stages):
        raise SentenceError(
            f"the sentence describes a workload of {len(s.stages)} stages; this space's has {len(stages)}. "
            "A sentence applies only to the workload it was written for"
        )
    for n, (got, want) in enumerate(zip(s.stages, stages)):
        if got != want:
            raise SentenceError(
                f"the sentence was written for another workload: its stage s{n} is `{got}`, this space's is "
                f"`{want}`. A sentence applies only to the workload it was written for"
            )
    skeleton = space_skeleton(space)
    later = {p.name: p.before for p in space.declared() if p.before is not None}
    missing = later_slots(s.sketches, skeleton, later)
    if missing is None:
        raise SentenceError(
            f"the sentence's space line ({_sketches(s.sketches)}) is not this space's ({_sketches(skeleton)}); "
            "write the sentence from this space"
        )
    return missing


def _sketches(sketches) -> str:
    return " | ".join(name + (" : " + " ".join(slots) if slots else "") for name, slots in sketches)


def space_values(space, s: Sentence) -> list:
    """The space's decision values of sentence `s` (raises SentenceError if it is not a program
    of this space, or was written for another workload)."""
    sampler = _SentenceSampler(s.decisions, space_names(space), check_workload(space, s))
    try:
        candidate = space._apply(sampler)
    except ScheduleError as e:
        raise SentenceError(f"the sentence is not a legal program of this space: {e}") from None
    taken = len(candidate.decisions) - sampler.filled
    if taken != len(s.decisions):
        raise SentenceError(f"the sentence has {len(s.decisions)} decisions; the program takes {taken}")
    return candidate.values


# -- parsing -------------------------------------------------------------------------------------

_PARSER = None


def _parser() -> Lark:
    global _PARSER
    if _PARSER is None:
        grammar = (Path(__file__).with_name("grammar.lark")).read_text()
        _PARSER = Lark(grammar, parser="lalr", propagate_positions=False)
    return _PARSER


class _ToSentence(Transformer):
    def start(self, c):
        stages, hardware, sketches, *defaults, decisions = c
        return Sentence(stages, hardware, sketches, decisions, defaults[0] if defaults else ())

    def default(self, c):
        return tuple(c)

    def workload(self, c):
        return tuple(c)

    def stage(self, c):
        return c[0]

    def input(self, c):
        return WrittenStage("input", str(c[0]), c[1])

    def compute(self, c):
        tag, dtype, shape, *rest = c
        reduce = next((r for r in rest if isinstance(r, tuple) and r and r[0] == "reduce"), None)
        reads = tuple(r[1:] for r in rest if isinstance(r, tuple) and r and r[0] == "read")
        ops = next((r[1] for r in rest if isinstance(r, tuple) and r and r[0] == "ops"), ())
        return WrittenStage(str(tag), str(dtype), shape, reduce[1:] if reduce else None, reads, ops)

    def reduction(self, c):
        return ("reduce", str(c[0]), c[1])

    def read(self, c):
        return ("read", int(c[0]), tuple(str(t) for t in c[1:]))

    def ops(self, c):
        return ("ops", tuple(str(t) for t in c))

    def dims(self, c):
        return tuple(int(t) for t in c)

    def hardware(self, c):
        return Hardware(str(c[0]), str(c[1]), *(int(t) for t in c[2:]))

    def gpu_hardware(self, c):
        return GpuHardware(str(c[0]), str(c[1]), *(int(t) for t in c[2:]))

    def space(self, c):
        return tuple(c)

    def sketch(self, c):
        return (str(c[0]), tuple(str(t) for t in c[1:]))

    def decisions(self, c):
        return tuple(c)

    def decision(self, c):
        return (str(c[0]), c[1])

    def int(self, c):
        return int(c[0])

    def tile(self, c):
        return tuple(int(t) for t in c)

    def true(self, c):
        return True

    def false(self, c):
        return False

    def null(self, c):
        return None

    def loc(self, c):
        return Loc(int(str(c[0])[1:]))

    def word(self, c):
        return str(c[0])


def parse(text: str) -> Sentence:
    """The Sentence of `text`; raises SentenceError naming the line, column and what was expected."""
    if not isinstance(text, str):
        hint = "; decode it first with .decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise SentenceError(f"a sentence is a str, got {type(text).__name__}{hint}")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        # `accepts` is what the parser state takes; `expected` can be another lexer state's set.
        names = getattr(e, "accepts", None) or getattr(e, "expected", None) or getattr(e, "allowed", None) or []
        expected = sorted(_terminal_text(n) for n in names)
        token = getattr(e, "token", None)
        if token is not None:
            got = "end of text" if token.type == "$END" else repr(str(token))
        else:
            got = repr(getattr(e, "char", ""))
        where = f"line {e.line}, column {e.column}"
        context = e.get_context(text, span=30).splitlines()[0].strip()
        raise SentenceError(
            f"malformed sentence at {where} (near {context!r}): got {got}, "
            f"expected one of: {', '.join(expected) or 'end of text'}"
        ) from None
    return _ToSentence().transform(tree)


def _terminal_text(name: str) -> str:
    """A grammar terminal as a reader knows it: `'cores'`, `';'`, `'=>'`, or `int`, `word`."""
    if name == "$END":
        return "end of text"
    terminal = next((t for t in _parser().terminals if t.name == name), None)
    if terminal is None:
        return name
    return repr(terminal.pattern.value) if terminal.pattern.type == "str" else name.lower()
