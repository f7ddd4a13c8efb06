"""The `autotuner` command line. Each command lives in a module named for what it does; they are registered
here, explicitly, in the order `autotuner --help` lists them.

    tune, show, ops, replay autotuner.cli.tune, .show, .ops, .replay
    export, import          autotuner.cli.transfer
    bench, report           autotuner.cli.bench
    run, install            autotuner.cli.install
    serve, worker           autotuner.cli.service
    db upgrade              autotuner.cli.database

Shared options, the consoles and the error-to-exit-code mapping are in autotuner.cli.common.

May import: every room of autotuner, and `api` (`serve` starts the service).
"""

from __future__ import annotations

import atexit
import importlib.util
import multiprocessing.util as mp_util
import os
import sys
from typing import Any

from autotuner.engine import processes

if sys.argv[1:2] == ["tune"] and processes.is_main_process():
    # A worker running on this host takes the command (autotuner.cli.forward): this process then only relays its
    # output, having imported nothing heavy.
    from autotuner.cli.forward import forward

    _code = forward(sys.argv[2:])
    if _code is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_code)

if sys.argv[1:2] in (["tune"], ["worker"]) and processes.is_main_process() and "--check" not in sys.argv:
    # Commands that tune fork their trial worker and compile pool from a server that imports torch once: it
    # starts now, so that its imports run while this process does its own.
    main_module = sys.modules["__main__"]
    if getattr(main_module, "__spec__", None) is None:
        # The `autotuner` console script: a child would run it again (importing this CLI) before its work;
        # named as the package's __main__, which children skip.
        main_module.__spec__ = importlib.util.find_spec("autotuner.__main__")
    processes.start()
    if sys.argv[1:2] == ["tune"]:
        from autotuner.cli import early

        early.start(sys.argv[2:])  # its trial worker and compile pool, started before this process imports torch

import typer  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from autotuner.base.registry import PluginError, add_op_finder, load_plugins  # noqa: E402
from autotuner.base.settings import Settings, settings_error  # noqa: E402

try:
    load_plugins(Settings().plugins)  # before the commands are built: plugin ops bring their options to them
except ValidationError as _exc:
    sys.stderr.write(f"error: {settings_error(_exc)}\n")
    sys.exit(4)  # common.SETUP
except PluginError as _exc:
    sys.stderr.write(f"error: {_exc}\n")
    sys.exit(4)

from autotuner.cli import bench, database, install, ops, replay, service, show, transfer, tune  # noqa: E402


def _covered_op(name: str) -> Any:
    """A covered `@triton.autotune` kernel's op by its `module:qualname` (autotuner.decorator.install.find_op),
    the decorator imported only when such a name is asked for: it imports torch, which `tune` keeps out of this
    process (autotuner.cli.early)."""
    from autotuner.decorator.install import find_op

    return find_op(name)


add_op_finder(_covered_op)

METAVARS = {"str": "TEXT", "text": "TEXT", "int": "N", "int range": "N", "float": "X", "float range": "X",
            "path": "PATH"}


class Command(typer.core.TyperCommand):
    """A command whose --help names each value's kind in words (TEXT, N, X), not Typer's `<str>` or
    `<float range>` placeholders; ranges still follow as `[x>=1]`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            word = METAVARS.get(param.type.name)
            if word is None or getattr(param, "is_flag", False):
                continue
            if param.metavar is None and not isinstance(param, typer.core.TyperArgument):
                param.metavar = word
            if isinstance(param, typer.core.TyperArgument):  # its kind column asks the type itself
                kind = type(param.type)
                param.type = type(f"Named{kind.__name__}", (kind,), {"get_metavar": lambda self, param, ctx, w=word: w})()


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  help="Autotune Triton kernels and serve the results.")
app.command("tune", cls=Command)(tune.tune)
app.command("show", cls=Command)(show.show)
app.command("ops", cls=Command)(ops.ops)
app.command("replay", cls=Command)(replay.replay)
app.command("export", cls=Command)(transfer.export)
app.command("import", cls=Command)(transfer.import_)
app.command("bench", cls=Command)(bench.bench)
app.command("report", cls=Command)(bench.report)
app.command("run", context_settings=install.SCRIPT, cls=Command)(install.run)
app.command("install", context_settings=install.SCRIPT, cls=Command)(install.install)
app.command("serve", cls=Command)(service.serve)
app.command("worker", cls=Command)(service.worker)
db_app = typer.Typer(no_args_is_help=True, help="Manage the result database.")
db_app.command("upgrade", cls=Command)(database.upgrade)
app.add_typer(db_app, name="db")


def main() -> None:
    if "" not in sys.path and os.getcwd() not in sys.path:
        # as under `python -m autotuner`: a decorated kernel's module in the current folder imports (for the
        # commands that name one; a worker imports a job's only where AUTOTUNER_KERNEL_MODULES allows it)
        sys.path.insert(0, os.getcwd())
    if sys.argv[1:2] != ["tune"]:
        app()
        return
    # `tune` is over once its output is out and the exit handlers (logging, multiprocessing) have run: the
    # interpreter's own teardown after them (torch's and CUDA's destructors, every module's) is skipped.
    # Everything it wrote is committed by then, and the output flushed here.
    try:
        app()
        code: int = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that went away (a closed pipe): nothing more to say to it
            pass
    # multiprocessing's exit handler would join the trial worker and compile pool, killed by now, and so wait
    # while the driver tears their CUDA contexts down: its finalizers (the fork server's folder) run, the join is
    # left out (the killed processes are reaped by init; the fork server exits when this process does).
    exit_function, run_finalizers = getattr(mp_util, "_exit_function", None), getattr(mp_util, "_run_finalizers", None)
    if exit_function is not None and run_finalizers is not None:
        atexit.unregister(exit_function)
    atexit._run_exitfuncs()
    if run_finalizers is not None:
        run_finalizers()
    os._exit(code)


__all__ = ["app", "main"]
