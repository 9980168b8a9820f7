"""Model front end: PyTorch models through torch.export into minitc graphs, passes over them,
and compiled programs that run them (`tc.compile`). torch is imported only when a model is
compiled."""

from minitc.frontend.compiler import CompiledModel, UnsupportedOpsError, compile_model, extract_tasks, load
from minitc.frontend.graph import Graph, Node, Value
from minitc.frontend.importer import fallback_reasons, import_model, unsupported
from minitc.frontend.saved import SavedModelError

__all__ = [
    "CompiledModel", "Graph", "Node", "UnsupportedOpsError", "Value", "compile_model", "extract_tasks",
    "fallback_reasons", "import_model", "load", "SavedModelError", "unsupported",
]  # fmt: skip
