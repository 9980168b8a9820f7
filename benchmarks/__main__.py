"""`python -m minitc.benchmarks` (or `python -m benchmarks` from the repository root): the
benchmark runner, the same as `minitc bench`."""

from minitc.benchmarks.cli import main

if __name__ == "__main__":
    main()
