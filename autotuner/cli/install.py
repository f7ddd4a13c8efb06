"""`autotuner run -- script.py ...` and `autotuner install --report -- script.py ...`: a script run with every
autotuned Triton kernel of its process tuned through autotuner (autotuner.decorator.install), and what each
kernel met did: covered or left to Triton (why), keys seen, tuned here or reused, time spent."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from autotuner.cli.common import JsonOpt, console, fail, print_json

if TYPE_CHECKING:
    from autotuner.decorator.install import KernelReport

SCRIPT = {"allow_extra_args": True, "ignore_unknown_options": True}
ReportOpt = Annotated[bool, typer.Option("--report", help="after the script, list each autotuned kernel it met: "
                                                          "covered or not (why), keys, tuned here or reused, time")]


def _run(args: list[str]) -> int:
    from autotuner.decorator.install import run_script

    if not args:
        fail("name a script to run: autotuner run -- script.py [args...] (or -- -m module [args...])")
    try:
        run_script(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            console.print(exc.code)
            return 1
        return int(exc.code or 0)
    return 0


def run(ctx: typer.Context) -> None:
    """Run a Python script (or `-m module`) with every autotuned Triton kernel tuned through autotuner."""
    raise typer.Exit(_run(list(ctx.args)))


def install(ctx: typer.Context, report: ReportOpt = False, as_json: JsonOpt = False) -> None:
    """Run a script as `autotuner run` does; with --report, then list the autotuned kernels it met."""
    code = _run(list(ctx.args))
    if report or as_json:
        from autotuner.decorator.install import report as kernels

        rows = kernels()
        if as_json:
            print_json([dataclasses.asdict(r) for r in rows])
        else:
            _table(rows)
    raise typer.Exit(code)


def _table(rows: list[KernelReport]) -> None:
    table = Table(title=f"autotuned kernels met: {sum(r.covered for r in rows)} covered, "
                        f"{sum(not r.covered for r in rows)} left to Triton")
    for column in ("kernel", "library", "covered", "keys: where each config came from", "tuned here", "time (s)",
                   "first call (ms)"):
        table.add_column(column)
    for r in rows:
        keys = "\n".join(f"{k}: {s}" for k, s in r.keys.items()) or "-"
        table.add_row(r.name, r.library, f"yes: {r.how}" if r.covered else f"no: {r.how}", keys,
                      str(r.tuned_here) if r.covered else "-", f"{r.tuning_s:.2f}" if r.covered else "-",
                      f"{r.first_call_s * 1e3:.1f}" if r.first_call_s is not None else "-")
    console.print(table)
