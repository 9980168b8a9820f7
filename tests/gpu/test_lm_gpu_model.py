"""The language model on GPUs: GPU training data (gen-data --target cuda), a model grown from the
CPU checkpoint's vocabulary, the `tlm` strategy picking the GPU model for a GPU space (and
falling back to evolutionary search without one), the shipped GPU checkpoint, and tlm-eval on a
GPU target (the simulator here). No GPU is needed."""

import json
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from lm_helpers import one_torch_thread

import minitc as tc
from minitc.autotune.space import Space
from minitc.lm.data import gen_data, read_sentences
from minitc.lm.decode import Decoder
from minitc.lm.hardware import gpu_hardware
from minitc.lm.model import LMError, ModelConfig, TensorLM, save_checkpoint
from minitc.lm.pipeline import SHIPPED, SHIPPED_GPU, load_model, pretrain
from minitc.lm.plugin import tlm_strategy
from minitc.lm.strategy import TLMSearch, trained_on_gpu
from minitc.lm.tokenizer import Tokenizer

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}
H100 = str(gpu_hardware("cuda"))


@pytest.fixture(scope="module")
def tiny_gpu_checkpoint(tmp_path_factory):
    torch.set_num_threads(1)
    tok = Tokenizer.default()
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("lm") / "tiny-gpu.pt"
    model = TensorLM(ModelConfig(vocab_size=len(tok), **TINY))
    save_checkpoint(path, model, tok.vocab, {"stage": "test", "hardware": H100})
    return path


def _matmul(n=64):
    A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
    return tc.ops.matmul(A, B)


def test_gen_data_writes_gpu_sentences(tmp_path):
    data = tmp_path / "gpu.jsonl"
    assert gen_data(data, ["matmul-256", "resnet18-c3"], per_workload=5, seed=2, target="cuda") == 10
    items = read_sentences(data)
    assert {str(s.hardware) for _, s in items} == {H100}
    assert all(s.decisions for _, s in items)


def test_a_model_grows_its_vocabulary_keeping_what_it_learned():
    torch.manual_seed(1)
    small = TensorLM(ModelConfig(vocab_size=20, **TINY)).eval()
    grown = small.with_vocab(27).eval()
    tokens = torch.tensor([[1, 5, 7, 19]])
    old, new = small(tokens)[0], grown(tokens)[0]
    assert new.shape[-1] == 27 and torch.allclose(old, new[..., :20], atol=1e-5)
    with pytest.raises(LMError, match="cannot shrink"):
        grown.with_vocab(10)


def test_pretraining_from_the_cpu_checkpoint_learns_gpu_tokens(tmp_path):
    data = tmp_path / "gpu.jsonl"
    gen_data(data, ["matmul-256"], per_workload=4, target="cuda")
    small_vocab = Tokenizer.default().vocab[:441]
    torch.manual_seed(0)
    init = tmp_path / "cpu-like.pt"
    save_checkpoint(init, TensorLM(ModelConfig(vocab_size=441, **TINY)), small_vocab, {"stage": "test"})
    meta = pretrain(data, tmp_path / "gpu.pt", epochs=1, batch_size=2, max_seconds=30, threads=1, init=init)
    model, tok, saved = load_model(tmp_path / "gpu.pt")
    assert len(tok) == len(Tokenizer.default()) == model.cfg.vocab_size and tok.writes_gpu()
    assert saved["init"] == str(init) and saved["history"][0]["stage"] == "test" == meta["history"][0]["stage"]
    assert trained_on_gpu(saved)
    other = tmp_path / "other.pt"
    save_checkpoint(other, TensorLM(ModelConfig(vocab_size=3, **TINY)), ["<pad>", "x", "y"], {})
    with pytest.raises(Exception, match="not a prefix|vocab"):
        pretrain(data, tmp_path / "bad.pt", epochs=1, max_seconds=5, threads=1, init=other)


