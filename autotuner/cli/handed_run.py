"""A worker running `autotuner tune` for a command typed on this host (the command's side: autotuner.cli.handoff). More:
docs/design/service.md."""

from __future__ import annotations

import _thread
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from autotuner.worker.command_socket import Request
from search_spaces.errors import AutotunerError

if TYPE_CHECKING:
    from autotuner.base.settings import Settings
    from autotuner.engine.measure.live import KeptProcesses

# The command's environment applied while it runs here: its settings, and what its terminal rendering reads.
RENDERING = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")
# Variables that must agree, or the command would run on another device or with other ops here.
SAME = ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "AUTOTUNER_PLUGINS")


class Command(Protocol):
    """The command line's root command (a click command, as typer builds it)."""

    def main(self, args: list[str], prog_name: str) -> Any: ...


class Declined(AutotunerError):
    """The command would not run here as it would where it was typed (raised before it writes anything)."""


@dataclass
class HandedRun:
    kept: KeptProcesses  # the worker's trial worker and compile pool
    worker: str
    gpu: int | None  # the worker's --gpu
    database: str  # the worker's database (db.engine.identity)
    startup_s: float | None  # the command's process, up to handing the command over
    received: float = field(default_factory=time.perf_counter)

    def check_database(self, url: str | None) -> None:
        from autotuner.store.errors import same_store as identity

        if identity(url) != self.database:
            raise Declined("it names another database than the worker's")

    def since_start(self) -> float | None:
        """The command's start-up as it saw it: its own process, then waiting for this worker."""
        if self.startup_s is None:
            return None
        return self.startup_s + time.perf_counter() - self.received


_current: HandedRun | None = None


def current() -> HandedRun | None:
    """The command being run for another process, if this is one."""
    return _current


def release(kept: KeptProcesses) -> None:
    """Stop a command's own trial worker and compile pool (a worker's outlive the commands it runs)."""
    if _current is None or kept is not _current.kept:
        kept.close()


class _Stream:
    """A text stream whose writes go to the command's standard output or error."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, request: Request, key: str, tty: bool) -> None:
        self.request, self.key, self.tty = request, key, tty
        self.wrote = False

    def write(self, text: str) -> int:
        if text:
            self.wrote = True
            self.request.send({self.key: text})
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty

    def fileno(self) -> int:
        raise OSError("a command's stream relayed by a worker has no file descriptor")


def refusal(request: Request) -> str | None:
    """Why the command cannot run here as it would where it was typed, before parsing it (None: it can)."""
    for name in SAME:
        if request.env.get(name) != os.environ.get(name):
            return f"its {name} differs from the worker's"
    op = next((a for a in request.argv if not a.startswith("-")), "")
    if ":" in op:
        return "a decorated kernel's op is imported from the command's folder"
    if not os.path.isdir(request.cwd):
        return "the worker cannot enter the command's folder"
    return None


@contextmanager
def _environment(request: Request) -> Iterator[None]:
    """The command's AUTOTUNER_* settings, rendering variables and folder, restored afterwards."""
    names = {k for k in (*os.environ, *request.env) if k.startswith("AUTOTUNER_") or k in RENDERING}
    saved = {k: os.environ.get(k) for k in names}
    folder = os.getcwd()
    for k in names:
        if k in request.env:
            os.environ[k] = request.env[k]
        else:
            os.environ.pop(k, None)
    try:
        try:
            os.chdir(request.cwd)
        except OSError as exc:
            raise Declined(f"the worker cannot enter the command's folder: {exc.strerror}") from None
        yield
    finally:
        os.chdir(folder)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _streams(request: Request) -> Iterator[tuple[_Stream, _Stream]]:
    """sys.stdout/stderr and the CLI's consoles writing to the command's."""
    from autotuner.cli import common

    out, err = _Stream(request, "out", request.stdout_tty), _Stream(request, "err", request.stderr_tty)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    common.reset_consoles(request.columns)
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved
        common.reset_consoles()


def run(request: Request, cli: Command, kept: KeptProcesses, settings: Settings, worker: str,
        gpu: int | None) -> bool:
    """Run the command handed over (`cli`: the command line's root command, as the worker was started with), and
    close its connection; True if a signal sent to this worker stopped it (the worker should stop too)."""
    global _current
    from autotuner.store.errors import same_store as identity

    reason = refusal(request)
    if reason is not None:
        request.decline(reason)
        return False
    database = identity(settings.db_url)  # here, before entering the command's folder: a relative path is ours
    signalled: list[int] = []

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        if request.done:
            return  # the command closed its end just as it ended here: nothing to interrupt
        if not request.gone.is_set():
            signalled.append(signum)  # sent to this worker, not the command closing its end
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        with _environment(request):
            if not request.send({"start": True}):
                return False
            _current = HandedRun(kept, worker, gpu, database, request.startup_s)
            request.watch(lambda: _thread.interrupt_main(signal.SIGINT))
            with _streams(request) as (out, err):
                try:
                    cli.main(["tune", *request.argv], prog_name="autotuner")
                except SystemExit as exc:
                    code = _exit_code(exc.code, err)
                except Declined as exc:
                    if not (out.wrote or err.wrote):
                        request.decline(str(exc))
                        return False
                    code = 1
                except KeyboardInterrupt:
                    code = 130
                request.end()
                _checkpoint()  # an interrupt the command's closing end scheduled runs here, as a no-op
    except Declined as exc:
        request.decline(str(exc))
        return False
    except KeyboardInterrupt:  # between the command's end and here
        code = 130
    finally:
        request.end()
        _checkpoint()
        _current = None
        for s, handler in previous.items():
            signal.signal(s, handler)
        request.finish(code)
    return bool(signalled)


def _checkpoint() -> None:
    """A Python call: the interpreter runs pending signal handlers on entering one."""


def _exit_code(code: Any, err: _Stream) -> int:
    if isinstance(code, str):
        err.write(code + "\n")
        return 1
    return code if isinstance(code, int) else 0
