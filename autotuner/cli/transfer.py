"""`autotuner export` and `autotuner import`: move results between databases, or out to Triton and vLLM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from autotuner.base.registry import op_names
from autotuner.cli import common
from autotuner.cli.common import DbOpt, command, console, err, fail, settings


@command
def export(
    output: Path | None = typer.Option(None, "-o", "--output", help="a file (json, triton, landscape) or a folder (an op's own format: vllm); default: stdout"),
    op: str | None = typer.Option(None, "--op"),
    device: str | None = typer.Option(None, "--device", help="device key, e.g. 'NVIDIA H100 80GB HBM3 (sm_90)'"),
    shape: str | None = typer.Option(None, "--shape", help="with --op: one problem"),
    dtype: str = typer.Option("float16", "--dtype"),
    fmt: str = typer.Option("json", "--format", help="json (round-trips through import), triton, landscape (one "
                                                     "problem's run, for `autotuner replay`), or an op's own: vllm "
                                                     "(matmul: vLLM's tuned-config files)"),
    db: DbOpt = None,
) -> None:
    """Export results: everything, or filtered by op, device and problem. Besides json, triton and landscape, an op
    may export formats of its own (matmul: vllm, vLLM's tuned-config files)."""
    from autotuner.store import open_store
    from autotuner.store.transfer import export_data, formats, landscape, triton_configs, write_files

    own = formats()
    accepted = ["json", "triton", "landscape", *own]
    if fmt not in accepted:
        fail(f"unknown format {fmt!r}; accepted: {', '.join(accepted)}")
    if fmt == "landscape" and not (op and shape):
        fail("--format landscape needs --op and --shape: one problem's run")
    if fmt == "triton" and not op:
        fail("--format triton needs --op")
    if fmt in own and output is None:
        fail(f"--format {fmt} writes a folder of files ({', '.join(own[fmt])}'s): give the folder with -o")
    problem_key = None
    if shape is not None:
        if not op:
            fail("--shape needs --op")
        problem_key = common.problem(op, shape, dtype, {}, {})[1].key
    data = export_data(open_store(settings(db).db_url, create=False), op=op, device_key=device, problem_key=problem_key)
    if op is not None and not data["runs"] and not data["best_configs"] and op not in op_names():
        fail(f"nothing to export for {op!r}: no op of that name is known here or stored in this database "
             "(`autotuner ops` lists the known ones)")
    if fmt in own:
        assert output is not None
        paths, notes = write_files(data, fmt, output)
        for path in paths:
            console.print(str(path))
        for note in notes:
            err.print(f"note: {note}", style="yellow")
        return
    if fmt == "landscape":
        assert op is not None and problem_key is not None
        data = landscape(data, op, problem_key)
        text = json.dumps(data, indent=1) + "\n"
    else:
        text = triton_configs(data, op or "") if fmt == "triton" else json.dumps(data, indent=1, sort_keys=True) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        what = (f"{len(data['trials'])} trials" if fmt == "landscape" else
                f"{len(data['runs'])} runs and {len(data['best_configs'])} best configs")
        err.print(f"wrote {what} to {output}")


MAX_IMPORT_MB = 32.0  # an export of a thousand runs of 64 trials; its parse holds over ten times its size in memory


@command
def import_(file: Path = typer.Argument(..., help="a file written by `autotuner export`"), db: DbOpt = None,
            max_mb: float = typer.Option(MAX_IMPORT_MB, "--max-mb", min=0.001,
                                         help="refuse a larger file before reading it")) -> None:
    """Import an export; a stored result is never replaced by a slower one, and a bad file writes nothing."""
    from autotuner.base.json_depth import MAX_DEPTH, nesting
    from autotuner.decorator.kernel_problem import KernelProblem
    from autotuner.store import open_store
    from autotuner.store.transfer import import_data, parse_export

    try:
        size = file.stat().st_size
        if size > max_mb * 2**20:  # its parse holds several times its size: refused before it is read
            fail(f"{file} is {size / 2**20:.0f} MiB, more than --max-mb {max_mb:g}; export one op at a time "
                 "(autotuner export --op NAME), or raise --max-mb where the memory is there; nothing was imported")
        text = file.read_text()
    except FileNotFoundError:
        fail(f"no file at {file}")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}")
    deep = f"{file}: JSON nested more than {MAX_DEPTH} levels deep; not an autotuner export, nothing was imported"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{file} is not JSON: {exc}")
    except RecursionError:
        fail(deep)
    del text
    if nesting(data) > MAX_DEPTH:
        fail(deep)
    try:  # the whole file is checked before the database is opened: a bad file creates and writes nothing
        export = parse_export(data, KernelProblem)
    except ValueError as exc:
        fail(f"{file}: {exc}\nnothing was imported")
    counts = import_data(open_store(settings(db).db_url), export)
    console.print(", ".join(f"{v} {k} added" for k, v in counts.items()))
