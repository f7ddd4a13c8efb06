"""`autotuner bench` (every way of computing one problem, timed alike) and `autotuner report` (a PNG)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from autotuner.cli.common import (
    DbOpt,
    DtypeOpt,
    JsonOpt,
    OpArg,
    ShapeOpt,
    command,
    console,
    problem,
    problem_options,
    settings,
    warn,
)


@problem_options
@command
def bench(
    op: OpArg,
    shape: ShapeOpt = None,
    flags: dict[str, str | None] | None = None,
    dtype: DtypeOpt = None,
    options: dict[str, Any] | None = None,
    rounds: int = typer.Option(5, "--rounds", min=1, help="interleaved timing rounds"),
    use_compile: bool = typer.Option(True, "--compile/--no-compile", help="include torch.compile"),
    compile_mode: str | None = typer.Option(None, "--compile-mode",
                                            help="torch.compile's mode, e.g. max-autotune (default: its default)"),
    remeasure_peaks: bool = typer.Option(False, "--remeasure-peaks", help="measure copy bandwidth and matmul peak again"),
    profile: bool = typer.Option(False, "--profile", help="print the torch profiler's kernel table for the tuned kernel"),
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare torch eager, torch.compile, the default and the tuned config (and the op's other torch versions) on the
    same inputs: time, throughput, roofline fraction, speedups; memory-bound problems also time a copy of as many bytes.
    """
    from autotuner.analysis.bench import DEFAULT, TUNED, compute_bound, profile_table
    from autotuner.analysis.bench import bench as run_bench
    from autotuner.base.device import current_device
    from autotuner.store import open_store

    op_obj, prob = problem(op, shape, dtype, flags or {}, options or {})
    store = open_store(settings(db).db_url)
    device = current_device()
    result = run_bench(op_obj, prob, device, store=store, use_compile=use_compile, rounds=rounds,
                       remeasure_peaks=remeasure_peaks, compile_mode=compile_mode)
    config = result.tuned_config or result.default_config
    table_text = profile_table(op_obj, prob, device, config) if profile else None
    if as_json:
        out = result.to_dict()
        if table_text is not None:
            out["profile"] = table_text
        print(json.dumps(out, default=str))
        return
    compute = compute_bound(op_obj, prob)
    t = Table(title=f"{op} {prob.key} on {device.key} ({result.clock})")
    gpu = not device.is_interpreter  # the interpreter's wall clock says nothing of rates or of torch's speed
    columns = ("", "ms", "p20-p80", *((("TFLOP/s" if compute else "GB/s"), "roofline",
                                       "vs torch eager (rounds faster)") if gpu else ()), "note")
    for col in columns:
        t.add_column(col, justify="left" if col in ("", "note") else "right")
    for r in result.rows:
        rate = (r.tflops if compute else r.gbs) if r.ms else None
        measured = (f"{rate:.1f}" if rate else "", f"{r.roofline:.0%}" if r.roofline else "",
                    f"{r.vs_eager:.2f}x ({r.rounds_faster}/{result.rounds})" if r.vs_eager else "") if gpu else ()
        t.add_row(r.name, f"{r.ms:.4f}" if r.ms else "-",
                  f"{r.p20_ms:.4f}-{r.p80_ms:.4f}" if r.p20_ms and r.p80_ms else "", *measured, r.note)
    console.print(t)
    if result.peaks:
        p = result.peaks
        console.print(f"roofline: measured copy {p['copy_gbs']:.0f} GB/s, matmul " +
                      ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in p["matmul_tflops"].items()))
    tuned, default = result.row(TUNED), result.row(DEFAULT)
    if result.tuned_config is not None and result.tuned_config == result.default_config:
        console.print(f"tuned config {result.tuned_config}: the default config (nothing measured faster by the "
                      "tuner's margin)")
    elif tuned and default and tuned.ms and default.ms:
        console.print(f"tuned config {result.tuned_config}: {default.ms / tuned.ms:.2f}x the default config")
    if device.is_interpreter:
        warn("No GPU: interpreter wall-clock times say nothing about GPU speed (no rates, roofline or speedups "
             "shown).")
    if table_text is not None:
        console.print(f"profile of 20 launches with {config}:")
        console.print(table_text)


@command
def report(
    output: Path = typer.Option(Path("autotuner-report.png"), "-o", "--output", help="PNG file to write"),
    op: str | None = typer.Option(None, "--op"),
    device: str | None = typer.Option(None, "--device", help="device key (default: every device)"),
    db: str | None = typer.Option(None, "--db"),
) -> None:
    """Plot, per tuned problem, the tuned config against the default config against torch (a PNG)."""
    from autotuner.analysis.report import plot_results
    from autotuner.store import open_store

    n = plot_results(open_store(settings(db).db_url, create=False), output, op=op, device_key=device)
    console.print(f"wrote {output} ({n} problems)")
