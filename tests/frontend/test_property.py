"""Property tests: small random CNNs and transformers (random_models.py) compile without a
fallback and match eager within 1e-4 of their largest output. The targets are pinned: 8 float
lanes (AVX2), and 16 (AVX-512, padded channels) where this host runs them; a few seeds run by
default, more with -m slow."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from random_models import random_cnn, random_transformer  # noqa: E402

import minitc as tc  # noqa: E402
from minitc.target import parse_target  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")

AVX2 = "llvm -mcpu=znver2 -num-cores=2"  # 8 float lanes
AVX512 = "llvm -mcpu=znver4 -num-cores=2"  # 16 float lanes: 24, 40 and 48 channels padded


def check(model, x, target):
    """Compiled without a fallback on minitc's errors, and equal to eager within 1e-4 of the
    largest output."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.CompilerFallbackWarning)
        compiled = tc.compile(model, (x,), target=target, db=False)
    assert compiled.fallbacks == []
    with torch.no_grad():
        expected = model(x).numpy()
    got = compiled(x).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * max(1.0, np.abs(expected).max()))


def targets():
    return [AVX2] + ([AVX512] if parse_target(AVX512).is_host_compatible else [])


@pytest.mark.parametrize("seed", range(4))
def test_random_cnns_match_eager(seed):
    model, x = random_cnn(seed)
    check(model, x, targets()[seed % len(targets())])


@pytest.mark.parametrize("seed", range(2))
def test_random_transformers_match_eager(seed):
    model, x = random_transformer(seed)
    check(model, x, AVX2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 64))
def test_more_random_cnns_match_eager(seed):
    model, x = random_cnn(seed)
    for target in targets():
        check(model, x, target)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 24))
def test_more_random_transformers_match_eager(seed):
    model, x = random_transformer(seed)
    check(model, x, AVX2)
