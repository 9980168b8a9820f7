"""The layers: imports only point down the list below (README, "Map of the code"), at module
level or inside a function, and across packages only public names are imported. No modules
import each other in a circle, however long, but for the few of KNOWN_CIRCLES.

A module's layer is the longest entry of LAYERS that names it or a package above it. Strings
that name a module (`"minitc.lm.cli:lm"` in the command table, `importlib.import_module(...)`)
count as imports. `minitc` itself (the API facade, `import minitc as tc`) sits with the driver.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
DIRS = {"minitc": "minitc", "backends": "minitc.backends", "lm": "minitc.lm", "benchmarks": "minitc.benchmarks"}

LAYERS = [
    (
        "IR and tensor expressions",
        (
            "minitc.errors",
            "minitc.dtypes",
            "minitc.expr",
            "minitc.arith",
            "minitc.te",
            "minitc.ir",
            "minitc.printer",
            "minitc.verify",
            "minitc.interp",
            "minitc.te_eval",
            "minitc.intrinsics",
            "minitc.ops",
        ),
    ),
    ("schedule primitives and traces", ("minitc.schedule",)),
    ("lowering", ("minitc.lowering",)),
    ("target description", ("minitc.target",)),
    ("backends", ("minitc.backends",)),
    ("operator templates", ("minitc.templates",)),
    ("tuning", ("minitc.autotune",)),
    ("API and model front end", ("minitc.driver", "minitc.explanation", "minitc.timing", "minitc.frontend", "minitc")),
    ("language model", ("minitc.lm",)),
    ("benchmarks", ("minitc.benchmarks",)),
    ("command line", ("minitc.cli", "minitc.commands", "minitc.explore", "minitc.__main__")),
]
_MODULE_STRING = re.compile(r"minitc(\.\w+)+(?=$|:)")


def layer_of(module: str) -> int | None:
    """Index into LAYERS of the longest entry naming `module` or a package above it; `minitc`
    alone (the facade) only matches exactly."""
    best, best_len = None, -1
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            hit = module == name or (name != "minitc" and module.startswith(name + "."))
            if hit and len(name) > best_len:
                best, best_len = i, len(name)
    return best


def package_sources() -> dict:
    """{dotted module name: source} of every module of the installed package."""
    out = {}
    for directory, package in DIRS.items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            parts = list(path.relative_to(ROOT / directory).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path.read_text()
    return out


def _imports(module: str, source: str, modules: set):
    """(imported module, line, private names taken) for every import in `source`."""
    is_package = any(m.startswith(module + ".") for m in modules)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            plain = [a.name for a in node.names if f"{base}.{a.name}" not in modules]
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}", node.lineno, ()
            if plain:
                yield base, node.lineno, tuple(n for n in plain if n.startswith("_") and not n.startswith("__"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _MODULE_STRING.match(node.value)
            if match and match.group(0) in modules:
                yield match.group(0), node.lineno, ()


def violations(sources: dict) -> list:
    """Every import in `sources` that points up the layers, reaches a private name of another
    package, or uses a pre-namespace top-level name."""
    modules = set(sources) | {"minitc"}
    found = []
    for module, source in sources.items():
        here = layer_of(module)
        package = module.rsplit(".", 1)[0]
        for target, line, private in _imports(module, source, modules):
            top = target.split(".")[0]
            if top in ("backends", "lm", "benchmarks"):
                found.append(f"{module}:{line} imports {target}: the package is minitc.{target}")
                continue
            if top != "minitc":
                continue
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                found.append(
                    f"{module}:{line} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]}), a layer above"
                )
            if private and target.rsplit(".", 1)[0] != package and target != package:
                found.append(f"{module}:{line} takes private {', '.join(private)} from {target}")
    return found


# Circles that stand today, each to be broken by whoever owns it (issue 43, item 4); one that
# is gone must leave this list, so that it cannot come back.
KNOWN_CIRCLES: tuple = ()


def import_graph(sources: dict) -> dict:
    """{module: set of the modules of `sources` it imports}, at module level or inside a function."""
    modules = set(sources) | {"minitc"}
    graph = {m: set() for m in modules}
    for module, source in sources.items():
        graph[module] = {t for t, _, _ in _imports(module, source, modules) if t in modules and t != module}
    return graph


def circles(graph: dict) -> list:
    """The strongly connected sets of two or more modules (Tarjan), each sorted, in name order."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while not part or v not in part:
                part.add(stack.pop())
            on_stack.difference_update(part)
            if len(part) > 1:
                found.append(tuple(sorted(part)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_new_import_circles():
    found = circles(import_graph(package_sources()))
    assert [c for c in found if c not in KNOWN_CIRCLES] == []


def test_known_circles_still_stand():
    """A circle that was broken leaves KNOWN_CIRCLES, so that it cannot come back."""
    found = circles(import_graph(package_sources()))
    assert [c for c in KNOWN_CIRCLES if c not in found] == []


def test_removed_circles_would_be_caught():
    """The circles issue 43 removed, planted again (a lazy import counts too)."""
    sources = dict(package_sources())
    sources["minitc.autotune.worker"] += "\nfrom minitc.autotune import runner\n"
    sources["minitc.ir"] += "\ndef f():\n    from minitc.printer import format_kernel\n"
    sources["minitc.ops.calls"] += "\nimport minitc.ops.registry\n"
    sources["minitc.ops.registry"] += "\nfrom minitc.ops.calls import OpCall\n"
    sources["minitc.schedule.kinds"] += "\nfrom minitc.schedule.trace import Step\n"
    found = [c for c in circles(import_graph(sources)) if c not in KNOWN_CIRCLES]
    assert ("minitc.autotune.runner", "minitc.autotune.worker") in found
    assert ("minitc.ir", "minitc.printer") in found
    assert ("minitc.ops.calls", "minitc.ops.registry") in found
    assert ("minitc.schedule.kinds", "minitc.schedule.trace") in found


def test_every_module_has_a_layer():
    missing = [m for m in package_sources() if layer_of(m) is None]
    assert not missing, missing


def test_imports_point_down_the_layers():
    assert violations(package_sources()) == []


def test_a_planted_upward_import_is_caught():
    sources = package_sources()
    planted = dict(sources)
    planted["minitc.expr"] = sources["minitc.expr"] + "\n\ndef f():\n    from minitc.autotune import tuner\n"
    planted["minitc.target.cpu"] = sources["minitc.target.cpu"] + "\nimport minitc.lm.strategy\n"
    planted["minitc.templates.gemm"] = sources["minitc.templates.gemm"] + "\nLOADER = 'minitc.benchmarks.cli:bench'\n"
    found = violations(planted)
    assert any(v.startswith("minitc.expr:") and "minitc.autotune.tuner (tuning)" in v for v in found), found
    assert any(v.startswith("minitc.target.cpu:") and "minitc.lm.strategy" in v for v in found), found
    assert any(v.startswith("minitc.templates.gemm:") and "minitc.benchmarks.cli" in v for v in found), found
    assert len(found) == 3


def test_private_names_and_old_top_level_names_are_caught():
    sources = dict(package_sources())
    sources["minitc.autotune.space"] += "\nfrom minitc.templates import _LOADED\n"
    sources["minitc.lm.data"] += "\nimport backends.llvm\n"
    found = violations(sources)
    assert any("private _LOADED" in v for v in found) and any("minitc.backends.llvm" in v for v in found), found


def test_layer_of():
    assert LAYERS[layer_of("minitc.expr")][0] == "IR and tensor expressions"
    assert LAYERS[layer_of("minitc")][0] == "API and model front end"
    assert LAYERS[layer_of("minitc.backends.llvm.jit")][0] == "backends"
    assert LAYERS[layer_of("minitc.commands.tune")][0] == "command line"


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {
        ".".join([package, *init.parent.relative_to(ROOT / directory).parts])
        for directory, package in DIRS.items()
        for init in (ROOT / directory).rglob("__init__.py")
    }
    assert set(config["packages"]) >= packages, packages - set(config["packages"])
    assert {k: v for k, v in config["package-dir"].items() if k != v} == {v: k for k, v in DIRS.items() if k != v}
