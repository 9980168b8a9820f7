# %% [markdown]
# # 6. The tensor language: schedules as sentences
#
# The tuner (`tc.tune`) searches a *design space*: every program minitc may try for a
# workload, written as a list of decisions (which sketch, which tile sizes, pack or not). The
# default tuner, `tlm`, writes those decisions as text in a small language and lets a
# transformer complete the text, the way a language model completes a sentence. This
# tutorial prints one program as a sentence, parses it back, shows its tokens, loads the
# model that ships with minitc, watches it choose decisions one by one, and then measures
# what it proposes against random programs of the same design space.
#
# The code is in `lm/` (imported as `minitc.lm`); docs/language-model.md describes it.

# %%
import os
import warnings
from pathlib import Path

import numpy as np
import torch

import minitc as tc
from minitc.autotune.space import Space
from minitc.benchmarks.machine import host_cpu
from minitc.lm.decode import Decoder
from minitc.lm.hardware import hardware
from minitc.lm.language import Loc, SentenceError, parse, sentence, space_values
from minitc.lm.pipeline import SHIPPED, load_model
from minitc.lm.strategy import HardwareWarning, hardware_warning
from minitc.timing import measure

FAST = os.environ.get("MINITC_TUTORIAL_FAST") == "1"
OUT = Path(os.environ.get("MINITC_TUTORIAL_OUT", "tutorial-output"))
OUT.mkdir(parents=True, exist_ok=True)

# matmul 512^3 is one of the workloads the model was never trained on (`minitc lm workloads`)
SIZE = 256 if FAST else 512
MODEL_PROGRAMS = 8 if FAST else 16  # programs of the model we measure
RANDOM_PROGRAMS = 8 if FAST else 32  # random programs of the same space
TARGET = "llvm"  # this machine's CPU
CPU = "{cpu} ({llvm_cpu})".format(**host_cpu())
print(f"CPU: {CPU}; matmul {SIZE}^3")

# %% [markdown]
# ## A design space and one program in it
#
# `Space(C, target)` is the set of programs the tuner may try for `C`. A matmul has two
# *sketches*: `template`, the hand-written matmul template (minitc/templates) with each of its
# parameters (register tile `mr`x`nr`, panel width `nc`, packing, ...) a decision, and
# `generic`, MetaSchedule-style multi-level tiling of any loop nest. `space.default_values()`
# are the decisions of the hand template with its own defaults: the program `tc.build(C)`
# runs when nothing has been tuned.
#
# A *sentence* writes one program as text, in four parts:
#
# - `workload`: the subgraph, one `stage` per tensor: kind, dtype, shape, reduction, how each
#   input is indexed (`read 0 [a0 a2]`: the first input at axes 0 and 2), and the arithmetic;
# - `hardware`: the machine: target, CPU, cores, float32 lanes per vector register, cache
#   sizes in KiB, and the measured FMA peak (GFLOP/s) and memory bandwidth (GB/s);
# - `space`: the sketches and the names of their decisions; `default`: the hand template's
#   own program;
# - after `=>`: the decisions of this program, each `label = value ;`.
#
# Stages are `s<N>` and axes `a<N>`: no user names, so the same workload gives the same
# sentence whatever its tensors are called.

# %%
A = tc.placeholder((SIZE, SIZE), "float32", name="A")
B = tc.placeholder((SIZE, SIZE), "float32", name="B")
C = tc.ops.matmul(A, B)

space = Space(C, TARGET)
hw = hardware(TARGET)  # measured once per machine, then cached in ~/.cache/minitc
template = space.replay(space.default_values())
text = str(sentence(space, hw, template.decisions))
print(text)

# %% [markdown]
# ## Parsing it back
#
# The sentence is text of a grammar (`lm/grammar.lark`, parsed with lark). `parse` and `str`
# are exact inverses, and `space_values` turns a parsed sentence back into the space's
# decisions, which replay to the same program (same structural key). A malformed sentence
# raises `SentenceError` with the line, the column and what the grammar expected there.

# %%
parsed = parse(text)
assert str(parsed) == text
replayed = space.replay(space_values(space, parsed))
print("parsed and replayed to the same program:", replayed.key == template.key)
print("decisions:", parsed.decisions)

try:
    parse(text.replace(" cores ", " core "))
except SentenceError as e:
    print("SentenceError:", e)

