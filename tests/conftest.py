import os

import pytest

os.environ.setdefault("MINITC_CHECK", "1")  # model plans run checked in the tests (minitc/frontend/checked.py)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/*.txt from the current output")


@pytest.fixture
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture
def fake_cupy(monkeypatch, tmp_path):
    """A fake CuPy in sys.modules whose kernels run on the host (fake_cupy.py)."""
    from fake_cupy import install_fake_cupy

    return install_fake_cupy(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def hw():
    """The host's CPU hardware line of the tensor-language tests, with explicit measurements: no
    machine measurement runs in tests (test_lm_gpu.py has the GPU's)."""
    from minitc.lm.hardware import hardware

    return hardware("llvm", measured={"gflops": 200.0, "gbps": 30.0})


@pytest.fixture(scope="module")
def tok():
    """The tokenizer of the shipped vocabulary."""
    from minitc.lm.tokenizer import Tokenizer

    return Tokenizer.default()


@pytest.fixture(autouse=True, scope="session")
def _private_records_db(tmp_path_factory):
    """Tests never read or write the user's tuning records."""
    import os

    path = tmp_path_factory.mktemp("records") / "records.db"
    old = os.environ.get("MINITC_DB")
    os.environ["MINITC_DB"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MINITC_DB", None)
    else:
        os.environ["MINITC_DB"] = old
