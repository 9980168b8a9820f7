"""Pretraining, fine-tuning and loading of the tensor language model.

    pretrain("pretrain.jsonl", "minitc.lm.pt")                 # on unmeasured random programs
    finetune("minitc.lm.pt", "records.db", "lm-ft.pt")          # on measured ones, throughput-weighted
    finetune("minitc.lm.pt", None, "lm-ft.pt", data=DATA_DIR)    # on the kept dataset (lm/dataset.py)
    model, tok, meta = load_model()                      # the model `tc.tune` uses by default

Which model `load_model()` picks: the MINITC_LM environment variable if set, else the user's
own fine-tuned model (`minitc tune --learn` writes it next to the records database), else the
checkpoint shipped in the package (lm/checkpoints/cpu.pt). For a GPU (`load_model(gpu=True)`):
MINITC_LM_GPU if set, else the shipped GPU checkpoint (lm/checkpoints/gpu.pt), trained on GPU
sentences and measurements (docs/gpu.md#the-language-model-on-gpus).
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from minitc.autotune.cost_model import torch_threads
from minitc.autotune.database import Database, default_path
from minitc.lm.language import GpuHardware
from minitc.lm.model import LMError, ModelConfig, TensorLM, load_checkpoint, save_checkpoint
from minitc.lm.tokenizer import Tokenizer
from minitc.lm.train import evaluate, train

SHIPPED = Path(__file__).with_name("checkpoints") / "cpu.pt"
SHIPPED_GPU = SHIPPED.with_name("gpu.pt")


def user_model_path() -> Path:
    """Where `minitc tune --learn` keeps the user's model: next to the records database
    (~/.cache/minitc, or the folder of $MINITC_DB)."""
    return default_path().parent / "lm-finetuned.pt"


def adapted_model_path(fingerprint: str) -> Path:
    """Where `minitc lm adapt` writes the model it adapted to the machine `fingerprint`
    (minitc.target.hardware_fingerprint): the folder of user_model_path."""
    return user_model_path().parent / f"lm-adapted-{fingerprint}.pt"


def default_model_path(gpu: bool = False) -> Path:
    if gpu:
        return Path(os.environ.get("MINITC_LM_GPU") or SHIPPED_GPU)
    env = os.environ.get("MINITC_LM")
    if env:
        return Path(env)
    user = user_model_path()
    return user if user.exists() else SHIPPED


def load_model(path=None, gpu: bool = False) -> tuple:
    """(model, tokenizer, meta) of a checkpoint (default: see the module docstring)."""
    path = Path(path) if path is not None else default_model_path(gpu)
    if not path.exists():
        raise LMError(
            f"no language model at {path}: train one with `minitc lm pretrain`, or reinstall minitc "
            "(the package ships lm/checkpoints/cpu.pt)"
        )
    model, vocab, meta = load_checkpoint(path)
    return model, Tokenizer(vocab), meta


def _own_threads(fn):
    """Run `fn` with its `threads` keyword's torch threads (default: every CPU), then give the
    caller back its own setting: a tuning run that fine-tunes must not slow the user's torch."""

    @functools.wraps(fn)
    def run(*args, threads=None, **kwargs):
        with torch_threads(threads or max(1, os.cpu_count() or 1)):
            return fn(*args, threads=threads, **kwargs)

    return run