def test_tlm_on_a_gpu_uses_the_gpu_model_or_falls_back_with_a_warning(tmp_path, monkeypatch, tiny_gpu_checkpoint):
    space = Space(_matmul(), "cuda-sim")
    monkeypatch.setenv("MINITC_LM_GPU", str(tiny_gpu_checkpoint))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny model's meta names no machine like this one
        search = tlm_strategy(space, np.random.default_rng(0))
    assert isinstance(search, TLMSearch) and search.meta["hardware"] == H100
    monkeypatch.setenv("MINITC_LM_GPU", str(tmp_path / "missing.pt"))
    with pytest.warns(UserWarning, match="no language model trained on GPU sentences"):
        fallback = tlm_strategy(space, np.random.default_rng(0))
    assert not isinstance(fallback, TLMSearch)
    with pytest.raises(LMError, match="never on a GPU's sentences"):
        tlm_strategy(space, np.random.default_rng(0), lm=SHIPPED)


def test_the_shipped_gpu_model_writes_legal_gpu_programs():
    if not SHIPPED_GPU.exists():
        pytest.fail(f"the package must ship a GPU model at {SHIPPED_GPU}")
    model, tok, meta = load_model(gpu=True)
    assert trained_on_gpu(meta) and tok.writes_gpu()
    with one_torch_thread():
        space = Space(_matmul(128), "cuda-sim")
        candidates, failures = Decoder(model, tok, space, gpu_hardware("cuda")).generate(8, np.random.default_rng(0))
    assert failures == 0 and len(candidates) == 8
    for c in candidates:
        assert space.replay(c.values).key == c.key


def _nvcc_workloads() -> dict:
    p = tc.placeholder
    X, W, b = p((256, 192), name="X"), p((384, 192), name="W"), p((384,), name="b")
    Xc = p((2, 32, 14, 14), name="X")
    return {
        "dense-gelu": tc.ops.dense(X, W, b, activation="gelu"),
        "conv2d": tc.ops.conv2d(Xc, p((64, 32, 3, 3), name="W"), padding=1),
        "conv2d_gemm": tc.ops.conv2d_gemm(Xc, p((64, 32 * 9), name="W"), 3, padding=1),
        "layer_norm": tc.ops.layer_norm(X, p((192,), name="g"), p((192,), name="beta")),
    }


