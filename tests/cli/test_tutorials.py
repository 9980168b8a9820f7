"""Every tutorial under docs/tutorials/ runs top to bottom in its fast mode (small shapes, few
trials: MINITC_TUTORIAL_FAST=1), from a directory other than the repository's, with its outputs
and tuning records in a temporary folder; each saves the plots it promises, and reads as a
notebook (the percent-cell format: a markdown title cell first)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.py"))
# what each tutorial saves into MINITC_TUTORIAL_OUT
OUTPUTS = {
    "03_matmul_cpu.py": ["03-matmul-climb.png", "03-matmul-climb.json"],
    "04_memory_bound.py": ["04-roofline.png"],
    "05_search.py": ["05-tuning-curve.png"],
    "06_tensor_language.py": ["06-model-vs-random.png"],
    "08_whole_model.py": ["08-memory-plan.png", "08-time-per-task.png"],
}


def test_the_eight_tutorials_are_there():
    assert [p.name[:2] for p in TUTORIALS] == [f"{n:02d}" for n in range(1, 9)]


HEAVY = ("03", "04", "05", "06", "08")  # 8-30 s each on 2 cores


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.heavy) if p.name[:2] in HEAVY else p for p in TUTORIALS],
    ids=[p.stem for p in TUTORIALS],
)
def test_tutorial_runs_in_fast_mode(path, tmp_path):
    text = path.read_text()
    assert text.startswith("# %% [markdown]\n# # "), "a tutorial opens with a markdown cell and its title"
    assert text.count("\n# %%") >= 4, "a tutorial is cut into cells"
    out = tmp_path / "out"
    env = {
        **os.environ,
        "MINITC_TUTORIAL_FAST": "1",
        "MINITC_TUTORIAL_OUT": str(out),
        "MINITC_DB": str(tmp_path / "records.db"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # the hardware description the model measures
        "MPLBACKEND": "Agg",
    }
    r = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"{path.name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "def " in r.stdout or "for " in r.stdout, "a tutorial prints loop nests or code"
    for name in OUTPUTS.get(path.name, []):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, f"{path.name} did not save {name}"