@_own_threads
def pretrain(
    data,
    out,
    *,
    config: dict | None = None,
    epochs: int = 2,
    batch_size: int = 32,
    lr: float = 5e-4,
    max_seconds: float | None = 3600,
    seed: int = 0,
    threads: int | None = None,
    progress=None,
    init=None,
) -> dict:
    """Train a new model on the sentences of gen-data file(s) `data` (loss on decision tokens only);
    with `init`, a checkpoint to start from instead of random weights (the GPU model starts from
    the CPU one: workload lines and the grammar are the same)."""
    from minitc.lm.data import examples, read_sentences

    torch.manual_seed(seed)
    tok = Tokenizer.default()
    files = [data] if isinstance(data, (str, Path)) else list(data)
    items = [item for f in files for item in read_sentences(f)]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(items))
    n_val = max(1, len(items) // 50)
    val = examples(tok, [items[i][1] for i in order[:n_val]])
    train_set = examples(tok, [items[i][1] for i in order[n_val:]])
    history = []
    if init is None:
        model = TensorLM(ModelConfig(vocab_size=len(tok), **(config or {})))
    else:
        model, own, init_meta = load_model(init)
        if list(tok.vocab[: len(own)]) != list(own.vocab):
            raise LMError(f"{init}: its vocabulary is not a prefix of this minitc's; pretrain a new model instead")
        model = model.with_vocab(len(tok))
        history = list(init_meta.get("history", [])) + [{k: v for k, v in init_meta.items() if k != "history"}]
    start = time.perf_counter()
    losses = train(
        model,
        train_set,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        max_seconds=max_seconds,
        progress=progress,
    )
    seconds = time.perf_counter() - start
    metrics = evaluate(model, val)
    meta = {
        "stage": "pretrain",
        "sentences": len(train_set),
        "hardware": str(items[0][1].hardware),
        "workloads": sorted({w for w, _ in items}),
        "seconds": round(seconds, 1),
        "steps": len(losses),
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "val_loss": metrics["loss"],
        "val_accuracy": metrics["accuracy"],
        "parameters": model.num_parameters(),
        **({"init": str(init), "history": history} if init is not None else {}),
    }
    save_checkpoint(out, model, tok.vocab, meta)
    return meta


@_own_threads
def finetune(
    checkpoint,
    db,
    out,
    *,
    data=None,
    hardware=None,
    leave_out: str | None = None,
    demos: list | None = None,
    source: str | None = None,
    stage: dict | None = None,
    epochs: int = 4,
    batch_size: int = 32,
    lr: float = 1e-4,
    sharpness: float = 4.0,
    max_seconds: float | None = None,
    threads: int | None = None,
    seed: int = 0,
    progress=None,
) -> dict:
    """Continue training `checkpoint` on the measured programs of the records database `db`, or
    (with `db=None`) of the dataset folder `data` (lm/dataset.py: only the fingerprints in
    `hardware` if given, without those of `leave_out`), each weighted by its throughput relative
    to its workload's best (data.demonstrations, data.dataset_demonstrations); or on `demos`,
    (Sentence, weight) pairs made by the caller, from `source`. `stage` adds to (or overrides)
    the new checkpoint's meta."""
    from minitc.lm.data import examples

    torch.manual_seed(seed)
    model, tok, meta = load_model(checkpoint)
    if demos is None:
        demos = _demonstrations(db, data, hardware, leave_out, sharpness)
        source = str(db if db is not None else data)
    if not tok.writes_gpu():  # a CPU model's vocabulary cannot write a GPU's sentences
        demos = [(s, w) for s, w in demos if not isinstance(s.hardware, GpuHardware)]
    if not demos:
        raise LMError(f"no measured programs with sentences in {source}: run `minitc lm measure` first")
    demo_set = examples(tok, [s for s, _ in demos], [w for _, w in demos])
    lines = Counter(str(s.hardware) for s, _ in demos)
    start = time.perf_counter()
    losses = train(
        model,
        demo_set,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        warmup=10,
        seed=seed,
        max_seconds=max_seconds,
        progress=progress,
    )
    history = list(meta.get("history", [])) + [{k: v for k, v in meta.items() if k != "history"}]
    meta = {
        "stage": "finetune",
        "demonstrations": len(demo_set),
        "source": source,
        "hardware": lines.most_common(1)[0][0],
        "hardware_lines": dict(sorted(lines.items())),  # every machine trained on, with its programs
        "weight_sum": round(sum(w for _, w in demos), 2),
        "seconds": round(time.perf_counter() - start, 1),
        "steps": len(losses),
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "parameters": model.num_parameters(),
        **(stage or {}),
        "history": history,
    }
    save_checkpoint(out, model, tok.vocab, meta)
    return meta


def _demonstrations(db, data, hardware, leave_out, sharpness: float) -> list:
    """(Sentence, weight) pairs of a records database or of a dataset folder, one of them."""
    from minitc.lm.data import dataset_demonstrations, demonstrations
    from minitc.lm.dataset import load, split_by_hardware

    if (db is None) == (data is None):
        raise LMError("fine-tune on one source: a records database (db) or a dataset folder (data)")
    if data is None:
        with Database(db) as database:
            return demonstrations(database, sharpness=sharpness)
    entries = load(data, hardware=hardware)
    if leave_out:
        entries = split_by_hardware(entries, leave_out)[0]
    return dataset_demonstrations(entries, sharpness)
