"""The `autotuner` command line: tune, show, replay, export, import, db upgrade (serve and worker: cli_service)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Autotune Triton kernels and serve the results.")
db_app = typer.Typer(no_args_is_help=True, help="Manage the result database.")
app.add_typer(db_app, name="db")
# Piped into a log, rich would wrap tables at 80 columns; a log has room for the whole row.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


# The options that name a problem, shared by tune, show and bench.
OpArg = Annotated[str, typer.Argument(help="matmul, softmax, layernorm, gelu or attention")]
ShapeOpt = Annotated[str | None, typer.Option("--shape", help="e.g. 4096x4096x4096 (matmul), 4096x4096 (softmax)")]
MOpt = Annotated[int | None, typer.Option("--M", help="matmul M (N and K default to M)")]
NOpt = Annotated[int | None, typer.Option("--N")]
KOpt = Annotated[int | None, typer.Option("--K")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float16, bfloat16 or float32")]
EpilogueOpt = Annotated[str | None, typer.Option("--epilogue", help="matmul: none, bias, bias_relu, bias_gelu")]
CausalOpt = Annotated[bool, typer.Option("--causal", help="attention: causal mask")]
ApproximateOpt = Annotated[str | None, typer.Option("--approximate", help="gelu: tanh or none")]
DbOpt = Annotated[str | None, typer.Option("--db", help="database URL (default: AUTOTUNER_DB_URL or a local SQLite file)")]


def _fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _settings(db: str | None) -> Any:
    from autotuner.settings import Settings

    s = Settings()
    if db:
        s.db_url = db
    return s


def _problem(op_name: str, shape: str | None, dtype: str, M: int | None, N: int | None, K: int | None,
             options: dict[str, Any]) -> tuple[Any, Any]:
    from autotuner.registry import get_op

    op = get_op(op_name)
    if op_name == "matmul" and shape is None:
        if M is None:
            raise ValueError("matmul needs --shape MxNxK or --M (N and K default to M)")
        shape = f"{M}x{N or M}x{K or M}"
    elif M is not None or N is not None or K is not None:
        if op_name != "matmul":
            raise ValueError(f"--M/--N/--K are for matmul; {op_name} takes --shape")
    if shape is None:
        raise ValueError(f"{op_name} needs --shape, e.g. {op.problem_type.parse.__doc__ or ''}".strip())
    return op, op.parse_problem(shape, dtype, **options)


def _options(op_name: str, epilogue: str | None, causal: bool, approximate: str | None) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if epilogue is not None:
        opts["epilogue"] = epilogue
    if causal:
        opts["causal"] = True
    if approximate is not None:
        opts["approximate"] = approximate
    return opts


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f} ms"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


@app.command()
def tune(
    op: OpArg,
    shape: ShapeOpt = None,
    M: MOpt = None,
    N: NOpt = None,
    K: KOpt = None,
    dtype: DtypeOpt = "float16",
    epilogue: EpilogueOpt = None,
    causal: CausalOpt = False,
    approximate: ApproximateOpt = None,
    trials: int | None = typer.Option(None, "--trials", min=1, help="configs to measure (default: up to 64)"),
    time_budget: float | None = typer.Option(None, "--time-budget", min=0.1, help="seconds of searching (after the worker is set up; at least one config is measured)"),
    strategy: str = typer.Option("tpe", "--strategy", help="tpe, random or exhaustive"),
    seed: int = typer.Option(0, "--seed"),
    db: DbOpt = None,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Tune one problem: search its space, store every trial and the winner."""
    from autotuner.search import STRATEGIES

    if strategy not in STRATEGIES:
        _fail(f"unknown strategy {strategy!r}; accepted: {', '.join(STRATEGIES)}")
    try:
        op_obj, problem = _problem(op, shape, dtype, M, N, K, _options(op, epilogue, causal, approximate))
    except ValueError as exc:
        _fail(str(exc))
    from autotuner.device import current_device
    from autotuner.store import Store
    from autotuner.tuner import tune as run_tune
    from db.engine import DatabaseUnavailable, NotAutotunerDatabase

    settings = _settings(db)
    try:
        store = Store(settings.db_url)
    except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
        _fail(str(exc))
    device = current_device()
    if device.is_interpreter and not as_json:
        err.print("[yellow]No GPU: kernels run in Triton's interpreter and times are CPU wall-clock, "
                  "not GPU speed.[/]")
    total = trials
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err,
                  disable=as_json or not sys.stderr.isatty()) as bar:
        task = bar.add_task(f"{op} {problem.key}", total=total, status="")

        def on_trial(rec: Any, res: Any) -> None:
            bar.update(task, advance=1, status=f"best {_ms(res.best_ms)}  failures {res.failures}")

        result = run_tune(op_obj, problem, store=store, settings=settings, strategy=strategy, trials=trials,
                          time_budget_s=time_budget, seed=seed, device=device, progress=on_trial)
    if as_json:
        console.print_json(json.dumps(result.to_dict(), default=str))
        return
    table = Table(title=f"{op} {problem.key} on {device.key} ({result.clock})")
    table.add_column("")
    table.add_column("value")
    table.add_row("best config", json.dumps(result.best_config))
    table.add_row("best time", _ms(result.best_ms))
    table.add_row("default config", f"{json.dumps(result.default_config)}  {_ms(result.default_ms)}")
    table.add_row("speedup vs default", _x(result.speedup_vs_default))
    table.add_row("torch", _ms(result.torch_ms))
    table.add_row("speedup vs torch", "n/a (interpreter wall-clock is not GPU speed)" if device.is_interpreter
                  else _x(result.speedup_vs_torch))
    table.add_row("roofline fraction", "n/a" if result.roofline_fraction is None
                  else f"{result.roofline_fraction:.1%} (of datasheet peaks)")
    table.add_row("trials", f"{len(result.trials)} measured, {result.failures} failed, "
                            f"{result.rejected} rejected by constraints (of {result.candidates + result.rejected})")
    table.add_row("stored", f"run {result.run_id}; " + ("new best" if result.stored_as_best else "a faster one was already stored"))
    table.add_row("wall time", f"{result.elapsed_s:.1f} s")
    console.print(table)
    if result.best_config is None:
        raise typer.Exit(1)


