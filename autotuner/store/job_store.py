"""The store a worker hands the tuner for one job: writes that outlive a database outage, and a job that can be taken
back. More: docs/design/store.md."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from autotuner.store.interfaces import NotHeld, Storage, TrialTimes
from autotuner.store.rows import CrossTimingRow, SweepRow
from autotuner.store.stored_best import StoredBest
from db.engine import DatabaseUnavailable
from search_spaces.contract import ProblemType
from search_spaces.errors import AutotunerError

log = logging.getLogger(__name__)
T = TypeVar("T")
TRANSIENT = (OperationalError, InterfaceError, PoolTimeout, DatabaseUnavailable)
FIRST_WAIT_S, MAX_WAIT_S = 0.5, 5.0


def retried(call: Callable[[], T], retry_s: float, *, before: Callable[[], None] = lambda: None,
            stop: Callable[[], bool] = lambda: False,
            on_first: Callable[[BaseException], None] = lambda exc: None) -> T:
    """`call`, retried with backoff (0.5 s doubling to 5 s) while the database is unavailable, for up to
    `retry_s` or until `stop()`; then the last error is raised. `before` runs ahead of every try, `on_first`
    after the first failure."""
    wait, started = FIRST_WAIT_S, time.monotonic()
    while True:
        before()
        try:
            return call()
        except TRANSIENT as exc:
            waited = time.monotonic() - started
            if waited >= retry_s or stop():
                raise
            if wait == FIRST_WAIT_S:
                on_first(exc)
            time.sleep(min(wait, max(0.0, retry_s - waited)))
            wait = min(wait * 2, MAX_WAIT_S)


class JobLost(KeyboardInterrupt):
    """The job was taken back from this worker: stop tuning it, and write nothing as its result. (A
    KeyboardInterrupt, so the tuner marks its run interrupted, as for any stop.)"""


class DatabaseLost(AutotunerError, RuntimeError):
    """The database stayed unavailable for longer than the worker may wait."""


class JobStore:
    """A RunStore (autotuner.store.interfaces) over a whole store, for one job of one worker."""

    def __init__(self, store: Storage, *, job_id: int, worker: str, retry_s: float,
                 on_event: Callable[[str], None] = log.info) -> None:
        self.store = store
        self.job_id = job_id
        self.worker = worker
        self.retry_s = retry_s
        self.on_event = on_event
        self.lost = threading.Event()
        self.stopped: BaseException | None = None  # `stop`: raised by every write of the run but its end
        self.pending: list[tuple[int, dict[str, Any]]] = []  # (placeholder id, trial fields) not written yet
        self._real: dict[int, int] = {}  # placeholder id -> the trial's id once written
        self._retimed: list[tuple[int, float]] = []  # re-timings of trials still pending
        self._placeholders = itertools.count(-1, -1)
        self.outages = 0
        self.gave_up = False  # DatabaseLost was raised: later writes are not attempted

    # -- plumbing -------------------------------------------------------------------------------------
    def stop(self, reason: BaseException) -> None:
        """Stop the tuning from another thread: its next write (a trial, the winner) raises `reason`; the run's end
        is still written."""
        self.stopped = reason

    def _check_lost(self) -> None:
        if self.lost.is_set():
            raise JobLost(f"job {self.job_id} was taken back from {self.worker}")

    def _check(self) -> None:
        self._check_lost()
        if self.stopped is not None:
            raise self.stopped

    def _retry(self, what: str, call: Callable[[], T], *, ending: bool = False) -> T:
        """`call`, retried while the database is unavailable, for up to retry_s; then DatabaseLost."""
        started = time.monotonic()

        def first(exc: BaseException) -> None:
            self.outages += 1
            self.on_event(f"job {self.job_id}: database unavailable while writing {what}; retrying for up to "
                          f"{self.retry_s:g} s ({_first_line(exc)})")

        try:
            return retried(call, self.retry_s, before=self._check_lost if ending else self._check, on_first=first)
        except TRANSIENT as exc:
            self.gave_up = True
            raise DatabaseLost(f"the database stayed unavailable for {time.monotonic() - started:.0f} s while "
                               f"writing {what} (AUTOTUNER_DB_RETRY_S={self.retry_s:g}): {_first_line(exc)}") from None

    def _flush(self) -> None:
        """Write the kept trials, in order (raises a transient error when the database is still away)."""
        while self.pending:
            placeholder, fields = self.pending[0]
            self._real[placeholder] = self.store.record_trial(**fields)
            self.pending.pop(0)
        while self._retimed:
            trial_id, ms = self._retimed[0]
            self.store.set_retimed(trial_id=self._real.get(trial_id, trial_id), retimed_ms=ms)
            self._retimed.pop(0)

    def flush(self) -> None:
        self._retry("the kept trials", self._flush)

    # -- what the tuner calls -----------------------------------------------------------------------------
    def start_run(self, **kw: Any) -> int:
        return self._retry("the run", lambda: self.store.start_run(**kw))

    def record_rejections(self, **kw: Any) -> None:
        self._retry("the rejections", lambda: self.store.record_rejections(**kw))

    def record_trial(self, **kw: Any) -> int:
        """The trial's id; while the database is away, a placeholder, and the trial is kept to be written later."""
        self._check()
        try:
            self._flush()
            return self.store.record_trial(**kw)
        except TRANSIENT as exc:
            placeholder = next(self._placeholders)
            if not self.pending:
                self.outages += 1
                self.on_event(f"job {self.job_id}: database unavailable; keeping trials in memory until it is back "
                              f"({_first_line(exc)})")
            self.pending.append((placeholder, kw))
            return placeholder

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        self._check()
        self._retimed.append((trial_id, retimed_ms))
        try:
            self._flush()
        except TRANSIENT:
            pass  # written with the next write that gets through, or by finish_run at the latest

    def save_best(self, **kw: Any) -> bool:
        self.flush()
        try:
            return self._retry("the winner", lambda: self.store.save_best(holder=(self.job_id, self.worker), **kw))
        except NotHeld:
            self.lost.set()
            raise JobLost(f"job {self.job_id} was taken back from {self.worker} before its winner was stored") from None

    def finish_run(self, *, run_id: int, status: str, error: str | None = None) -> None:
        if self.gave_up and status != "done":
            return  # the database is gone: the run stays `running` until a requeue marks it interrupted
        if status == "done":
            self.flush()
        try:
            self._retry("the run's end", lambda: self.store.finish_run(
                run_id=run_id, status=status, error=error, holder=(self.job_id, self.worker)), ending=True)
        except NotHeld:
            self.lost.set()
            raise JobLost(f"job {self.job_id} was taken back from {self.worker}") from None
        except JobLost:
            if status != "done":  # a stop after the job was lost: its run was marked interrupted by the requeue
                return
            raise

    def best(self, **kw: Any) -> StoredBest | None:
        return self._retry("(reading) the stored best", lambda: self.store.best(**kw))

    def trial_times(self, **kw: Any) -> TrialTimes:
        return self._retry("(reading) earlier trials", lambda: self.store.trial_times(**kw))

    def nearest(self, **kw: Any) -> list[tuple[ProblemType, StoredBest]]:
        return self._retry("(reading) the nearest results", lambda: self.store.nearest(**kw))

    def sweeps(self, **kw: Any) -> list[SweepRow]:
        return self._retry("(reading) sweeps", lambda: self.store.sweeps(**kw))

    def cross_timings(self, sweep_id: int, **kw: Any) -> list[CrossTimingRow]:
        return self._retry("(reading) cross timings", lambda: self.store.cross_timings(sweep_id, **kw))


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]
