"""Issue 20's reproducers for the Python API: each user mistake is a specific MinitcError with a
message that names the object at fault, a damaged language-model checkpoint is refused, and
handles or sentences made for something else are not silently applied."""

import shutil
import struct
import warnings
import zipfile

import numpy as np
import pytest

import minitc as tc
from minitc.autotune.space import Space
from minitc.driver import lower_gpu
from minitc.errors import DTypeError, ScheduleError

torch = pytest.importorskip("torch")

from minitc.lm.hardware import hardware  # noqa: E402 - after the importorskip
from minitc.lm.language import SentenceError, parse, sentence, space_values  # noqa: E402
from minitc.lm.model import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402
from minitc.lm.pipeline import SHIPPED  # noqa: E402


def _double():
    A = tc.placeholder((8, 8), "float32", name="A")
    return A, tc.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="C")


# -- a placeholder is an input, not something to build ---------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        lambda A: tc.build(A),
        lambda A: tc.build(A, target="cuda-sim"),
        lambda A: tc.lower(A),
        lambda A: tc.codegen(A, "cuda"),
        lambda A: lower_gpu(A),
        lambda A: tc.Schedule(A),
        lambda A: tc.build(tc.Schedule([A])),
    ],
)
def test_building_a_placeholder_is_a_user_error(entry):
    A, _ = _double()
    with pytest.raises(ScheduleError, match="A is a placeholder, an input with nothing to compute") as info:
        entry(A)
    assert "internal error" not in str(info.value) and "please report" not in str(info.value)


def test_a_placeholder_or_a_repeated_tensor_among_the_outputs_is_refused():
    A, C = _double()
    with pytest.raises(ScheduleError, match="A is a placeholder"):
        tc.build([C, A])
    with pytest.raises(ScheduleError, match="output C is listed twice"):
        tc.build([C, C])


# -- torch dtypes numpy cannot hold ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64", "complex64", "int32"])
def test_torch_argument_of_another_dtype_is_a_dtype_error(dtype):
    _, C = _double()
    f = tc.build(C)
    x = torch.ones(8, 8, dtype=getattr(torch, dtype))
    with pytest.raises(DTypeError, match=f"input A is a torch tensor of dtype {dtype}, expected float32") as info:
        f(x)
    assert ".to(torch.float32)" in str(info.value)
    good = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    with pytest.raises(DTypeError, match=f"output C is a torch tensor of dtype {dtype}"):
        f(good, out=x)
    np.testing.assert_array_equal(f(good).numpy(), good.numpy() * 2)  # the right dtype still runs


def test_parse_takes_text_only():
    with pytest.raises(SentenceError, match="a sentence is a str, got NoneType"):
        parse(None)
    with pytest.raises(SentenceError, match=r"got bytes; decode it first with .decode\('utf-8'\)"):
        parse(b"workload stage input float32 [4]")
    with pytest.raises(SentenceError, match="got int"):
        parse(3)


# -- checkpoint integrity ------------------------------------------------------------------------------


