"""`python -m benchmarks`: the benchmark runner (same as `minitc bench`)."""
from .cli import main

if __name__ == "__main__":
    main()
