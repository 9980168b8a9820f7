"""`torch.compile(model, backend="minitc")`: the torch dynamo backend (registered through the
entry point group `torch_dynamo_backends` in pyproject.toml).

Dynamo hands over each graph it captured as a GraphModule and example inputs; the graph goes
through the same import as `tc.compile` (torch.export of the GraphModule, then Core ATen).
"""

from __future__ import annotations

from minitc.frontend.compiler import compile_model


def backend(graph_module, example_inputs):
    """Compile one dynamo graph; the callable returns a tuple, as dynamo's graphs do."""
    compiled = compile_model(graph_module, tuple(example_inputs))

    def run(*args):
        out = compiled(*args)
        return out if isinstance(out, tuple) else (out,)

    return run
