"""Offline leave-one-hardware-out of the language model: every CPU description in lm/data,
scored by its own recorded measurements, with no machine of that kind at hand.

    python -m minitc.benchmarks.tlm_offline [--descriptions FP,...] [--base CKPT] [--epochs 1]
        [--max-seconds 240] [--threads 1] [--models DIR] [--ks 1,3,10,64] [--json out.json]

For each CPU description D (a hardware fingerprint), a copy of `--base` (default: the Zen 2
model of commit a6df68c, which learned no description in lm/data) is fine-tuned on the
dataset without D's programs and without the programs of the TEST workloads on any machine, so
D is new hardware and the TEST workloads are new workloads to it (`--models` keeps the copies:
a second run, e.g. after an interrupted one, reuses them). Then, for each TEST workload W that D
has measurements of, the pool is D's recorded programs of W (each with its recorded median):

- **TLM@k**: the k programs of the pool the left-out model finds likeliest (teacher-forced
  log-probability of the sentence's decisions after D's prompt, the same prompt the tlm
  strategy writes on D). This is the model's first ranking only: the strategy's later rounds
  (edits of the measured best, the cost model) are not simulated.
- **Search@k**: the tlm strategy's loop on the pool (search_at): the model's likeliest first,
  then rounds half of edits (the programs nearest the best measured), half of the model's
  likeliest. **Learn@k**: the same with the online update of `tc.tune(learn=True)` before each
  round (a copy of the model fine-tuned on the programs measured so far).
- **Random@k**: the expected best of k programs drawn at random from the pool (exact).
- **Evo@k**: an evolutionary-like sampler restricted to the pool, mean over `--evo-seeds`:
  a random first round of 8, then rounds of 8 of the unmeasured programs nearest (fewest
  different decisions) to the 4 best measured so far.

Each score is the pool's best ms / the best ms the method's k programs reach (1.0: it found the
best recorded program). Only a k smaller than the pool is scored: with k >= the pool's size
every method has measured the whole pool. What is not measured: programs the model would
write that D never measured (they have no recorded time on D), and the re-measurement and
side-by-side timing of the on-host `tlm-eval` suite.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import click
import numpy as np

# the offline suite's new workloads: analogues of tlm-eval's five (a square matmul, a 3x3 and a 1x1
# convolution, a dense layer with its epilogue, both attention batch matmuls, softmax) and a
# depthwise convolution, each measured on every CPU description
TEST = (
    "matmul-384",
    "resnet18-c3",
    "resnet50-1x1-256-64",
    "bert-ffn1-gelu",
    "gpt2-attn-qk",
    "bert-attn-av",
    "gpt2-softmax",
    "mbv2-dw-192-28",
)
ZEN2_COMMIT = "a6df68c"  # lm/checkpoints/cpu.pt there: fine-tuned on a Zen 2 only
ROUND, PARENTS = 8, 4


def zen2_base(path: Path) -> Path:
    """The Zen 2 checkpoint, written out of git history to `path` (once)."""
    import subprocess

    if not path.exists():
        blob = subprocess.run(
            ["git", "show", f"{ZEN2_COMMIT}:lm/checkpoints/cpu.pt"],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            check=True,
        ).stdout
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    return path


def cpu_descriptions(entries) -> list:
    """The CPU fingerprints of the dataset, most programs first."""
    from collections import Counter

    from minitc.lm.hardware import is_gpu_line

    counts = Counter(e.fingerprint for e in entries if not is_gpu_line(e.hardware))
    return [fp for fp, _ in counts.most_common()]


def left_out_model(base, entries, fingerprint, out: Path, *, epochs, max_seconds, threads, say) -> dict:
    """Fine-tune `base` without `fingerprint`'s programs and without the TEST workloads', into
    `out` (kept: reused when it exists); its meta."""
    from minitc.lm.data import dataset_demonstrations
    from minitc.lm.model import load_checkpoint
    from minitc.lm.pipeline import finetune

    if out.exists():
        say(f"{fingerprint}: reusing {out}")
        return load_checkpoint(out)[2]
    train = [e for e in entries if e.fingerprint != fingerprint and e.name not in TEST]
    say(f"{fingerprint}: fine-tuning {Path(base).name} on {len(train)} programs of the other CPUs")
    stage = {"left_out": fingerprint, "left_out_workloads": list(TEST)}
    out.parent.mkdir(parents=True, exist_ok=True)
    return finetune(
        base,
        None,
        out,
        demos=dataset_demonstrations(train),
        source=f"lm/data without {fingerprint} and the offline TEST workloads",
        stage=stage,
        epochs=epochs,
        max_seconds=max_seconds,
        threads=threads,
    )


def log_likelihoods(model, tok, sentences, batch_size: int = 32) -> list:
    """The model's log-probability of each sentence's decision values after its prompt."""
    import torch
    import torch.nn.functional as F

    from minitc.lm.data import examples
    from minitc.lm.train import collate

    out = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(sentences), batch_size):
            inputs, targets, mask = collate(examples(tok, sentences[i : i + batch_size]))
            logits, _ = model(inputs)
            logp = -F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(mask)
            out += (logp * mask).sum(1).tolist()
    return out


def random_at(ms: list, k: int) -> float:
    """E[best / best of k drawn without replacement], exactly (order statistics)."""
    ms = sorted(ms)
    n, total = len(ms), math.comb(len(ms), k)
    return sum(ms[0] / m * math.comb(n - 1 - i, k - 1) / total for i, m in enumerate(ms) if n - 1 - i >= k - 1)


def distance(a: dict, b: dict) -> int:
    return sum(a.get(label) != b.get(label) for label in a.keys() | b.keys())


def evo_at(ms: list, decisions: list, ks, seeds: int) -> dict:
    """{k: mean over seeds of best / best after k programs} of the pool-restricted evolutionary
    sampler (module docstring)."""
    scores = {k: [] for k in ks}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        order = list(rng.permutation(len(ms))[:ROUND])
        while len(order) < max(ks) and len(order) < len(ms):
            parents = sorted(order, key=lambda i: ms[i])[:PARENTS]
            rest = [i for i in range(len(ms)) if i not in order]
            near = [(min(distance(decisions[i], decisions[p]) for p in parents), rng.random(), i) for i in rest]
            order += [i for _, _, i in sorted(near)[:ROUND]]
        for k in ks:
            scores[k].append(min(ms) / min(ms[i] for i in order[:k]))
    return {k: float(np.mean(v)) for k, v in scores.items()}


def search_at(model, tok, sentences, ms: list, ks, learn: bool) -> dict:
    """{k: best / best after k programs} of the tlm strategy's loop on the pool: a first round
    of the model's 8 likeliest, then rounds of 8, half the unmeasured programs nearest the 4 best
    measured (the strategy's edits), half the likeliest left. With `learn`, each round first
    fine-tunes a copy of the model on the programs measured so far, as `tc.tune(learn=True)`
    does (TLMSearch._learn), and ranks by the updated likelihood."""
    import copy

    from minitc.lm.data import examples, throughput_weights
    from minitc.lm.train import train

    model = copy.deepcopy(model) if learn else model
    decisions = [dict(s.decisions) for s in sentences]
    likely = list(np.argsort(-np.asarray(log_likelihoods(model, tok, sentences)), kind="stable"))
    order = [int(i) for i in likely[:ROUND]]
    while len(order) < max(ks) and len(order) < len(ms):
        if learn:
            weights = throughput_weights([ms[i] for i in order])
            data = examples(tok, [sentences[i] for i in order], weights)
            train(model, data, epochs=1, batch_size=16, lr=5e-5, warmup=1, seed=len(order))
            likely = list(np.argsort(-np.asarray(log_likelihoods(model, tok, sentences)), kind="stable"))
        parents = sorted(order, key=lambda i: ms[i])[:PARENTS]
        rest = [i for i in range(len(ms)) if i not in order]
        near = sorted(rest, key=lambda i: (min(distance(decisions[i], decisions[p]) for p in parents), likely.index(i)))
        picked = near[: ROUND // 2]
        picked += [int(i) for i in likely if i in rest and i not in picked][: ROUND - len(picked)]
        order += picked
    return {k: min(ms) / min(ms[i] for i in order[:k]) for k in ks}


def pool(entries, fingerprint, workload) -> tuple:
    """(sentences, ms) of D's successful programs of `workload`, one per distinct program (its
    fastest record)."""
    best = {}
    for e in entries:
        if e.fingerprint == fingerprint and e.name == workload and e.ok and e.median_ms > 0:
            if e.sentence not in best or e.median_ms < best[e.sentence].median_ms:
                best[e.sentence] = e
    kept = list(best.values())
    return [e.parsed for e in kept], [e.median_ms for e in kept]


def evaluate_description(model, tok, entries, fingerprint, ks, evo_seeds) -> list:
    """One row per TEST workload D measured: the pool's size and each method's score at each k
    (None where k is not below the pool's size)."""
    rows = []
    for w in TEST:
        sentences, ms = pool(entries, fingerprint, w)
        if len(ms) < 2:
            continue
        order = np.argsort(-np.asarray(log_likelihoods(model, tok, sentences)), kind="stable")
        scored = [k for k in ks if k < len(ms)]
        evo = evo_at(ms, [dict(s.decisions) for s in sentences], scored, evo_seeds)
        loop = search_at(model, tok, sentences, ms, scored, learn=False) if scored else {}
        learned = search_at(model, tok, sentences, ms, scored, learn=True) if scored else {}
        row = {"description": fingerprint, "workload": w, "pool": len(ms), "best_ms": min(ms)}
        for k in ks:
            small = k < len(ms)
            row[f"TLM@{k}"] = min(ms) / min(ms[i] for i in order[:k]) if small else None
            row[f"Search@{k}"], row[f"Learn@{k}"] = loop.get(k), learned.get(k)
            row[f"Random@{k}"] = random_at(ms, k) if small else None
            row[f"Evo@{k}"] = evo.get(k)
        rows.append(row)
    return rows


def _geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def table(rows: list, ks) -> str:
    """Per description and workload, then the geomean per description, each method at each k."""
    cols = [f"{m}@{k}" for k in ks for m in ("TLM", "Search", "Learn", "Evo", "Random")]
    head = ["description", "workload", "pool"] + cols
    lines = [head]
    for r in rows:
        lines.append([r["description"], r["workload"], str(r["pool"])] + [_fmt(r.get(c)) for c in cols])
    for fp in dict.fromkeys(r["description"] for r in rows):
        mine = [r for r in rows if r["description"] == fp]
        lines.append([fp, "geomean", ""] + [_fmt(_geomean(r.get(c) for r in mine)) for c in cols])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


@click.command()
@click.option("--descriptions", default="", help="Comma-separated CPU fingerprints (default: every one).")
@click.option("--base", default=None, help="Checkpoint to fine-tune (default: the Zen 2 model of a6df68c).")
@click.option("--models", default=None, help="Folder of the left-out models (default: the cache's lm-offline/).")
@click.option("--epochs", default=1, show_default=True)
@click.option("--max-seconds", default=240.0, show_default=True, help="Cap of each fine-tune.")
@click.option("--threads", default=1, show_default=True)
@click.option("--ks", default="1,3,10,64", show_default=True)
@click.option("--evo-seeds", default=32, show_default=True)
@click.option("--json", "json_path", default=None)
def main(descriptions, base, models, epochs, max_seconds, threads, ks, evo_seeds, json_path) -> None:
    """Offline leave-one-hardware-out of the language model (module docstring)."""
    from minitc.autotune.cost_model import torch_threads
    from minitc.lm.dataset import load
    from minitc.lm.hardware import cache_dir
    from minitc.lm.pipeline import load_model

    def say(msg):
        click.echo(msg, err=True)

    cpus = set(cpu_descriptions(load(sentences=False)))
    entries = [e for e in load() if e.fingerprint in cpus]
    fps = [d for d in descriptions.split(",") if d] or cpu_descriptions(entries)
    folder = Path(models) if models else cache_dir() / "lm-offline"
    base = Path(base) if base else zen2_base(folder / "zen2.pt")
    ks = [int(k) for k in ks.split(",")]
    rows, trained = [], {}
    for fp in fps:
        start = time.perf_counter()
        out = folder / f"lm-without-{fp}.pt"
        meta = left_out_model(base, entries, fp, out, epochs=epochs, max_seconds=max_seconds, threads=threads, say=say)
        keys = ("demonstrations", "steps", "seconds", "final_loss")
        trained[fp] = {"checkpoint": str(out), **{k: meta.get(k) for k in keys}}
        model, tok, _ = load_model(out)
        with torch_threads(threads):
            rows += evaluate_description(model, tok, entries, fp, ks, evo_seeds)
        say(f"{fp}: done in {time.perf_counter() - start:.0f} s")
    click.echo(table(rows, ks))
    if json_path:
        settings = {"base": str(base), "epochs": epochs, "max_seconds": max_seconds, "threads": threads}
        run = {"settings": settings, "test_workloads": list(TEST), "ks": ks, "evo_seeds": evo_seeds}
        Path(json_path).write_text(json.dumps({"run": run, "models": trained, "rows": rows}, indent=1))
        say(f"wrote {json_path}")


if __name__ == "__main__":
    main()
