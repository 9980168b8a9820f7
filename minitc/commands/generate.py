"""`minitc generate MODEL`: greedy text generation through torch.compile(backend="minitc",
dynamic=True), its tokens checked against eager, prefill and decode timed side by side
(minitc.benchmarks.generation)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from minitc.commands import checks


@click.command(name="generate")
@click.argument("model", metavar="MODEL")
@click.option("--prompt-len", default=128, show_default=True, type=click.IntRange(min=1), help="Tokens of the prompt.")
@click.option("--new", default=64, show_default=True, type=click.IntRange(min=2), help="Tokens to generate.")
@click.option("--threads", default=2, show_default=True, type=click.IntRange(min=1), help="Threads for all systems.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1), help="Timed rounds (medians).")
@click.option("--inductor", is_flag=True, help="Time torch.compile(dynamic=True) (Inductor) too.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the record here.")
def generate(model, prompt_len, new, threads, rounds, inductor, json_path):
    """Generate NEW tokens greedily after a random prompt with the decoder MODEL (random weights):
    gpt2, llama, gpt2-tiny or llama-tiny. The prefill and every decode step, whose key/value
    cache grows, run through a few compiled graphs (one per bucket of lengths, not one per
    token).

    \b
    Examples:
      minitc generate gpt2 --prompt-len 128 --new 64
      minitc generate llama-tiny --new 16 --inductor
    """
    from minitc.benchmarks import generation

    checks.check_output(json_path, "--json")
    if model not in generation.DECODERS:
        raise click.BadParameter(f"choose one of {', '.join(generation.DECODERS)}", param_hint="MODEL")
    record = generation.measure(model, prompt_len, new, threads, rounds, inductor)
    click.echo(generation.table([record]))
    if record.get("mismatch"):
        click.echo(f"tokens differ from eager's: {', '.join(record['mismatch'])}")
    if json_path:
        Path(json_path).write_text(json.dumps(record, indent=1))