@app.command()
def show(
    op: OpArg,
    shape: ShapeOpt = None,
    M: MOpt = None,
    N: NOpt = None,
    K: KOpt = None,
    dtype: DtypeOpt = "float16",
    epilogue: EpilogueOpt = None,
    causal: CausalOpt = False,
    approximate: ApproximateOpt = None,
    db: DbOpt = None,
    as_json: bool = typer.Option(False, "--json"),
    explain: bool = typer.Option(False, "--explain", help="show which lookup step answers a launch, and why"),
) -> None:
    """The stored best config for a problem on this device, and where it came from."""
    try:
        op_obj, problem = _problem(op, shape, dtype, M, N, K, _options(op, epilogue, causal, approximate))
    except ValueError as exc:
        _fail(str(exc))
    from autotuner.device import current_device
    from autotuner.store import Store
    from db.engine import DatabaseUnavailable, NotAutotunerDatabase

    device = current_device()
    if explain:
        _explain(op_obj, problem, device, _settings(db), as_json)
        return
    try:
        store = Store(_settings(db).db_url)
    except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
        _fail(str(exc))
    best = store.best(op=op_obj, problem=problem, device=device)
    if best is None:
        default = op_obj.space.default(problem, device)
        info = {"op": op, "problem": problem.key, "device": device.key, "source": "default", "config": default}
        if as_json:
            console.print_json(json.dumps(info))
        else:
            console.print(f"No stored result for {op} {problem.key} on {device.key}; the space default is "
                          f"{json.dumps(default)}")
        raise typer.Exit(1)
    info = {"op": op, "problem": problem.key, "device": device.key, "source": "stale" if best.stale else "exact",
            "config": best.config, "median_ms": best.median_ms, "default_ms": best.default_ms,
            "torch_ms": best.torch_ms, "stale": best.stale, "stale_reason": best.stale_reason,
            "tuned_at": str(best.updated_at), "run_id": best.run_id}
    if as_json:
        console.print_json(json.dumps(info))
        return
    table = Table(title=f"{op} {problem.key} on {device.key}")
    table.add_column("")
    table.add_column("value")
    for k, v in info.items():
        table.add_row(k, json.dumps(v) if isinstance(v, dict) else str(v))
    console.print(table)


def _explain(op: Any, problem: Any, device: Any, settings: Any, as_json: bool) -> None:
    from autotuner.lookup import Resolver

    res = Resolver(settings).resolve(op, problem, device)
    if as_json:
        console.print_json(json.dumps({"op": op.name, "problem": problem.key, "device": device.key,
                                       "config": res.config, "source": res.source, "step": res.step,
                                       "reason": res.reason, "from_problem": res.from_problem, "trace": res.trace}))
        return
    console.print(f"[bold]{op.name} {problem.key}[/] on {device.key}: a launch with no config uses")
    console.print(f"  {json.dumps(res.config)}")
    console.print(f"  source [bold]{res.source}[/], answered by the {res.step} step: {res.reason}")
    console.print("Steps, in order (cache, database, service, nearest, default):")
    for line in res.trace:
        console.print(f"  - {line}")


