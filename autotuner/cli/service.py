"""`autotuner serve` and `autotuner worker`: the long-running commands."""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from typing import TYPE_CHECKING

import typer
from rich.text import Text

from autotuner.cli.common import BAD_INPUT, DATABASE, DbOpt, command, console, err, fail, settings, warn

if TYPE_CHECKING:
    from autotuner.engine.measure.live import KeptProcesses


@command
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (0.0.0.0 for every interface)"),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    db: DbOpt = None,
    access_log: bool = typer.Option(False, "--access-log/--no-access-log", help="log every request"),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Run the HTTP service: GET /config, /results, /devices, /jobs, /healthz, /metrics; POST /jobs.

    Writes need AUTOTUNER_TOKEN set on the server and sent as 'Authorization: Bearer <token>'.
    """
    import uvicorn

    from api.app import create_app
    from autotuner.store.errors import describe

    s = settings(db)
    url = describe(s.db_url)
    _refuse_unusable_database(s.db_url, s.min_free_bytes)
    _check_port(host, port)
    application = create_app(s)
    writes = "enabled (token set)" if s.token else "disabled (AUTOTUNER_TOKEN is not set)"
    err.print(f"autotuner service on http://{host}:{port}  database: {url}  writes: {writes}")
    uvicorn.run(application, host=host, port=port, access_log=access_log, log_level=log_level)


def _refuse_unusable_database(url: str | None, min_free_bytes: int) -> None:
    """A database file that is not one (or is corrupt) stops `serve` before it listens; one that cannot be reached
    now is waited for (503 until then), and one that cannot keep a write is served read-only, with a warning."""
    from sqlalchemy.exc import DatabaseError

    from autotuner.store import open_store
    from autotuner.store.errors import NotAStore as NotAutotunerDatabase
    from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable
    from autotuner.store.errors import cause_of

    try:
        problem = open_store(url).health(min_free_bytes)
    except NotAutotunerDatabase as exc:
        fail(str(exc), DATABASE)
    except (DatabaseUnavailable, DatabaseError) as exc:
        cause = cause_of(exc)
        if cause is None and isinstance(exc, DatabaseUnavailable):
            return  # away for now: served 503 until it answers
        if cause is None:
            raise
        fail(f"{cause}: point --db or AUTOTUNER_DB_URL at an autotuner database", DATABASE)
    if problem is not None:
        warn(f"{problem}; lookups are served, writes are refused until it is fixed")


def _check_port(host: str, port: int) -> None:
    """A port another process listens on, named before uvicorn's bare `[Errno 98]`."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                fail(f"port {port} on {host} is in use (another `autotuner serve`?): stop it or choose --port", BAD_INPUT)
            if exc.errno == errno.EADDRNOTAVAIL:
                fail(f"--host {host} is not an address of this machine", BAD_INPUT)
            raise


@command
def worker(
    ctx: typer.Context,
    gpu: int | None = typer.Option(None, "--gpu", min=0, help="CUDA device index to tune on (default: the current one)"),
    gpus: str | None = typer.Option(None, "--gpus", help="several GPUs of one type, e.g. 0,1: a job on each at "
                                                         "once (a job asking for several measures on several)"),
    once: bool = typer.Option(False, "--once", help="run one job (if any is queued) and exit"),
    until_empty: bool = typer.Option(False, "--until-empty", help="exit when no job is queued or running"),
    name: str | None = typer.Option(None, "--name", help="worker name stored on its jobs (default: host:pid[:gpuN])"),
    db: DbOpt = None,
) -> None:
    """Claim queued tuning jobs from the database and run them until stopped (SIGTERM or Ctrl-C gives the running job
    back). `autotuner tune` typed on this host with the same database is handed to it (AUTOTUNER_LOCAL_WORKER=0: not).
    """
    from autotuner.base.device import current_device, parse_gpus
    from autotuner.cli import handed_run
    from autotuner.worker.command_socket import Request
    from autotuner.worker.loop import Worker
    from kernels._backend import interpreting

    s = settings(db)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        lanes = parse_gpus(gpus)
    except ValueError as exc:
        fail(str(exc))
    if lanes and gpu is not None:
        fail("give --gpu or --gpus, not both")
    if len(set(lanes)) != len(lanes):
        fail(f"--gpus names a device twice: {gpus}")
    if lanes and not interpreting():
        gpu = lanes[0]
        from autotuner.engine.plan import more_devices

        try:  # each there, and of one type: a job's time must not depend on the GPU that measured it
            more_devices(current_device(gpu), lanes)
        except ValueError as exc:
            fail(str(exc))
    device = current_device(gpu)
    if gpu is not None and device.is_interpreter:
        warn("warning: no CUDA device here; --gpu is ignored and jobs run in Triton's interpreter")

    def event(message: str) -> None:
        console.print(Text.assemble((f"{datetime.now():%H:%M:%S}", "dim"), " ", message), soft_wrap=True)

    cli = ctx.find_root().command  # the command line this worker was started with

    def serve_command(request: Request, kept: KeptProcesses) -> bool:
        return handed_run.run(request, cli, kept, s, w.name, gpu)

    w = Worker(s, gpu=gpu, name=name, on_event=event, serve=serve_command, gpus=lanes)
    event(f"worker {w.name} on {device.key}, polling every {s.poll_s:g} s")
    from autotuner.store.errors import NotAStore as NotAutotunerDatabase
    from autotuner.store.errors import StoreLost as StorageLost
    from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable

    try:
        w.run(once=once, until_empty=until_empty)
    except (DatabaseUnavailable, NotAutotunerDatabase, StorageLost) as exc:
        fail(str(exc), DATABASE)
    n = w.ledger
    event(f"worker {w.name} stopped: {n.attempts} attempt(s) on jobs: {n.done} done, {n.failed} failed, "
          f"{n.requeued} queued again, {n.lost} taken back by another worker")
    if w.stopped_by is not None:  # as a shell reports a process a signal ended: 130 (SIGINT), 143 (SIGTERM)
        raise typer.Exit(128 + w.stopped_by)
