"""The models suite's real-size families (benchmarks/zoo_realsize.py): registered, not run by
default, and each family's structure, shrunk, compiles and matches PyTorch eager. Nothing
here builds a real-size model."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the real-size families are transformers models")

import minitc as tc  # noqa: E402
from minitc.benchmarks.models_systems import RTOL  # noqa: E402
from minitc.benchmarks.models_zoo import DEFAULT_MODELS, MODELS, REALSIZE, select  # noqa: E402
from minitc.benchmarks.zoo_realsize import REALSIZE as FACTORIES  # noqa: E402
from minitc.benchmarks.zoo_realsize import SHRUNK  # noqa: E402
from minitc.frontend import unsupported  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")

FAMILIES = ["vit-b16", "swin-t", "convnext-t", "efficientnet-b0", "whisper-base-encoder", "qwen2-0.5b"]
SLOW = {"swin-t", "efficientnet-b0"}  # 4-5 s each on 2 cores


def test_the_six_families_are_real_size_specs_run_only_when_named():
    assert REALSIZE == FAMILIES and set(SHRUNK) == set(FAMILIES)
    for name in FAMILIES:
        spec = MODELS[name]
        assert spec.full and not spec.default and spec.needs == "transformers", spec
    assert DEFAULT_MODELS == ["resnet50", "mobilenet_v2", "bert-base", "gpt2"]
    assert [s.name for s in select(["swin-t", "qwen2-0.5b"])] == ["swin-t", "qwen2-0.5b"]


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.heavy) if n in SLOW else n for n in FAMILIES]
)  # fmt: skip
def test_each_family_shrunk_compiles_and_matches_eager(name):
    model, inputs = FACTORIES[name][1](**SHRUNK[name])
    compiled = tc.compile(model, inputs, db=False)  # the templates: the user's records play no part
    with torch.no_grad():
        expected = model(*inputs)
    actual = compiled(*inputs)
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=RTOL, atol=1e-5 * float(expected.abs().max()))
    heavy = [op for op in unsupported(compiled.graph) if op.split(".")[1] in ("linear", "mm", "bmm", "convolution")]
    assert not heavy, unsupported(compiled.graph)