# %% [markdown]
# ## Tokens
#
# The model reads tokens from a closed vocabulary: the grammar's keywords, operator tags,
# decision names, `s<N>`/`a<N>`/`@<N>`, and digits. A number is written digit by digit, with
# a separate token for later digits (`256` is `2 ##5 ##6`), so every tile size of every shape
# can be written and each value ends with `;`.
#
# The shipped model was trained before the `default` line existed, so its vocabulary has no
# `default` token, and the prompt it reads leaves that line out.

# %%
model, tok, meta = load_model(SHIPPED)
torch.set_num_threads(1)  # decoding is a chain of small steps; a second thread mostly waits
prompt_tokens = tok.text_tokens(tok.prompt_text(parsed))
print(f"vocabulary: {len(tok)} tokens; this prompt: {len(prompt_tokens)} tokens")
print("the prompt reads the default line:", tok.reads_defaults())
print("first tokens:", " ".join(prompt_tokens[:40]))
print("the decision `s2.nc = 256 ;` is", tok.decode(tok.label_ids("s2.nc") + tok.value_ids(256)))
print("the tile (8, 64) is", tok.value_tokens((8, 64)))

# %% [markdown]
# ## The shipped model
#
# `lm/checkpoints/cpu.pt` is a decoder-only transformer of about two million parameters. It
# was pretrained on random programs written as sentences (learning the language), then
# fine-tuned on programs that were *measured*, each weighted by how fast it ran against the
# best of its workload, so that it writes fast programs more often than slow ones. Its meta
# data records each training stage and the machines whose measurements it learned from.

# %%
print(f"{model.num_parameters():,} parameters; stages:", [h.get("stage") for h in meta.get("history", [])])
print("fine-tuned on measurements of:", meta.get("hardware"))
print("this machine:                 ", hw)
warning = hardware_warning(meta, hw, TARGET)
print("warning:", warning or "none: the model has seen a machine like this one")

# %% [markdown]
# If the warning appears, the model learned which programs are fast on another CPU. It
# still writes only legal programs (the grammar and the design space see to that), and it
# reads this machine's hardware line, but its sense of speed comes from the other CPU: a
# wider SIMD unit or larger caches favour other tile sizes. Its proposals may then be weaker,
# and `minitc lm adapt` measures a sample here and fine-tunes a copy for this machine.

# %% [markdown]
# ## Constrained decoding, one decision at a time
#
# The model writes the decisions after `=>`, one token at a time. At every decision the
# design space says which values are legal (the divisors of an extent, the candidate unroll
# depths, ...), and the decoder masks the model's logits to tokens that continue a legal
# value; within a value a prefix trie does this, so a tile's last factor can only complete a
# tiling of the extent. The probability of a value is the product, over its tokens, of the
# softmax among the allowed tokens. So every sentence the model writes is a legal program.
#
# `value_probabilities` below computes those probabilities for every legal value of one
# decision. We walk through the model's most likely program (temperature 0: the most likely
# token at every step) and print, at each decision, the legal values it weighed.


# %%
def value_probabilities(prefix: list, values: list) -> np.ndarray:
    """P(value | prefix) for each legal value of one decision, as constrained decoding
    computes it: at each token, a softmax over the tokens that continue some legal value."""
    sequences = [tok.value_ids(v) for v in values]
    width = max(map(len, sequences))  # one batch, padded at the end (the model looks only back)
    batch = torch.tensor([prefix + seq + [tok.pad] * (width - len(seq)) for seq in sequences])
    with torch.no_grad():
        logits = model(batch)[0][:, len(prefix) - 1 :].double()  # row n, step k: logits of token k
    logp = np.zeros(len(values))
    for n, seq in enumerate(sequences):
        for k, token in enumerate(seq):
            allowed = sorted({s[k] for s in sequences if s[:k] == seq[:k]})
            logp[n] += float(logits[n, k, token] - torch.logsumexp(logits[n, k, allowed], 0))
    return np.exp(logp)


def legal_values(decision) -> list:
    """A decision's legal values as the sentence writes them (a compute location is `@N`)."""
    if decision.kind == "location":
        return [Loc(n) for n in range(len(decision.domain))]
    return list(decision.domain)


