"""What the commands share: the consoles (markup off: user text is never read as rich markup), the options that name a
problem, errors and their exit codes."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from autotuner.base.registry import Op
    from search_spaces.contract import ProblemType


def _console_args(columns: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The consoles' settings for stdout and stderr now: piped into a log, tables keep whole rows; `columns`: a
    terminal's width where the terminal is another process's."""
    out = dict(width=columns if sys.stdout.isatty() else 160, markup=False, highlight=False)
    err = dict(stderr=True, width=columns if sys.stderr.isatty() else None, markup=False, highlight=False,
               soft_wrap=not sys.stderr.isatty())
    return out, err


_out_args, _err_args = _console_args()
console = Console(**_out_args)
err = Console(**_err_args)


def print_json(data: Any) -> None:
    """`data` as indented JSON on standard output: coloured by rich on a terminal, plain text elsewhere (a pipe, a
    script reading it), where rich's highlighting of a tuning run's JSON is time spent for no reader."""
    text = json.dumps(data, indent=2, default=str)
    if console.is_terminal:
        console.print_json(text)
    else:
        console.file.write(text + "\n")
        console.file.flush()


def reset_consoles(columns: int | None = None) -> None:
    """Set the consoles up again for sys.stdout and sys.stderr as they are now (a worker running a command typed
    elsewhere points them at that command's, then back); every module holding them sees the change."""
    out_args, err_args = _console_args(columns)
    console.__init__(**out_args)  # type: ignore[misc]
    err.__init__(**err_args)  # type: ignore[misc]

# Exit codes: 1 nothing found or every config failed, 2 bad input, 3 the database, 4 the problem could not be
# set up for tuning, 130/143 interrupted by SIGINT/SIGTERM.
BAD_INPUT, DATABASE, SETUP = 2, 3, 4

# The options that name a problem, shared by tune, show and bench (with those `problem_options` adds).
OpArg = Annotated[str, typer.Argument(help="an op (`autotuner ops` lists them), or a decorated kernel's module:name")]
ShapeOpt = Annotated[str | None, typer.Option("--shape", help="the problem's shape, as its op writes it "
                                                                "(`autotuner ops` shows each op's layout)")]
DtypeOpt = Annotated[str | None, typer.Option("--dtype", help="float16, bfloat16 or float32 (default: the op's "
                                                              "first, float16 for the built-in ops); for a decorated "
                                                              "kernel its tensor arguments' dtypes")]
