"""Falling back on minitc's own errors: a valid model always compiles.

An exception raised inside minitc while it imports a model, runs a graph pass over it or builds
a kernel is minitc's bug, never the user's. `tc.compile` then goes on without what failed, and
records where in `compiled.fallbacks`:

- import (importer.py): the ATen call whose conversion raised runs through PyTorch;
- pass (passes.run_all): the pass is skipped, when it raises or returns a graph that breaks the
  graph's rules (graph.verify: a name given twice, a value read before it is made);
- build (compiler.py): the node or fused group whose tensor expression, schedule or code
  generation raised runs through PyTorch (torch_ops.py computes every graph op).

One CompilerFallbackWarning per compile lists them with the errors and asks for a report.
`fallback=False` raises the first error instead. Errors of the user's making (input shapes and
dtypes at call time, options) are raised where they are found, never caught here.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from minitc.errors import CompilerFallbackWarning, warn_user

INTERNAL = "minitc failed: "  # how the reason of a `torch` node run for an internal error starts
REPORT = "This is a bug in minitc, not in the model: please report it, with the model and this message."


@dataclass(frozen=True)
class Fallback:
    """One internal error minitc compiled around: `stage` ("import", "pass", "build" or
    "compile"), `where` (the pass's name, the ATen call's or the graph node's name, the task, or
    the whole model) and `error` (the
    exception's type, message and innermost minitc frame)."""

    stage: str
    where: str
    error: str

    def __str__(self) -> str:
        return f"{self.stage} {self.where}: {self.error}"


def is_internal(node) -> bool:
    """Whether the `torch` node `node` runs through PyTorch because minitc failed on it."""
    return node.op == "torch" and node.attrs.get("reason", "").startswith(INTERNAL)


def error_text(e: BaseException) -> str:
    """'KeyError: x (at minitc/frontend/layout.py:120 in _conv)': the exception and the line
    of minitc that raised it, enough for a report."""
    text = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": ")
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "minitc" in f.filename.replace("\\", "/")]
    if frames:
        f = frames[-1]
        where = f.filename.replace("\\", "/")
        where = where[where.rfind("minitc/") :] if "minitc/" in where else where
        text += f" (at {where}:{f.lineno} in {f.name})"
    return text


def warn_fallbacks(fallbacks: list, label: str) -> None:
    """One CompilerFallbackWarning naming each of `fallbacks` (none: no warning)."""
    if not fallbacks:
        return
    what = {
        "import": "runs through PyTorch",
        "pass": "skipped",
        "build": "runs through PyTorch",
        "compile": "runs through PyTorch",
    }
    lines = [f"  - {f.stage} {f.where} ({what.get(f.stage, 'skipped')}): {f.error}" for f in fallbacks]
    warn_user(
        f"minitc: {len(fallbacks)} internal error(s) while compiling {label}; it compiled without what failed "
        f"(compiled.fallbacks lists them, fallback=False raises):\n" + "\n".join(lines) + f"\n{REPORT}",
        CompilerFallbackWarning,
    )


class EagerPlan:
    """The whole model run by PyTorch: what `tc.compile` falls back to when compiling a valid
    model failed inside minitc in a way no narrower fallback covers (an import that cannot even
    describe a value, such as a size known only at run time). Same interface as runtime.Plan."""

    torch_nodes: set = frozenset()
    steps: list = []
    label = "model"

    def __init__(self, model):
        self.model = model

    def check_inputs(self, arrays: list, shapes: bool = True) -> None:
        """PyTorch checks its own inputs."""

    def run(self, arrays: list, times: dict | None = None) -> list:
        import torch
        from torch.utils._pytree import tree_leaves

        with torch.inference_mode():
            out = self.model(*[torch.from_numpy(a) for a in arrays])
        return [t.detach().cpu().numpy() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
