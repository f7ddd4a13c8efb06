"""`autotuner worker`: claim queued jobs, run the tuning engine on them, write their results.

Several workers (several GPUs, several hosts) share one database and never take the same job twice
(db.queue). While a job runs, a thread refreshes its heartbeat; a job whose worker stopped heartbeating for
`lease_s` is queued again by whichever worker looks next, and a job that failed `max_attempts` times is
marked failed with its reason. SIGTERM or Ctrl-C stops the running tuning, gives its job back without
counting the attempt, and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType

from sqlalchemy.exc import SQLAlchemyError

from autotuner.registry import import_op, load_plugins
from autotuner.settings import Settings
from autotuner.store import LazyStore, Store
from db.engine import DatabaseUnavailable
from db.models import Job, utcnow

log = logging.getLogger(__name__)


class StopWorker(KeyboardInterrupt):
    """Raised in the main thread when the worker is asked to stop in the middle of a job."""


class Worker:
    def __init__(self, settings: Settings, *, gpu: int | None = None, name: str | None = None,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.gpu = gpu
        self.name = name or f"{socket.gethostname()}:{os.getpid()}" + (f":gpu{gpu}" if gpu is not None else "")
        self.on_event = on_event or (lambda message: log.info("%s", message))
        self.store = LazyStore(settings.db_url, create=True, retry_s=0.0)
        self._stopping = False
        self._busy = False
        self.done = 0
        self.failed = 0

    # -- plumbing ---------------------------------------------------------------------------------------
    def _store(self) -> Store:
        return self.store.get()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping = True
        if self._busy:
            raise StopWorker(f"stopped by signal {signum}")

    def _heartbeat(self, job_id: int, stop: threading.Event) -> None:
        while not stop.wait(self.settings.heartbeat_s):
            try:
                mine = self._store().heartbeat(job_id=job_id, worker=self.name)
                if not mine:
                    self.on_event(f"job {job_id} was taken back from this worker; its result will not be recorded")
                    return
            except (SQLAlchemyError, DatabaseUnavailable) as exc:
                self.on_event(f"heartbeat for job {job_id} failed (will retry): {exc}")

    # -- the loop ---------------------------------------------------------------------------------------
    def requeue_stale(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.settings.lease_s)
        for job_id, state in self._store().requeue_stale(older_than=cutoff, max_attempts=self.settings.max_attempts):
            self.on_event(f"job {job_id}: its worker stopped heartbeating; now {state}")

    def run(self, *, once: bool = False, until_empty: bool = False) -> int:
        """Work until stopped; `once`: one job then return; `until_empty`: return when nothing is queued or
        running. Returns the number of jobs this worker finished (done or failed)."""
        load_plugins(self.settings.plugins)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        handled = 0
        down_since: float | None = None
        try:
            while not self._stopping:
                try:
                    self.requeue_stale()
                    job, counts = self._store().claim_job(self.name)
                    down_since = None
                except (SQLAlchemyError, DatabaseUnavailable) as exc:
                    now = time.monotonic()
                    down_since = down_since if down_since is not None else now
                    if (once or until_empty) and now - down_since >= self.settings.db_wait_s:
                        # A worker asked to drain the queue and stop gives up; a long-running one keeps waiting.
                        raise DatabaseUnavailable(f"gave up after {now - down_since:.0f} s (AUTOTUNER_DB_WAIT_S="
                                                  f"{self.settings.db_wait_s:g}): {exc}") from None
                    self.on_event(f"database unavailable, retrying in {self.settings.poll_s:g} s: {exc}")
                    time.sleep(self.settings.poll_s)
                    continue
                if job is None:
                    if once or (until_empty and counts["queued"] == 0 and counts["running"] == 0):
                        break
                    time.sleep(self.settings.poll_s)
                    continue
                self.run_job(job)
                handled += 1
                if once:
                    break
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return handled

    def run_job(self, job: Job) -> str:
        """Tune one claimed job and record how it ended; returns the job's new state."""
        from autotuner.device import current_device
        from autotuner.tuner import tune

        job_id = job.id
        self.on_event(f"job {job_id}: {job.op} {job.shape} {job.dtype} {job.options or ''} (attempt {job.attempts}) "
                      "started")
        try:
            op = import_op(job.op)
            problem = op.parse_problem(job.shape, job.dtype, **job.options)
        except ValueError as exc:  # an unknown op, shape, dtype or option
            return self._fail(job_id, f"bad job: {exc}", permanent=True)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job_id, stop), daemon=True)
        beat.start()
        self._busy = True
        try:
            if self._stopping:
                raise StopWorker("stopping")
            device = current_device(self.gpu)
            result = tune(op, problem, store=self._store(), settings=self.settings, strategy=job.strategy,
                          trials=job.budget_trials, time_budget_s=job.budget_seconds, device=device, job_id=job_id)
        except StopWorker as exc:
            self._busy = False
            self._store().release_job(job_id=job_id, worker=self.name, reason=f"worker {self.name} stopped: {exc}")
            self.on_event(f"job {job_id}: given back ({exc})")
            return "queued"
        except Exception as exc:
            return self._fail(job_id, f"{type(exc).__name__}: {exc}"[:2000])
        finally:
            self._busy = False
            stop.set()
            beat.join()
        if result.best_config is None:
            return self._fail(job_id, f"every measured config failed; see the trials of run {result.run_id}")
        mine = self._store().finish_job(job_id=job_id, worker=self.name, run_id=result.run_id)
        if not mine:
            self.on_event(f"job {job_id}: finished, but it had been taken back; the other worker's result stands")
            return "taken"
        self.done += 1
        self.on_event(f"job {job_id}: done in {result.elapsed_s:.1f} s, best {result.best_ms:.4g} ms "
                      f"{result.best_config}")
        return "done"

    def _fail(self, job_id: int, error: str, *, permanent: bool = False) -> str:
        state = self._store().fail_attempt(job_id=job_id, worker=self.name, error=error,
                                           max_attempts=self.settings.max_attempts, permanent=permanent)
        if state == "failed":
            self.failed += 1
        self.on_event(f"job {job_id}: attempt failed ({error.splitlines()[0]}); now {state or 'not ours'}")
        return state or "taken"
