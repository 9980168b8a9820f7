"""Helpers shared by the tensor-language tests (test_lm_language.py, test_lm_decode.py,
test_lm_gpu.py, test_lm_gpu_model.py); their fixtures `hw` and `tok` are in conftest.py."""

from minitc.autotune.cost_model import torch_threads
from minitc.errors import ScheduleError
from minitc.lm.language import Loc, parse, sentence, space_values
from minitc.lm.strategy import DECODING_THREADS


def one_torch_thread():
    """Decoding is latency-bound: one torch thread, as the tlm strategy uses, restored after."""
    return torch_threads(DECODING_THREADS)


def typed(values) -> list:
    """Values with their types: `True == 1` must not hide a bool/int mix-up."""
    return [(type(v).__name__, v) for v in values]


def draw(space, rng, n) -> list:
    """n random legal candidates of `space` (an illegal draw is drawn again, as the tuner does)."""
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        assert tries < 10 * n, f"{space.out}: too many illegal draws"
        try:
            out.append(space.sample(rng))
        except ScheduleError:
            continue
    return out


def check_round_trip(space, c, hw) -> None:
    """The candidate's sentence prints, parses back equal, and replays to the same program."""
    s = sentence(space, hw, c.decisions)
    text = str(s)
    again = parse(text)
    assert again == s, text
    assert str(again) == text
    assert [type(v) for v in again.values] == [type(v) for v in s.values], text
    values = space_values(space, again)
    assert typed(values) == typed(c.values), text
    assert space.replay(values).key == c.key, text


def where(text: str, index: int) -> str:
    """How a SentenceError names the position `index` of `text`."""
    line = text.count("\n", 0, index) + 1
    return f"line {line}, column {index - text.rfind(chr(10), 0, index)}"


def detokenize(tokens: list) -> str:
    return " ".join(tokens).replace(" ##", "")


def check_domain(tok, kind, domain, prompt: str) -> int:
    """Every value of a slot's domain: tokens with no <unk>, back to the same value through the
    grammar (after `prompt`, a sentence up to `=>`), and a token sequence no other value of the
    slot shares. Returns how many values were checked."""
    values = [Loc(i) for i in range(len(domain))] if kind == "location" else list(domain)
    sequences = [tuple(tok.value_ids(v)) for v in values]
    assert len(set(sequences)) == len(sequences), f"two values of {kind} domain {domain[:8]}... share tokens"
    for v, seq in zip(values, sequences):
        assert tok.unk not in seq, v
        assert seq[-1] == tok.end and tok.end not in seq[:-1], v
        assert tok.decode(seq) == tok.value_tokens(v)
    # the decoder's inverse: written tokens -> text -> parsed value
    text = prompt + " ".join(f"v = {detokenize(tok.decode(seq))}" for seq in sequences)
    assert typed(parse(text).values) == typed(values)
    return len(values)