@app.command()
def replay(
    landscape: Path = typer.Argument(..., help="a landscape JSON file (format in DESIGN.md)"),
    budget: int = typer.Option(49, "--budget", min=1, help="distinct configs to measure"),
    seed: int = typer.Option(0, "--seed"),
    strategy: str = typer.Option("tpe", "--strategy", help="tpe, random or exhaustive"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run the search engine against a recorded landscape (a measurement is a table look-up)."""
    from autotuner.replay import load_landscape
    from autotuner.replay import replay as run_replay

    try:
        result = run_replay(load_landscape(landscape), budget, seed, strategy)
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        console.print_json(json.dumps(result))
    else:
        console.print(f"{result['landscape']}: {result['evaluations']} evaluations, best {result['best_ms']:.4f} ms, "
                      f"optimum {result['optimum_ms']:.4f} ms ({result['best_ms'] / result['optimum_ms'] - 1:+.1%}); "
                      f"best config {json.dumps(result['best_config'])}")


def _engine(db: str | None) -> Any:
    from db.engine import DatabaseUnavailable, NotAutotunerDatabase, open_engine

    try:
        return open_engine(_settings(db).db_url)
    except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
        _fail(str(exc))


@app.command("export")
def export_cmd(
    output: Path | None = typer.Option(None, "-o", "--output", help="file (json, triton) or folder (vllm); default: stdout"),
    op: str | None = typer.Option(None, "--op"),
    device: str | None = typer.Option(None, "--device", help="device key, e.g. 'NVIDIA H100 80GB HBM3 (sm_90)'"),
    shape: str | None = typer.Option(None, "--shape", help="with --op: one problem"),
    dtype: str = typer.Option("float16", "--dtype"),
    fmt: str = typer.Option("json", "--format", help="json (round-trips through import), triton or vllm"),
    db: str | None = typer.Option(None, "--db"),
) -> None:
    """Export results: everything, or filtered by op, device and problem."""
    from autotuner.transfer import export_data, triton_configs, write_vllm

    if fmt not in ("json", "triton", "vllm"):
        _fail(f"unknown format {fmt!r}; accepted: json, triton, vllm")
    if fmt == "triton" and not op:
        _fail("--format triton needs --op")
    if fmt == "vllm" and output is None:
        _fail("--format vllm writes one file per device and N, K: give a folder with -o")
    problem_key = None
    if shape is not None:
        if not op:
            _fail("--shape needs --op")
        try:
            problem_key = _problem(op, shape, dtype, None, None, None, {})[1].key
        except ValueError as exc:
            _fail(str(exc))
    data = export_data(_engine(db), op=op, device_key=device, problem_key=problem_key)
    if fmt == "vllm":
        assert output is not None
        for path in write_vllm(data, output):
            console.print(str(path))
        return
    text = triton_configs(data, op or "") if fmt == "triton" else json.dumps(data, indent=1, sort_keys=True) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        err.print(f"wrote {len(data['runs'])} runs and {len(data['best_configs'])} best configs to {output}")


@app.command("import")
def import_cmd(file: Path = typer.Argument(..., help="a file written by `autotuner export`"),
               db: str | None = typer.Option(None, "--db")) -> None:
    """Import an export; a stored result is never replaced by a slower one."""
    from autotuner.transfer import import_data

    try:
        data = json.loads(file.read_text())
        counts = import_data(_engine(db), data)
    except FileNotFoundError:
        _fail(f"no file at {file}")
    except (json.JSONDecodeError, ValueError, KeyError) as exc:
        _fail(f"{file}: {exc}")
    console.print(", ".join(f"{v} {k} added" for k, v in counts.items()))


@db_app.command("upgrade")
def db_upgrade(db: str | None = typer.Option(None, "--db")) -> None:
    """Create the database or migrate it to the latest schema."""
    from db.engine import DatabaseUnavailable, NotAutotunerDatabase, head_revision, make_engine, upgrade

    settings = _settings(db)
    engine = make_engine(settings.db_url)
    try:
        state = upgrade(engine)
    except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
        _fail(str(exc))
    what = {"empty": "created", "old": "upgraded", "current": "already current"}[state]
    console.print(f"{engine.url.render_as_string(hide_password=True)}: {what} (schema {head_revision()})")


def main() -> None:
    from autotuner import cli_bench, cli_service  # noqa: F401  (register bench, report, serve and worker)

    app()


if __name__ == "__main__":
    main()
