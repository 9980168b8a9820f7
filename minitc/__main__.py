"""`python -m minitc ...`: the command line, as the `minitc` script runs it."""

from minitc.cli import main

if __name__ == "__main__":
    main(prog_name="minitc")
