"""A running job's heartbeat: a thread refreshes it every `heartbeat_s`; when the job was taken back (its lease
ran out while this worker stalled), the job is marked lost and the main thread is interrupted at once
(LOST_SIGNAL), since a trial may run for minutes before the tuning's next write would notice."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import TracebackType

from sqlalchemy.exc import SQLAlchemyError

from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable
from autotuner.store.interfaces import JobQueue
from autotuner.store.job_store import JobStore

LOST_SIGNAL = signal.SIGUSR1  # the heartbeat thread's way to stop the main thread's tuning of a lost job


class Heartbeat:
    def __init__(self, queue: Callable[[], JobQueue], job: JobStore, *, worker: str, every_s: float,
                 on_event: Callable[[str], None], busy: Callable[[], bool],
                 on_lost: Callable[[], None] | None = None) -> None:
        """`on_lost`: how to stop the job's tuning when it was taken back (default: interrupt the main thread)."""
        self.queue, self.job, self.worker, self.every_s = queue, job, worker, every_s
        self.on_event, self.busy, self.on_lost = on_event, busy, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"heartbeat-{job.job_id}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        job = self.job
        while not self._stop.wait(self.every_s):
            try:
                mine = self.queue().heartbeat(job_id=job.job_id, worker=self.worker)
            except (SQLAlchemyError, DatabaseUnavailable) as exc:
                self.on_event(f"heartbeat for job {job.job_id} failed (will retry): {exc}")
                continue
            if not mine:
                self.on_event(f"job {job.job_id} was taken back from this worker; stopping its tuning")
                job.lost.set()
                if self.on_lost is not None:
                    self.on_lost()
                elif self.busy():  # interrupt the tuning now, not at its next write
                    signal.pthread_kill(threading.main_thread().ident or 0, LOST_SIGNAL)
                return
