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
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from autotuner.base.registry import import_op, load_plugins
from autotuner.base.settings import Settings
from autotuner.engine.measure import KeptProcesses
from autotuner.store.database import Store
from autotuner.store.job_store import TRANSIENT, DatabaseLost, JobLost, JobStore, retried
from autotuner.store.lazy import LazyStore
from autotuner.store.rows import JobRow
from db.engine import DatabaseUnavailable
from db.models import utcnow

log = logging.getLogger(__name__)


LOST_SIGNAL = signal.SIGUSR1  # the heartbeat thread's way to stop the main thread's tuning of a lost job


class StopWorker(KeyboardInterrupt):
    """Raised in the main thread when the worker is asked to stop in the middle of a job."""


class Worker:
    def __init__(self, settings: Settings, *, gpu: int | None = None, name: str | None = None,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.gpu = gpu
        self.name = name or f"{socket.gethostname()}:{os.getpid()}" + (f":gpu{gpu}" if gpu is not None else "")
        self.on_event = on_event or (lambda message: log.info("%s", message))
        self.store = LazyStore(settings.db_url, create=True, retry_s=0.0, timeout_s=settings.db_timeout_s)
        self._stopping = False
        self._busy = False
        self._job: JobStore | None = None
        self.attempts = 0  # jobs claimed (an attempt); how they ended:
        self.done = 0
        self.failed = 0  # failed for good
        self.requeued = 0  # queued again: given back, or failed with attempts left
        self.lost = 0  # taken back by another worker
        self.kept = KeptProcesses()  # one trial worker and one compile pool for every job this worker tunes
        # (started ahead by run())

    # -- plumbing ---------------------------------------------------------------------------------------
    def _store(self) -> Store:
        return self.store.full()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == LOST_SIGNAL:
            if self._busy and self._job is not None and self._job.lost.is_set():
                raise JobLost(f"job {self._job.job_id} was taken back from {self.name}")
            return
        self._stopping = True
        if self._busy:
            raise StopWorker(f"stopped by signal {signum}")

    def _heartbeat(self, job: JobStore, stop: threading.Event) -> None:
        while not stop.wait(self.settings.heartbeat_s):
            try:
                mine = self._store().heartbeat(job_id=job.job_id, worker=self.name)
            except (SQLAlchemyError, DatabaseUnavailable) as exc:
                self.on_event(f"heartbeat for job {job.job_id} failed (will retry): {exc}")
                continue
            if not mine:
                self.on_event(f"job {job.job_id} was taken back from this worker; stopping its tuning")
                job.lost.set()
                if self._busy:  # interrupt the tuning now, not at its next write (a trial may run for minutes)
                    signal.pthread_kill(threading.main_thread().ident or 0, LOST_SIGNAL)
                return

    # -- the loop ---------------------------------------------------------------------------------------
    def requeue_stale(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.settings.lease_s)
        for job_id, state in self._store().requeue_stale(older_than=cutoff, max_attempts=self.settings.max_attempts):
            self.on_event(f"job {job_id}: its worker stopped heartbeating; now {state}")

    def run(self, *, once: bool = False, until_empty: bool = False) -> int:
        """Work until stopped; `once`: one job then return; `until_empty`: return when nothing is queued or
        running. Returns the number of jobs this worker finished (done or failed)."""
        from autotuner.engine.tuner import prestarted

        load_plugins(self.settings.plugins)
        self.kept = prestarted(self.settings, self.gpu)  # ready when the first job comes
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, LOST_SIGNAL)}
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
            self.kept.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return handled

    def run_job(self, job: JobRow) -> str:
        """Tune one claimed job and record how it ended; returns the job's new state (or "taken", "unknown")."""
        from autotuner.base.device import current_device
        from autotuner.engine.fits import ProblemTooLarge
        from autotuner.engine.runner import WorkerSetupError
        from autotuner.engine.tuner import Plan, tune

        job_id = job.id
        self.attempts += 1
        self.on_event(f"job {job_id}: {job.op} {job.shape} {job.dtype} {job.options or ''} (attempt {job.attempts}) "
                      "started")
        try:
            op = import_op(job.op)
            problem = op.parse_problem(job.shape, job.dtype, **job.options)
        except ValueError as exc:  # an unknown op, shape, dtype or option
            return self._fail(job_id, f"bad job: {exc}", permanent=True)
        store = JobStore(self._store(), job_id=job_id, worker=self.name, retry_s=self.settings.db_retry_s,
                         on_event=self.on_event)
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(store, stop), daemon=True)
        beat.start()
        self._busy = True
        self._job = store
        try:
            if self._stopping:
                raise StopWorker("stopping")
            device = current_device(self.gpu)
            plan = Plan(strategy=job.strategy, trials=job.budget_trials, time_budget_s=job.budget_seconds)
            result = tune(op, problem, store=store, settings=self.settings, plan=plan, device=device, job_id=job_id,
                          kept=self.kept)
        except JobLost as exc:
            self.lost += 1
            self.on_event(f"job {job_id}: stopped, {exc}; this worker writes nothing as its result")
            return "taken"
        except StopWorker as exc:
            self._busy = False
            why = f"worker {self.name} stopped: {exc}"
            self._settle(job_id, lambda s: s.release_job(job_id=job_id, worker=self.name, reason=why))
            self.requeued += 1
            self.on_event(f"job {job_id}: given back ({exc})")
            return "queued"
        except DatabaseLost as exc:
            self._busy = False
            self.on_event(f"job {job_id}: {exc}; giving the job back")
            given = self._settle(job_id, lambda s: s.release_job(job_id=job_id, worker=self.name,
                                                                  reason=f"worker {self.name} lost the database"))
            self.requeued += int(bool(given))
            return "queued" if given else "unknown"
        except ProblemTooLarge as exc:  # no retry can make it fit
            return self._fail(job_id, str(exc), permanent=True)
        except WorkerSetupError as exc:
            out_of_memory = _out_of_memory(str(exc))
            reason = (f"the problem's inputs could not be allocated on {self.gpu_name()}: {out_of_memory}"
                      if out_of_memory else str(exc))
            return self._fail(job_id, reason[:2000], permanent=out_of_memory is not None)
        except TRANSIENT as exc:  # a read outside the retried writes
            self._busy = False
            self.on_event(f"job {job_id}: database unavailable ({exc}); the job goes back when it is")
            given = self._settle(job_id, lambda s: s.release_job(job_id=job_id, worker=self.name,
                                                                  reason=f"worker {self.name} lost the database"))
            return "queued" if given else "unknown"
        except Exception as exc:
            return self._fail(job_id, f"{type(exc).__name__}: {exc}"[:2000])
        finally:
            self._busy = False
            self._job = None
            stop.set()
            beat.join()
        if result.best_config is None:
            return self._fail(job_id, f"every measured config failed; see the trials of run {result.run_id}")
        mine = self._settle(job_id, lambda s: s.finish_job(job_id=job_id, worker=self.name, run_id=result.run_id))
        if not mine:
            self.lost += 1
            self.on_event(f"job {job_id}: finished, but it had been taken back; the other worker's result stands")
            return "taken"
        self.done += 1
        self.on_event(f"job {job_id}: done, best {result.best_ms:.4g} ms {result.best_config}; "
                      f"{len(result.trials)} trials in {result.phase_summary()}")
        return "done"

    def gpu_name(self) -> str:
        return f"GPU {self.gpu}" if self.gpu is not None else "this device"

    def _settle(self, job_id: int, write: Callable[[Store], Any]) -> Any:
        """A write about the job's state, retried while the database is away (for up to db_retry_s); None when
        it could not be made (the lease then gives the job back)."""
        try:
            return retried(lambda: write(self._store()), self.settings.db_retry_s, stop=lambda: self._stopping)
        except TRANSIENT as exc:
            self.on_event(f"job {job_id}: could not record its state ({exc}); its lease will expire")
            return None

    def _fail(self, job_id: int, error: str, *, permanent: bool = False) -> str:
        state = self._settle(job_id, lambda s: s.fail_attempt(
            job_id=job_id, worker=self.name, error=error, max_attempts=self.settings.max_attempts,
            permanent=permanent))
        if state == "failed":
            self.failed += 1
        elif state == "queued":
            self.requeued += 1
        self.on_event(f"job {job_id}: attempt failed ({error.splitlines()[0]}); now {state or 'not ours'}")
        return state or "taken"


def _out_of_memory(message: str) -> str | None:
    """The plain reason of an allocation failure in a trial worker's setup, or None for another failure."""
    lowered = message.lower()
    if "out of memory" in lowered or "can't allocate memory" in lowered or "cannot allocate memory" in lowered:
        first = message.splitlines()[0]
        tried = re.search(r"tried to allocate [\d.]+ [KMGT]i?B\b", first, re.IGNORECASE)  # CUDA: "13.41 GiB"
        need = re.search(r"allocate (\d+) bytes", first)
        if tried:
            return f"out of memory ({tried.group(0)})"
        if need:
            return f"out of memory (tried to allocate {int(need.group(1)) / 1e9:.1f} GB)"
        return "out of memory"
    return None