def _flip_weight_bytes(path, count: int = 64) -> None:
    """Invert `count` bytes in the middle of the largest tensor record of a torch zip file."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(data)


def _outputs(model, vocab_size: int):
    tokens = torch.randint(0, vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(tokens)[0]


def test_a_damaged_shipped_checkpoint_is_refused_and_an_intact_copy_loads(tmp_path):
    intact, damaged = tmp_path / "intact.pt", tmp_path / "damaged.pt"
    shutil.copy(SHIPPED, intact)
    shutil.copy(SHIPPED, damaged)
    _flip_weight_bytes(damaged)
    with pytest.raises(CheckpointError, match="content does not match its sha256") as info:
        load_checkpoint(damaged)
    assert str(damaged) in str(info.value) and "Reinstall minitc" in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the shipped checkpoint has its hash: no legacy warning
        model, vocab, _ = load_checkpoint(intact)
        shipped, _, _ = load_checkpoint(SHIPPED)
    assert torch.equal(_outputs(model, len(vocab)), _outputs(shipped, len(vocab)))


def test_a_saved_checkpoint_is_verified_and_a_legacy_one_warns(tmp_path):
    model, vocab, meta = load_checkpoint(SHIPPED)
    path = tmp_path / "mine.pt"
    save_checkpoint(path, model, vocab, meta)
    _flip_weight_bytes(path)
    with pytest.raises(CheckpointError, match=f"{path}: content does not match its sha256"):
        load_checkpoint(path)
    legacy = torch.load(SHIPPED, map_location="cpu", weights_only=True)
    legacy["format"] = "minitc-lm-1"  # what minitc wrote before checkpoints carried a hash
    del legacy["sha256"]
    torch.save(legacy, tmp_path / "legacy.pt")
    with pytest.warns(UserWarning, match="legacy.pt: this checkpoint has no content hash"):
        old, _, _ = load_checkpoint(tmp_path / "legacy.pt")
    assert torch.equal(_outputs(old, len(vocab)), _outputs(model, len(vocab)))


# -- handles and sentences made for something else -------------------------------------------------------


def test_a_loop_of_another_schedule_is_refused():
    _, C = _double()
    s, other = tc.Schedule(C), tc.Schedule(C)
    i, _ = other.loops(C)
    with pytest.raises(ScheduleError, match="loop i of C belongs to another Schedule"):
        s.split(i, factor=2)
    with pytest.raises(ScheduleError, match="belongs to another Schedule"):
        s.reorder(s.loops(C)[1], i)
    io, _ = s.split(s.loops(C)[0], factor=2)  # its own handles still work
    s.parallel(io)
    a = np.random.default_rng(0).random((8, 8), dtype=np.float32)
    np.testing.assert_array_equal(tc.build(s)(a), a * 2)


def test_a_name_two_stages_share_is_ambiguous():
    A = tc.placeholder((8, 8), "float32", name="A")
    T1 = tc.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="T")
    T2 = tc.compute((8, 8), lambda i, j: T1[i, j] + 1.0, name="T")
    s = tc.Schedule(T2)
    with pytest.raises(ScheduleError, match="stage name 'T' is ambiguous: 2 tensors .* pass the tensor object"):
        s.loops("T")
    with pytest.raises(ScheduleError, match="ambiguous"):
        s.compute_inline("T")
    first, second = s.stage_name(T1), s.stage_name(T2)
    assert first != second and s.loops(second) == s.loops(T2)  # each is reachable by its tensor
    s.compute_at(T1, s.loops(T2)[0])
    a = np.random.default_rng(0).random((8, 8), dtype=np.float32)
    np.testing.assert_allclose(tc.build(s)(a), a * 2 + 1)


def test_a_sentence_for_another_shape_is_refused():
    hw = hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})  # no machine measurement in tests

    def matmul_space(n):
        A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
        return Space(tc.ops.matmul(A, B), "llvm")

    big, small = matmul_space(256), matmul_space(128)
    program = big.replay(big.default_values())
    text = str(sentence(big, hw, program.decisions))
    assert space_values(big, parse(text)) == program.values
    with pytest.raises(SentenceError, match=r"stage s0 is `stage input float32 \[256 256\]`.*\[128 128\]"):
        space_values(small, parse(text))


def test_warnings_point_at_the_users_call_not_at_minitc():
    """A warning raised deep inside minitc (here the fallback report of tc.compile) names the
    line of the caller's code (errors.warn_user), so `python -W error` and IDEs point there."""
    import warnings

    torch = pytest.importorskip("torch")

    class Cumulative(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0) * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tc.compile(Cumulative(), (torch.randn(3, 5),))
    fallbacks = [w for w in caught if "through PyTorch" in str(w.message)]
    assert fallbacks and fallbacks[0].filename == __file__
