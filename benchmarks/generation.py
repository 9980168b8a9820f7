"""Text generation through minitc: `model.forward = torch.compile(model.forward, backend="minitc",
dynamic=True)` and Hugging Face `generate()` with greedy decoding, against eager and Inductor
(`dynamic=True`) in the same run.

    python -m minitc.benchmarks --suite generate [--workloads gpt2,llama] [--threads 2]
    minitc generate gpt2 --prompt-len 128 --new 64

Each system generates the same tokens from the same prompt (checked against eager). The
figures: the prefill (a call with one new token), and the decode in milliseconds per token,
(time for `new` tokens - time for 1) / (new - 1), medians over rounds that alternate the
systems. Random weights; nothing downloads.
"""

from __future__ import annotations

import copy
import statistics
import time

DECODERS = {
    # name: (description, transformers config class, model class, config)
    "gpt2": ("GPT-2 small (12 layers, 768 wide)", "GPT2Config", "GPT2LMHeadModel", {}),
    "llama": (
        "LLaMA-style decoder (12 layers, 768 wide, 12 heads on 4 key/value heads, SiLU-gated MLP 2048)",
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            hidden_size=768,
            intermediate_size=2048,
            num_hidden_layers=12,
            num_attention_heads=12,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=2048,
        ),
    ),  # fmt: skip
    "gpt2-tiny": ("GPT-2, 2 layers, 64 wide", "GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=2)),
    "llama-tiny": (
        "LLaMA-style decoder, 2 layers, 64 wide",
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=1000,
            max_position_embeddings=512,
        ),
    ),  # fmt: skip
}


def decoder(name: str):
    """(model in eval mode, its vocabulary size) of DECODERS[name], random weights (seed 0)."""
    import torch
    import transformers

    if name not in DECODERS:
        raise KeyError(f"unknown decoder {name!r}; the decoders: {', '.join(DECODERS)}")
    _, config_cls, model_cls, sizes = DECODERS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**sizes)
    return getattr(transformers, model_cls)(config).eval(), config.vocab_size


def select(names) -> list:
    unknown = [n for n in names if n not in DECODERS]
    if unknown:
        raise KeyError(f"unknown decoders {', '.join(unknown)}; the decoders: {', '.join(DECODERS)}")
    return list(names) or ["gpt2", "llama"]


def systems(model, inductor: bool) -> dict:
    """{system: a copy of `model` whose forward that system compiles} (eager: the model itself)."""
    import torch

    out = {"eager": model}
    compiled = copy.deepcopy(model)
    compiled.forward = torch.compile(compiled.forward, backend="minitc", dynamic=True)
    out["minitc"] = compiled
    if inductor:
        other = copy.deepcopy(model)
        other.forward = torch.compile(other.forward, dynamic=True)
        out["inductor"] = other
    return out


def measure(name: str, prompt_len: int, new: int, threads: int, rounds: int = 3, inductor: bool = False) -> dict:
    """One decoder's record: the tokens checked against eager, and per system the compile
    (first generate) seconds, the prefill ms and the decode ms per token."""
    import warnings

    import torch

    from minitc.timing import thread_limit

    if new < 2:
        raise ValueError(f"new must be >= 2 (the decode time is that of tokens 2 to new), got {new}")
    model, vocab = decoder(name)
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    options = dict(do_sample=False, pad_token_id=0)
    record = {"model": name, "description": DECODERS[name][0], "prompt_len": prompt_len, "new": new, "threads": threads}
    with thread_limit(threads), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallbacks' warnings, once per compiled graph
        runs = systems(model, inductor)
        reference = model.generate(prompt, max_new_tokens=new, **options)
        first, samples = {}, {s: {1: [], new: []} for s in runs}
        for system, m in runs.items():
            start = time.perf_counter()
            tokens = m.generate(prompt, max_new_tokens=new, **options)
            first[system] = time.perf_counter() - start
            if tokens.tolist() != reference.tolist():
                record.setdefault("mismatch", []).append(system)
        for _ in range(rounds):
            for system, m in runs.items():
                for count in (1, new):
                    start = time.perf_counter()
                    m.generate(prompt, max_new_tokens=count, **options)
                    samples[system][count].append(time.perf_counter() - start)
    record["systems"] = {}
    for system in runs:
        prefill = statistics.median(samples[system][1])
        total = statistics.median(samples[system][new])
        record["systems"][system] = {
            "first_generate_s": first[system],
            "prefill_ms": 1e3 * prefill,
            "decode_ms_per_token": 1e3 * (total - prefill) / (new - 1),
        }
    return record


def table(records: list) -> str:
    """A markdown table: per decoder and system, prefill ms, decode ms/token, and minitc's speed."""
    lines = [
        "| model | system | prefill ms | decode ms/token | decode: minitc speed | first generate s | tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        ours = r["systems"]["minitc"]["decode_ms_per_token"]
        for system, t in r["systems"].items():
            speed = f"{t['decode_ms_per_token'] / ours:.2f}x" if system != "minitc" else ""
            ok = "differ" if system in r.get("mismatch", []) else "= eager"
            lines.append(
                f"| {r['model']} (prompt {r['prompt_len']}, {r['new']} new) | {system} | {t['prefill_ms']:.1f} | "
                f"{t['decode_ms_per_token']:.2f} | {speed} | {t['first_generate_s']:.1f} | {ok} |"
            )
    return "\n".join(lines)
