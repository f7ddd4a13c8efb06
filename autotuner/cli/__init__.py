"""The `autotuner` command line: each command in a module named for it, built by autotuner.cli.app in `--help` order;
shared options, consoles and exit codes in autotuner.cli.common. `main()` first hands a `tune` to a worker on this host,
or starts the trial worker (`start_early`), and only then imports the commands.

May import: every room of autotuner, and `api` (`serve` starts the service)."""

from __future__ import annotations

import atexit
import importlib.util
import multiprocessing.util as mp_util
import os
import sys
from typing import NoReturn

from autotuner.base import bytecode
from autotuner.engine.measure import processes

# The commands that run the user's script in this process: it, and what it starts, get Python as the user set it up
# (no bytecode prefix of autotuner's, PYTHONDONTWRITEBYTECODE kept)
USERS_CODE = (["run"], ["install"])


def start_early(argv: list[str]) -> None:
    """Before anything heavy is imported: hand a `tune` to a worker on this host (autotuner.cli.handoff), or start the
    fork server and `tune`'s processes (autotuner.cli.prestart) so their imports overlap this process's."""
    if argv[1:2] == ["tune"] and processes.is_main_process():
        from autotuner.cli.handoff import hand_off

        code = hand_off(argv[2:])
        if code is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    if argv[1:2] in (["tune"], ["worker"]) and processes.is_main_process() and "--check" not in argv:
        main_module = sys.modules["__main__"]
        if getattr(main_module, "__spec__", None) is None:
            # The `autotuner` console script: a child would run it again (importing this CLI) before its work;
            # named as the package's __main__, which children skip.
            main_module.__spec__ = importlib.util.find_spec("autotuner.__main__")
        processes.start()
        if argv[1:2] == ["tune"]:
            from autotuner.cli import prestart

            prestart.start(argv[2:])  # its trial worker and compile pool, started before this process imports torch


def main() -> None:
    if "" not in sys.path and os.getcwd() not in sys.path:
        # as under `python -m autotuner`: a decorated kernel's module in the current folder imports (for the
        # commands that name one; a worker imports a job's only where AUTOTUNER_KERNEL_MODULES allows it); before
        # the fork server starts, which hands its children the sys.path it was started with
        sys.path.insert(0, os.getcwd())
    if sys.argv[1:2] not in USERS_CODE:
        bytecode.keep()  # before the command's imports and its processes' start, which read the bytecode it keeps
    start_early(sys.argv)
    from pydantic import ValidationError

    from autotuner.base.registry import PluginError
    from autotuner.base.settings import settings_error
    from autotuner.cli.app import build

    try:
        app = build()
    except ValidationError as exc:
        sys.stderr.write(f"error: {settings_error(exc)}\n")
        sys.exit(4)  # common.SETUP
    except PluginError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(4)
    if sys.argv[1:2] != ["tune"]:
        app()
        return
    try:
        app()
        code: int = 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    exit_fast(code)


def exit_fast(code: int) -> NoReturn:
    """End a `tune` once its output is out and the exit handlers have run, skipping the interpreter's teardown (torch's
    and CUDA's destructors): everything is committed by then. multiprocessing's finalizers run, but not its join of the
    killed trial worker and pool, which would wait on the driver tearing their contexts down."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that went away (a closed pipe): nothing more to say to it
            pass
    exit_function, run_finalizers = getattr(mp_util, "_exit_function", None), getattr(mp_util, "_run_finalizers", None)
    if exit_function is not None and run_finalizers is not None:
        atexit.unregister(exit_function)
    atexit._run_exitfuncs()
    if run_finalizers is not None:
        run_finalizers()
    os._exit(code)


__all__ = ["exit_fast", "main", "start_early"]
