"""docs/results.md is written from experiments/results/ by docs/results_page.py: it must
match the data it quotes (issue 43: results out of the README, generated, never drifting)."""

from pathlib import Path

from helpers import experiment

ROOT = Path(__file__).resolve().parents[2]


def _page_module():
    return experiment("results_page", "docs")


def test_the_results_page_matches_the_stored_results():
    page = _page_module()
    assert (ROOT / "docs" / "results.md").read_text() == page.page(), "run python docs/results_page.py"


def test_every_table_row_names_its_machine_and_every_table_its_command():
    text = (ROOT / "docs" / "results.md").read_text()
    sections = text.split("\n## ")[1:]
    assert len(sections) >= 5
    for section in sections:
        rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| host |")]
        body = [r for r in rows if not r.startswith("| machine |") and not r.startswith("| GPU |")]
        body = [r for r in body if not r.startswith("| left out |")]
        assert body, section[:60]
        assert all(("AMD" in r or "NVIDIA" in r or "Intel" in r or "znver" in r or "rocketlake" in r) for r in body)
        assert "Command" in section and ("`python " in section or "`minitc " in section)
