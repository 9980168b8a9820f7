"""The CUDA backend: CUDA C source from GPU loop nests (codegen.py, exprs.py), compiled with NVRTC and
launched through CuPy (runtime.py), and a numpy simulator of the GPU's semantics (sim.py)."""