DbOpt = Annotated[str | None, typer.Option("--db", help="database URL (default: AUTOTUNER_DB_URL or a local SQLite file)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message))
    raise typer.Exit(code)


def warn(message: str) -> None:
    err.print(message, style="yellow")


def settings(db: str | None) -> Any:
    from autotuner.base.settings import Settings

    s = Settings()
    if db:
        s.db_url = db
    return s


def database_message(exc: BaseException) -> str:
    """A database error in words: what was refused, and what to do."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).splitlines()[0] if str(orig or exc) else type(exc).__name__
    if "readonly" in text or "read-only" in text or "permission denied" in text.lower():
        return (f"the database refused a write ({text}): check that you may write the database file and its "
                "folder, or point --db / AUTOTUNER_DB_URL at a writable database")
    return f"the database failed: {text}"


# optional dependencies, by the module a command imports, and the extra (pyproject.toml) that installs it
EXTRAS = {"uvicorn": "server", "fastapi": "server", "jinja2": "server", "prometheus_client": "server",
          "httptools": "server", "uvloop": "server", "matplotlib": "report", "psycopg": "postgres"}


@contextmanager
def clear_errors() -> Iterator[None]:
    """Turn the errors a command can meet into one line and an exit code instead of a traceback."""
    from pydantic import ValidationError
    from sqlalchemy.exc import SQLAlchemyError

    from autotuner.base.device import NoDevice
    from autotuner.base.settings import settings_error
    from autotuner.engine.measure.runner import WorkerSetupError
    from autotuner.store.errors import NotAStore as NotAutotunerDatabase
    from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable

    try:
        yield
    except ModuleNotFoundError as exc:  # an optional dependency: name the extra that brings it
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        fail(f"this command needs {exc.name!r}, which the {extra!r} extra installs: pip install 'autotuner[{extra}]'",
             SETUP)
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        fail(settings_error(exc), SETUP)
    except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
        fail(str(exc), DATABASE)
    except SQLAlchemyError as exc:
        fail(database_message(exc), DATABASE)
    except (WorkerSetupError, NoDevice) as exc:
        fail(str(exc), SETUP)
    except ValueError as exc:  # ProblemError, ConfigError, UnknownOpError: bad input
        fail(str(exc), BAD_INPUT)
    except OSError as exc:  # a file to read or write: missing, a folder, no permission
        fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), BAD_INPUT)


def problems(op_name: str, shape: str | None, dtype: str | None, flags: dict[str, str | None],
             options: dict[str, Any]) -> tuple[Op, list[ProblemType], str | None]:
    """The op, the problems the options name, and the dimension that varies (one problem, or a sweep: `--M 1-8192:pow2`,
    `--M 16,64,256`, a range in `--shape`). ValueError naming what is wrong."""
    from autotuner.engine.sweeps.sweep import is_sweep, points

    swept = [k for k, v in flags.items() if v is not None and is_sweep(v)]
    in_shape = re.findall(r"\d+\s*-\s*\d+\s*:\s*pow2", shape or "")
    if len(swept) + len(in_shape) > 1:
        raise ValueError("sweep one dimension at a time: more than one value names several points")
    if swept:
        dim = swept[0]
        values = points(flags[dim] or "")
        picked = [problem(op_name, shape, dtype, {**flags, dim: str(v)}, options) for v in values]
    elif in_shape:
        values = points(in_shape[0])
        assert shape is not None
        before = shape[:shape.index(in_shape[0])]
        picked = [problem(op_name, shape.replace(in_shape[0], str(v), 1), dtype, flags, options) for v in values]
        named = re.search(r"([A-Za-z_][A-Za-z0-9_]*)=$", before)  # a decorated kernel's key: NAME=A-B:pow2
        position = before.count("x")
        layout = re.match(r"[A-Z_]+(?:x[A-Z_]+)*", picked[0][0].problem_type.layout)  # "MxNxK, e.g. ..."
        names = layout.group(0).split("x") if layout else []
        dim = named.group(1) if named else names[position] if position < len(names) else f"dimension {position + 1}"
    else:
        op, one = problem(op_name, shape, dtype, flags, options)
        return op, [one], None
    return picked[0][0], [p for _, p in picked], dim


def problem(op_name: str, shape: str | None, dtype: str | None, flags: dict[str, str | None],
            options: dict[str, Any]) -> tuple[Op, ProblemType]:
    """The op and problem the options name: `--shape`, or the dimensions one by one (`shape_flags`: --M/--N/--K, a
    left-out one taking the first's value); ValueError naming what is wrong."""
    from autotuner.base.registry import import_op

    op = import_op(op_name, trusted=True)  # the operator typed it
    for name, value in flags.items():
        if value is not None and not str(value).strip().isdigit():
            raise ValueError(f"--{name} {value!r}: give a positive integer (several values sweep: tune only)")
    declared = op.problem_type.shape_flags
    given = {k: v for k, v in flags.items() if v is not None}
    layout = op.problem_type.layout
    if given:
        wrong = [k for k in given if k not in declared]
        if wrong:
            takes = f"--shape or {_flags(declared)}" if declared else "--shape"
            raise ValueError(f"{_flags(wrong)} {'is' if len(wrong) == 1 else 'are'} not {op_name}'s; it takes {takes}")
        if shape is not None:
            raise ValueError(f"give {op_name} --shape or {_flags(declared)}, not both")
        first = declared[0]
        if first not in given:
            raise ValueError(f"{op_name} needs --{first} when given {_flags(list(given))} ({_defaults(declared)})")
        shape = "x".join(str(given.get(k, given[first])) for k in declared)
    if shape is None:
        alternative = f" or --{declared[0]} ({_defaults(declared)})" if declared else ""
        raise ValueError(f"{op_name} needs --shape ({layout}){alternative}")
    if dtype is None:
        dtype = op.dtypes[0] if op.dtypes else "float16"
    return op, op.parse_problem(shape, dtype, **options)


def _flags(names: Sequence[str]) -> str:
    return "/".join(f"--{n}" for n in names)


def _defaults(declared: Sequence[str]) -> str:
    return f"{', '.join(declared[1:])} default to {declared[0]}"


def problem_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the options the registered ops declare, in place of its `flags: dict` and `options: dict`
    parameters: a dimension flag per name in a problem type's `shape_flags` (`--M --N --K`) and an option per problem
    option (`--epilogue`, `--causal`), so a new op brings its options to every command."""
    import functools
    import inspect

    from autotuner.base.registry import ops
    from search_spaces.contract import merge_options

    dims: dict[str, list[str]] = {}
    for op in ops():
        for name in op.problem_type.shape_flags:
            dims.setdefault(name, []).append(op.name)
    dim_params = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
            str | None, typer.Option(f"--{name}", help=f"{', '.join(owners)}: the shape's {name} (tune: several "
                                                        "values sweep it, A-B:pow2 or a,b,c)")])
        for name, owners in dims.items()]
    added = []
    for m in merge_options(ops()):
        owners = ", ".join(m.owners)
        if m.choices is None:
            annotation: Any = Annotated[bool, typer.Option(f"--{m.name}", help=f"{owners}: {m.help}")]
            default: Any = False
        else:
            annotation = Annotated[str | None, typer.Option(f"--{m.name}", help=f"{owners}: {', '.join(m.choices)}")]
            default = None
        added.append(inspect.Parameter(m.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    sig = inspect.signature(fn, eval_str=True)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
              if p.name not in ("options", "flags")]
    at_shape = next((i for i, p in enumerate(params) if p.name == "shape"), -1) + 1
    params = [*params[:at_shape], *dim_params, *params[at_shape:]]
    at = next((i for i, p in enumerate(params) if p.name == "dtype"), len(params) - 1) + 1
    names, dim_names = [p.name for p in added], list(dims)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {n: kwargs.pop(n) for n in names if n in kwargs}
        kwargs["flags"] = {n: kwargs.pop(n) for n in dim_names if n in kwargs}
        kwargs["options"] = {n: v for n, v in given.items() if v is not None and v is not False}
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[*params[:at], *added, *params[at:]])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}  # type: ignore[attr-defined]
    return wrapper


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f} ms"


def times(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a function as a command body whose known errors become clear messages (see clear_errors)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with clear_errors():
            return fn(*args, **kwargs)

    return wrapper