@pytest.mark.heavy
def test_generated_gpu_programs_compile_with_nvcc(tmp_path):
    """Programs the shipped GPU model writes and programs sampled from the GPU design space (both
    sketches) for four workloads: one nvcc --ptx run for sm_90 compiles all of them."""
    import subprocess

    from cuda_tools import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    model, tok, _ = load_model(gpu=True)
    sources, rng = [], np.random.default_rng(0)
    with one_torch_thread():
        for name, out in _nvcc_workloads().items():
            space = Space(out, "cuda")
            decoded, failures = Decoder(model, tok, space, gpu_hardware("cuda")).generate(4, rng)
            assert failures == 0
            schedules = [space.replay(c.values).schedule for c in decoded]
            schedules += [space.sample(rng, sketch=sk).schedule for sk in space.sketches for _ in range(2)]
            for i, s in enumerate(schedules):
                kernel = f"{name.replace('-', '_')}_{i}"
                sources.append((kernel, tc.codegen(s, "cuda", name=kernel, db=False)))
    cu = tmp_path / "all.cu"
    cu.write_text("\n".join(src for _, src in sources))
    r = subprocess.run([nvcc, "--ptx", "-arch=sm_90", str(cu), "-o", str(tmp_path / "all.ptx")], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    ptx = (tmp_path / "all.ptx").read_text()
    assert all(f".entry {kernel}" in ptx for kernel, _ in sources)


@pytest.mark.heavy
def test_tlm_eval_runs_on_a_gpu_target(tmp_path, tiny_gpu_checkpoint):
    from minitc.cli import main

    out = tmp_path / "eval.json"
    args = ["bench", "--suite", "tlm-eval", "--target", "cuda-sim", "--workloads", "softmax-bert"]
    args += ["--tlm-k", "1,2", "--evo-trials", "2", "--lm", str(tiny_gpu_checkpoint), "--json", str(out), "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["rows"]
    assert len(row["tlm_history"]) == 2 and len(row["evo_history"]) == 2
    assert all(ms > 0 for ms in row["retimed_ms"].values()) and row["template_ms"] > 0
    for run in ("tlm_phases", "evo_phases"):  # where each search's seconds went
        assert row[run]["total"] >= row[run]["search"] + row[run]["run"] > 0
    bad = CliRunner().invoke(main, ["bench", "--suite", "smoke-tune", "--target", "cuda"])
    assert bad.exit_code != 0 and "--target applies to" in bad.output
    unknown = CliRunner().invoke(main, ["bench", "--suite", "tlm-eval", "--target", "tpu", "--workloads", "bmm-bert"])
    assert unknown.exit_code == 1 and unknown.output.startswith("Error: unknown target 'tpu'")


GPU_WORKLOADS = {
    "matmul": lambda: _matmul(64),
    "dense-gelu": lambda: tc.ops.dense(
        tc.placeholder((24, 40), name="X"), tc.placeholder((32, 40), name="W"), activation="gelu"
    ),
    "conv2d-pad": lambda: tc.ops.conv2d(
        tc.placeholder((1, 8, 10, 10), name="X"), tc.placeholder((16, 8, 3, 3), name="W"), stride=1, padding=1
    ),
    "softmax": lambda: tc.ops.softmax(tc.placeholder((12, 96), name="X")),
    "layer_norm": lambda: tc.ops.layer_norm(
        tc.placeholder((6, 80), name="X"), tc.placeholder((80,), name="G"), tc.placeholder((80,), name="B")
    ),
}


@pytest.mark.heavy
def test_constrained_decoding_writes_only_legal_gpu_programs():
    """Two thousand programs decoded by an untrained model (near-uniform choices reach every
    corner of the space) over five GPU workloads: every one replays, and every distinct program
    lowers to launches that pass the GPU checks (threads and shared memory per block, races)."""
    from minitc.backends import lower_gpu

    tok, hw = Tokenizer.default(), gpu_hardware("cuda")
    torch.manual_seed(5)
    with one_torch_thread():
        model = TensorLM(ModelConfig(vocab_size=len(tok), max_len=1024, **TINY)).eval()
        rng, total = np.random.default_rng(11), 0
        for name, make in GPU_WORKLOADS.items():
            space = Space(make(), "cuda-sim")
            candidates, failures = Decoder(model, tok, space, hw).generate(400, rng)
            assert failures == 0 and len(candidates) == 400, name
            total += len(candidates)
            for c in {c.key: c for c in candidates}.values():
                lower_gpu(space.replay(c.values).schedule, "cuda-sim")
    assert total == 2000


def test_a_cpu_model_is_not_fine_tuned_on_gpu_sentences(tmp_path):
    from minitc.lm.pipeline import finetune

    gen_data(tmp_path / "cpu.jsonl", ["matmul-256"], per_workload=3)
    gen_data(tmp_path / "gpu.jsonl", ["matmul-256"], per_workload=3, target="cuda")
    demos = [(s, 1.0) for name in ("cpu", "gpu") for _, s in read_sentences(tmp_path / f"{name}.jsonl")]
    torch.manual_seed(0)
    cpu_vocab = Tokenizer.default().vocab[:441]
    init = tmp_path / "cpu-like.pt"
    save_checkpoint(init, TensorLM(ModelConfig(vocab_size=441, **TINY)), cpu_vocab, {"stage": "test"})
    meta = finetune(init, None, tmp_path / "ft.pt", demos=demos, source="test", epochs=1, threads=1)
    assert meta["demonstrations"] == 3 and not trained_on_gpu(meta)


def test_tuning_and_training_give_back_the_callers_torch_threads(tmp_path, tiny_gpu_checkpoint):
    """The tlm strategy decodes on one torch thread and training uses its own count; neither
    may leave the process's torch slower afterwards (a compiled model was timed against a
    one-thread eager torch after tuning)."""
    from minitc.autotune.tuner import tune
    from minitc.lm.pipeline import finetune

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tune(_matmul(16), trials=2, strategy="tlm", target="cuda-sim", db=str(tmp_path / "r.db"))
        assert torch.get_num_threads() == 2
        demos = [(s, 1.0) for _, s in read_sentences(_gpu_sentences(tmp_path))]
        finetune(tiny_gpu_checkpoint, None, tmp_path / "ft.pt", demos=demos, source="test", epochs=1, threads=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _gpu_sentences(tmp_path):
    gen_data(tmp_path / "gpu.jsonl", ["matmul-256"], per_workload=2, target="cuda")
    return tmp_path / "gpu.jsonl"


def test_the_next_rounds_samples_are_written_while_a_gpu_round_is_measured(tiny_gpu_checkpoint):
    """decode_ahead writes in a background thread what the next round's ask ranks; that ask
    decodes nothing more when they suffice, and an error in the thread reaches the caller."""
    import threading

    from minitc.lm.pipeline import load_model

    model, tok, _ = load_model(tiny_gpu_checkpoint)
    space = Space(_matmul(), "cuda-sim")
    search = TLMSearch(space, model, tok, gpu_hardware("cuda"), np.random.default_rng(0))
    first = search.ask(8)
    search.tell(first, [1.0 + i for i in range(len(first))])
    search.decode_ahead(8)
    calls = []
    search.decoder.generate = lambda *a: calls.append(a) or pytest.fail("decoded again")
    second = search.ask(8)
    assert search.decoded_ahead == 2 * search._draw_size(8 - 4) and not calls
    assert len(second) == 8 and not {c.key for c in second} & {c.key for c in first}
    assert search.stats()["decoded_ahead"] == search.decoded_ahead
    assert not any(t.name == "minitc-decode-ahead" and t.is_alive() for t in threading.enumerate())

    def broken(*_):
        raise RuntimeError("the decoder failed")

    search.decoder.generate = broken
    search.decode_ahead(8)
    with pytest.raises(RuntimeError, match="the decoder failed"):
        search.ask(8)


@pytest.mark.parametrize("target, ahead", [("cuda-sim", True), ("llvm", False)])
def test_a_session_decodes_ahead_only_when_a_gpu_measures(tmp_path, monkeypatch, tiny_gpu_checkpoint, target, ahead):
    """On a CPU the decoding would disturb the timings; and the last round has nothing to
    write ahead for (tune returns with no decoding thread left)."""
    import threading

    from minitc.autotune.registry import STRATEGIES
    from minitc.autotune.tuner import tune
    from minitc.lm.hardware import hardware
    from minitc.lm.pipeline import load_model

    model, tok, _ = load_model(tiny_gpu_checkpoint)
    made = []

    def strategy(space, rng, cost_model=None, **_):
        made.append(TLMSearch(space, model, tok, hardware(space.target), rng))
        return made[-1]

    monkeypatch.setitem(STRATEGIES, "tlm-test", strategy)
    r = tune(_matmul(16), trials=4, batch=2, strategy="tlm-test", target=target, db=str(tmp_path / "r.db"))
    assert r.trials == 4 and r.errors == 0
    search = made[0]  # one round written ahead: the second (of two)
    assert search.decoded_ahead == (2 * search._draw_size(2 - round(2 * search.refine)) if ahead else 0)
    assert not any(t.name == "minitc-decode-ahead" and t.is_alive() for t in threading.enumerate())
