"""`autotuner replay`: the search engine against a recorded landscape (a measurement is a table look-up)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from autotuner.cli.common import JsonOpt, command, console, fail, print_json
from autotuner.engine.search.strategies import strategies_help


@command
def replay(
    landscape: Path = typer.Argument(..., help="a landscape JSON file (format in docs/design/engine.md)"),
    budget: int = typer.Option(49, "--budget", min=1, help="distinct configs to measure"),
    seed: int = typer.Option(0, "--seed"),
    strategy: str = typer.Option("tpe", "--strategy", help=f"the search: {strategies_help()}"),
    width: int = typer.Option(14, "--width", min=1, help="configs asked ahead, as a tuner with a compile pool this "
                                                          "wide does (14: a one-GPU 16-core host)"),
    as_json: JsonOpt = False,
) -> None:
    """Run the search engine against a recorded landscape (a measurement is a table look-up)."""
    from autotuner.engine.search.replay import load_landscape
    from autotuner.engine.search.replay import replay as run_replay

    try:
        result = run_replay(load_landscape(landscape), budget, seed, strategy, width)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        print_json(result)
    elif result["best_ms"] is None:
        console.print(f"{result['landscape']}: {result['evaluations']} evaluations, every one failed")
    else:
        console.print(f"{result['landscape']}: {result['evaluations']} evaluations, best {result['best_ms']:.4f} ms, "
                      f"optimum {result['optimum_ms']:.4f} ms ({result['best_ms'] / result['optimum_ms'] - 1:+.1%}); "
                      f"best config {json.dumps(result['best_config'])}")