def show_decoding(program, top: int = 5) -> None:
    """Each decision of `program`: the value taken, and the model's top legal values."""
    s = sentence(space, hw, program.decisions)
    prefix = tok.prompt_ids(s)
    print(f"{'decision':>14}   {'taken':<14} legal  the model's top values: probability")
    for (label, value), decision in zip(s.decisions, program.decisions):
        prefix += tok.label_ids(label)  # `s2 mr =`: forced, the space names the decision
        values = legal_values(decision)
        p = value_probabilities(prefix, values)
        choices = "  ".join(f"{written(values[n])}: {p[n]:.2f}" for n in np.argsort(-p)[:top])
        print(f"{label:>14} = {written(value):<14} {len(values):>5}  {choices}")
        prefix += tok.value_ids(value)


def written(value) -> str:
    """A value as the sentence writes it: `true`, `(16 2 2 4)`, `@3`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "(" + " ".join(map(str, value)) + ")"
    return str(value)


greedy = Decoder(model, tok, space, hw, temperature=0).generate(1)[0][0]
show_decoding(greedy)
nr = dict(sentence(space, hw, greedy.decisions).decisions).get("s2.nr")  # None for a generic program
if nr is not None:
    print(f"the model's register tile is nr = {nr} floats: {nr / hw.simd:g} x the {hw.simd} lanes of a vector here;")
    print(f"the hand template's, nr = {dict(parsed.decisions)['s2.nr']}, derives from this machine's vector width")

# %% [markdown]
# `nr` is the width of the register tile in floats, and a vector register holds `simd` of
# them. A model fine-tuned on a machine with other vectors favours the widths that were
# fast there: two 8-lane AVX2 vectors, say, when this machine has 16 lanes. This is what the
# hardware warning above is about.

# %% [markdown]
# A decision with many legal values is a tile of the generic sketch: each way of splitting
# an extent into factors is one value. Here is how the model weighs the first tile of a
# random generic program (it writes the factors left to right; the trie allows only the
# factors that still divide what is left).

# %%
rng = np.random.default_rng(0)
generic = None
while generic is None:
    try:
        generic = space.sample(rng, sketch="generic")
    except tc.ScheduleError:  # a random draw the space rejects: draw again
        pass
show_decoding(generic)

# %% [markdown]
# ## The model's proposals and random samples
#
# `Decoder.generate(n)` writes n programs at once (one batched forward per token). This is
# what the `tlm` strategy does in its first round: sample four times as many as it will
# measure, drop duplicates, rank by the model's log-likelihood, measure the top ones. The
# random programs are drawn uniformly from the same space by `space.sample`.

# %%
decoder = Decoder(model, tok, space, hw)
sampled, failures = decoder.generate(4 * MODEL_PROGRAMS, np.random.default_rng(1))
print(f"{len(sampled)} programs written, {failures} rejected by the space (legal by construction)")
unique = {}
for c in sorted(sampled, key=lambda c: -c.logprob):  # most likely first
    unique.setdefault(c.key, c)  # by structural key: two decision lists can give one program
proposals = list(unique.values())[:MODEL_PROGRAMS]
print(f"{len(unique)} distinct programs; the {len(proposals)} most likely:")
for c in proposals:
    print(f"  log-likelihood {c.logprob:6.2f}: {c.values}")

random_programs = []
while len(random_programs) < RANDOM_PROGRAMS:
    try:
        random_programs.append(space.sample(rng))
    except tc.ScheduleError:
        pass
sketches = [c.sketch for c in random_programs]
print(f"random: {sketches.count('template')} template and {sketches.count('generic')} generic programs")

# %% [markdown]
# ## Building and measuring them
#
# Each candidate holds its schedule, so `tc.build` compiles it like any hand-written one.
# Every kernel is checked against numpy before it is timed; the timings are interleaved
# medians (`minitc.timing.measure`). The figures depend on this CPU: its vector
# width, caches and cores.

# %%
a = np.random.rand(SIZE, SIZE).astype("float32")
b = np.random.rand(SIZE, SIZE).astype("float32")
expected = a @ b
programs = {"template": template}
programs |= {f"model {n}": c for n, c in enumerate(proposals)}
programs |= {f"random {n}": c for n, c in enumerate(random_programs)}
calls = {}
for name, c in programs.items():
    f = tc.build(c.schedule, target=TARGET)
    np.testing.assert_allclose(f(a, b), expected, rtol=1e-4, atol=1e-3)
    calls[name] = lambda f=f: f(a, b)
print(f"all {len(calls)} kernels agree with numpy")

timings = measure(calls, repeats=5, budget_s=0.2)
gflops = {name: 2 * SIZE**3 / t.median / 1e9 for name, t in timings.items()}
print(f"{'program':>10} {'ms':>8} {'GFLOP/s':>8}  decisions")
for name, c in programs.items():
    print(f"{name:>10} {timings[name].median * 1e3:8.3f} {gflops[name]:8.1f}  {c.values}")

model_rates = [gflops[f"model {n}"] for n in range(len(proposals))]
random_rates = [gflops[f"random {n}"] for n in range(len(random_programs))]
print(f"best of the model's {len(model_rates)}: {max(model_rates):.1f} GFLOP/s, median {np.median(model_rates):.1f}")
print(f"best of {len(random_rates)} random:   {max(random_rates):.1f} GFLOP/s, median {np.median(random_rates):.1f}")
print(f"template: {gflops['template']:.1f} GFLOP/s")

fastest = max(range(len(proposals)), key=lambda n: gflops[f"model {n}"])
print(f"the loop nest of the model's fastest program (model {fastest}):")
print(tc.lower(proposals[fastest].schedule))

# %%
import matplotlib.pyplot as plt  # noqa: E402

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
jitter = np.random.default_rng(2)
groups = (("model", "likelihood", model_rates), ("random", "draw", random_rates))
for x, (label, order, rates) in enumerate(groups):
    left.scatter(x + jitter.uniform(-0.15, 0.15, len(rates)), rates, alpha=0.7)
    measured = np.arange(1, len(rates) + 1)
    right.plot(measured, np.maximum.accumulate(rates), marker="o", label=f"{label} (in {order} order)")
for ax in (left, right):
    ax.axhline(gflops["template"], color="gray", linestyle="--", label="hand template")
    ax.set_ylabel("GFLOP/s")
left.set_xticks([0, 1], ["model", "random"])
left.set_title(f"matmul {SIZE}^3: each program")
right.set_xlabel("programs measured")
right.set_title("best so far")
right.legend()
fig.suptitle(CPU, fontsize=9)
fig.tight_layout()
path = OUT / "06-model-vs-random.png"
fig.savefig(path, dpi=120)
print("saved", path)

# %% [markdown]
# ## Why the model finds good programs in a few measurements
#
# - **It has seen measured programs.** Fine-tuning weighted each measured program by its
#   speed relative to the best of its workload, so the likely sentences are the fast ones:
#   the template sketch, register tiles that fill the vector registers, packed panels,
#   parallel outer loops. A uniform draw lands on those only by chance: half its programs
#   are generic tilings, and many of the rest pick register tiles or cache blocks that
#   waste the vector unit, so the random median above is several times slower. Random
#   search can still hit a fast program (the best random one may even win), but it needs
#   many more measurements to do so reliably.
# - **The grammar makes every sentence valid.** The mask leaves only legal values, so no
#   measurement is spent on a program that fails to build or reads out of bounds; all
#   samples above were legal.
# - **It reads the workload and the machine.** The prompt names the shapes and the
#   hardware, so one model serves many workloads, including ones it never saw (matmul 512^3
#   is held out of its training data).
#
# The `tlm` strategy builds on this: after the first round it also measures one-switch
# flips and small edits of the best programs, which the model rates lower, and a cost model
# takes over the ranking once it has seen enough measurements (docs/language-model.md).
# `tc.tune(C)` runs all of it; the full tutorial does so below with 16 trials, in a records
# database under OUT.

# %%
if FAST:
    print("fast mode: tc.tune skipped")
else:
    with warnings.catch_warnings():  # the hardware warning, printed above already
        warnings.simplefilter("ignore", HardwareWarning)
        result = tc.tune(C, trials=16, strategy="tlm", target=TARGET, db=OUT / "06-records.db")
    np.testing.assert_allclose(result.kernel(a, b), expected, rtol=1e-4, atol=1e-3)
    print(f"tc.tune, 16 trials: {result.best_ms:.3f} ms ({2 * SIZE**3 / result.best_ms / 1e6:.1f} GFLOP/s)")
    print(f"in {result.seconds:.1f} s; agrees with numpy")
