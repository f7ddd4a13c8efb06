"""`autotuner worker`: claim queued jobs, run the tuning engine on them, write their results.

Several workers (several GPUs, several hosts) share one database and never take the same job twice
(db.queue). While a job runs, a thread refreshes its heartbeat; a job whose worker stopped heartbeating for
`lease_s` is queued again by whichever worker looks next, and a job that failed `max_attempts` times is
marked failed with its reason. SIGTERM or Ctrl-C stops the running tuning, gives its job back without
counting the attempt, and exits.

The worker outlives its database: the tuner writes through a `JobStore` (retries, trials kept in memory while
the database is away), and every write about a job's state is retried for up to `db_retry_s`; a worker never
exits on a database error. A job taken back while it runs (the worker stalled past its lease) is stopped at
once, and nothing this worker measured becomes the job's result.

A worker also takes `autotuner tune` commands typed on its host (autotuner.worker.command_socket): given a `serve`
function (the CLI's), it opens its command socket and runs each command handed over before the next queued job, in the
processes it keeps.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType

from sqlalchemy.exc import SQLAlchemyError

from autotuner.base.registry import load_plugins
from autotuner.base.settings import Settings
from autotuner.engine.compile_share import share
from autotuner.engine.measure import KeptProcesses
from autotuner.store.database import Store
from autotuner.store.job_store import JobLost, JobStore
from autotuner.store.lazy import LazyStore
from autotuner.store.rows import JobRow
from autotuner.worker.command_socket import CommandSocket, Request, runtime_dir
from autotuner.worker.heartbeat import LOST_SIGNAL, Heartbeat
from autotuner.worker.job_endings import EndingWriter, StopWorker
from autotuner.worker.jobs import job_gpus, work_for
from db.engine import DatabaseUnavailable
from db.health import LOST, StorageLost
from db.models import utcnow
from kernels._backend import interpreting

log = logging.getLogger(__name__)

# Runs a command handed over through the command socket, in the worker's kept processes; True: a signal sent to the worker
# stopped it (the worker stops too).
Serve = Callable[[Request, KeptProcesses], bool]


class Worker:
    def __init__(self, settings: Settings, *, gpu: int | None = None, name: str | None = None,
                 on_event: Callable[[str], None] | None = None, serve: Serve | None = None,
                 gpus: tuple[int, ...] = ()) -> None:
        """`gpus`: several GPUs that measure each tuning job's configs at once (the first is `gpu`)."""
        self.settings = settings
        self.gpus = gpus
        self.gpu = gpus[0] if gpus and not interpreting() else gpu
        on = f":gpus{','.join(map(str, gpus))}" if gpus else f":gpu{gpu}" if gpu is not None else ""
        self.name = name or f"{socket.gethostname()}:{os.getpid()}" + on
        self.on_event = on_event or (lambda message: log.info("%s", message))
        self.store = LazyStore(settings.db_url, create=True, retry_s=0.0, timeout_s=settings.db_timeout_s)
        self._stopping = False
        self.stopped_by: int | None = None  # the signal that stopped it (the command exits 128 + it)
        self._running: int | None = None  # the job it runs, from its claim to its end (the command socket says so)
        self._busy = False
        self._job: JobStore | None = None
        self._down_since: float | None = None  # when claiming started to fail (the database away)
        self.ledger = EndingWriter(self._store, worker=self.name, retry_s=settings.db_retry_s,
                             max_attempts=settings.max_attempts, on_event=self.on_event, stopping=lambda: self._stopping)
        share(settings.compile_secret, settings.db_url)  # the compiles of its processes, with other hosts
        self.kept = KeptProcesses()  # one trial worker and one compile pool for every job this worker tunes
        # (started ahead by run())
        self.serve = serve if settings.local_worker else None
        self.socket: CommandSocket | None = None

    # -- plumbing ---------------------------------------------------------------------------------------
    def _store(self) -> Store:
        return self.store.full()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == LOST_SIGNAL:
            if self._busy and self._job is not None and self._job.lost.is_set():
                raise JobLost(f"job {self._job.job_id} was taken back from {self.name}")
            return
        self._stopping = True
        self.stopped_by = signum
        if self._busy:
            raise StopWorker(f"stopped by signal {signum}")

    # -- the loop ---------------------------------------------------------------------------------------
    def requeue_stale(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.settings.lease_s)
        for job_id, state in self._store().requeue_stale(older_than=cutoff, max_attempts=self.settings.max_attempts):
            self.on_event(f"job {job_id}: its worker stopped heartbeating; now {state}")

    def run(self, *, once: bool = False, until_empty: bool = False) -> int:
        """Work until stopped; `once`: one job then return; `until_empty`: return when nothing is queued or
        running. Returns the number of jobs this worker finished (done or failed)."""
        from autotuner.engine.measure import prestarted

        load_plugins(self.settings.plugins)
        self.kept = prestarted(self.settings, self.gpu)  # ready when the first job comes
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, LOST_SIGNAL)}
        handled = 0
        self._down_since = None
        self._open_socket()
        try:
            while not self._stopping:
                if self._serve_next(0.0):
                    continue
                job, counts = self._claim(give_up=once or until_empty)
                if job is None:
                    if counts is not None and (once or (until_empty and not counts["queued"] and not counts["running"])):
                        break
                    if self.socket is not None:
                        self._serve_next(self.settings.poll_s)  # idle: a command typed here is taken at once
                    else:
                        time.sleep(self.settings.poll_s)
                    continue
                self.run_job(job)
                handled += 1
                if once:
                    break
        finally:
            if self.socket is not None:
                self.socket.close()
                self.socket = None
            self.kept.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return handled

    # -- commands typed on this host ----------------------------------------------------------------------
    def _open_socket(self) -> None:
        if self.serve is None:
            return
        sock = CommandSocket(runtime_dir(self.settings.runtime_dir), self.name,
                             busy=lambda: f"job {self._running}" if self._running is not None else None)
        try:
            sock.open()
        except OSError as exc:
            self.on_event(f"commands on this host cannot hand their problems to this worker: {sock.path}: {exc}")
            return
        self.socket = sock

    def _serve_next(self, wait_s: float) -> bool:
        """Run the next command handed over (waiting up to `wait_s` for one); False if none came."""
        request = self.socket.take(wait_s) if self.socket is not None else None
        if request is None or self.serve is None:
            return False
        command = " ".join(["tune", *request.argv])
        self.on_event(f"{command}: from a command on this host")
        t0 = time.perf_counter()
        if self.serve(request, self.kept):
            self._stopping = True
        self.on_event(f"{command}: over in {time.perf_counter() - t0:.1f} s")
        return True

    def _claim(self, *, give_up: bool) -> tuple[JobRow | None, dict[str, int] | None]:
        """The next job (stale ones queued again first), or None with the count of jobs by state; None and None
        while the database is away. A worker asked to drain the queue and stop (`give_up`) raises after
        db_wait_s of that; a long-running one keeps waiting."""
        try:
            problem = self._store().health(self.settings.min_free_bytes)
            if problem in LOST:
                # what this worker writes would be lost (a deleted file) or go elsewhere than its jobs came from
                raise StorageLost(f"{problem}; worker {self.name} stops")
            if problem is not None:  # read-only, full or corrupt: nothing is claimed until it is fixed
                raise DatabaseUnavailable(problem)
            self.requeue_stale()
            job, counts = self._store().claim_job(self.name)
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            now = time.monotonic()
            self._down_since = self._down_since if self._down_since is not None else now
            if give_up and now - self._down_since >= self.settings.db_wait_s:
                raise DatabaseUnavailable(f"gave up after {now - self._down_since:.0f} s (AUTOTUNER_DB_WAIT_S="
                                          f"{self.settings.db_wait_s:g}): {exc}") from None
            self.on_event(f"database unavailable, retrying in {self.settings.poll_s:g} s: {exc}")
            return None, None
        self._down_since = None
        return job, counts

    def _on_gpus(self, job: JobRow) -> str:
        """Which of this worker's GPUs measure a tuning job, where it has several or the job asks for several."""
        if job.kind != "tune" or (len(self.gpus) <= 1 and not job.gpus):
            return ""
        held = self.gpus or ((self.gpu,) if self.gpu is not None else (0,))
        used = job_gpus(job, held)
        short = f", of the {job.gpus} it asks for" if job.gpus is not None and job.gpus > len(held) else ""
        return f" on {len(used)} GPU{'s' * (len(used) > 1)} ({','.join(map(str, used))}{short})"

    def run_job(self, job: JobRow) -> str:
        """Run one claimed job (autotuner.worker.jobs: tune a problem, or cross-time a sweep) and record how it
        ended; returns the job's new state (or "taken", "unknown"). The command socket says this worker is busy from here
        to the end, so a command typed meanwhile is not held back by the job."""
        self._running = job.id
        try:
            return self._run_job(job)
        finally:
            self._running = None

    def _run_job(self, job: JobRow) -> str:
        from autotuner.base.device import current_device

        self.ledger.attempts += 1
        kind = "" if job.kind == "tune" else f"{job.kind} of sweep {job.sweep_id}: "
        self.on_event(f"job {job.id}: {kind}{job.op} {job.shape} {job.dtype} {job.options or ''} "
                      f"(attempt {job.attempts}) started{self._on_gpus(job)}")
        try:
            work = work_for(job, self.settings, current_device(self.gpu), self.kept, self.gpus, self.on_event)
        except ValueError as exc:  # an unknown op, shape, dtype or option
            return self.ledger.fail(job.id, f"bad job: {exc}", permanent=True)
        store = JobStore(self._store(), job_id=job.id, worker=self.name, retry_s=self.settings.db_retry_s,
                         on_event=self.on_event)
        beat = Heartbeat(self._store, store, worker=self.name, every_s=self.settings.heartbeat_s,
                         on_event=self.on_event, busy=lambda: self._busy)
        self._busy, self._job = True, store
        try:
            with beat:
                if self._stopping:
                    raise StopWorker("stopping")
                done = work(store)
        except (Exception, StopWorker, JobLost) as exc:
            self._busy = False
            return self.ledger.end(job.id, exc, f"GPU {self.gpu}" if self.gpu is not None else "this device")
        finally:
            self._busy, self._job = False, None
        if not done.ok:
            return self.ledger.fail(job.id, done.summary)
        return self.ledger.done_with(job.id, done.run_id, done.summary)

