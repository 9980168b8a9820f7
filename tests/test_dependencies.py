"""Every module the package, the tests and the examples import is the standard library, the
project's own, or installed by a dependency that pyproject.toml declares (in `dependencies` or
an extra). A package installed by hand on one machine cannot then hide a missing declaration:
the suite fails on every machine, not only on a fresh one."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).parent.parent
CHECKED = ("minitc", "backends", "lm", "benchmarks", "tests", "examples")
# Distributions whose import name is not their name, for those not installed here (installed
# ones are read from their metadata).
IMPORT_NAMES = {"cupy-cuda13x": {"cupy", "cupy_backends"}, "pytest-benchmark": {"pytest_benchmark"}}


def declared_distributions() -> set:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def importable_names(distributions: set) -> set:
    """The top-level modules the distributions install."""
    names = set()
    for module, dists in importlib.metadata.packages_distributions().items():
        if {d.lower().replace("_", "-") for d in dists} & distributions:
            names.add(module)
    for dist in distributions:
        names |= IMPORT_NAMES.get(dist, {dist.replace("-", "_")})
    return names


def local_modules(folder: Path) -> set:
    """Modules a script or test in `folder` imports from beside it or from a folder above it up to
    the checked one (tests/helpers.py, which conftest.py puts on the path, fake_cupy.py...)."""
    names = set()
    for above in (folder, *folder.parents):
        names |= {p.stem for p in above.glob("*.py")}
        names |= {p.name for p in above.iterdir() if (p / "__init__.py").exists()}
        if above.parent == ROOT or above == ROOT:
            break
    return names


def imports_of(path: Path):
    """(line, top-level module) of every absolute import in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def undeclared_imports() -> list:
    allowed = set(sys.stdlib_module_names) | {"minitc"} | importable_names(declared_distributions())
    found = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            local = local_modules(path.parent)
            for line, module in imports_of(path):
                if module not in allowed and module not in local:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return found


def test_every_import_is_declared():
    assert undeclared_imports() == [], "imports no dependency or extra of pyproject.toml installs"


def test_the_check_finds_an_undeclared_import(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import numpy\nfrom scipy.special import erf\nimport helpers\n")
    (tmp_path / "tests" / "helpers.py").write_text("import json\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "CHECKED", ("tests",))
    assert undeclared_imports() == ["tests/test_x.py:2: scipy"]
