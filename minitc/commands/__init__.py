"""Subcommands of the `minitc` command line (registered lazily in minitc/cli.py).

- `spec.py`: the `<op> --shape ...` syntax shared by `tune` and `show` (op families, option
  checking, building the placeholders and output with `tc.ops`, FLOPs and bytes of a call);
- `tune.py`: `minitc tune`; `show.py`: `minitc show`; `progress.py`: the live progress bar.
"""
