"""How a job ends: `ending` decides what a tuning that raised means (nothing written, given back, or a failed attempt,
for good when no retry can help), and `EndingWriter` writes it, retried through outages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from autotuner.base.registry import UnknownOpError
from autotuner.engine.fits import ProblemTooLarge
from autotuner.engine.measure.runner import WorkerSetupError
from autotuner.store.interfaces import JobQueue
from autotuner.store.job_store import TRANSIENT, DatabaseLost, JobLost, retried


class StopWorker(KeyboardInterrupt):
    """Raised in the main thread when the worker is asked to stop in the middle of a job."""


@dataclass(frozen=True, kw_only=True)
class Ending:
    action: Literal["nothing", "release", "fail"]  # nothing: the job is no longer ours; release: back to the queue
    reason: str  # for the job's row (release, fail) or the worker's log (nothing)
    permanent: bool = False  # fail: no attempt left, whatever max_attempts says
    counts_as_requeued: bool = False  # release: count it in the worker's `requeued` even if the write is lost


def ending(exc: BaseException, *, worker: str, device: str) -> Ending:
    """What a worker does about a job whose tuning raised `exc` (`device`: where its inputs were allocated)."""
    if isinstance(exc, JobLost):
        return Ending(action="nothing", reason=f"stopped, {exc}; this worker writes nothing as its result")
    if isinstance(exc, StopWorker):
        return Ending(action="release", reason=f"worker {worker} stopped: {exc}", counts_as_requeued=True)
    if isinstance(exc, DatabaseLost):
        return Ending(action="release", reason=f"worker {worker} lost the database ({exc})")
    if isinstance(exc, ProblemTooLarge):
        return Ending(action="fail", reason=str(exc), permanent=True)
    if isinstance(exc, UnknownOpError):  # a sweep's op this worker may not import, or that cannot be imported
        return Ending(action="fail", reason=f"bad job: {exc}", permanent=True)
    if isinstance(exc, WorkerSetupError):
        out_of_memory = out_of_memory_reason(str(exc))
        if out_of_memory is not None:
            return Ending(action="fail", permanent=True,
                          reason=f"the problem's inputs could not be allocated on {device}: {out_of_memory}"[:2000])
        return Ending(action="fail", reason=str(exc)[:2000])
    if isinstance(exc, TRANSIENT):  # a read outside the retried writes
        return Ending(action="release", reason=f"worker {worker} lost the database ({exc})")
    return Ending(action="fail", reason=f"{type(exc).__name__}: {exc}"[:2000])


def out_of_memory_reason(message: str) -> str | None:
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


class EndingWriter:
    """A worker's writes about its jobs' ends, each retried while the database is away (for up to `retry_s`;
    after that the lease gives the job back), and its counts: jobs claimed (`attempts`) and how they ended."""

    def __init__(self, queue: Callable[[], JobQueue], *, worker: str, retry_s: float, max_attempts: int,
                 on_event: Callable[[str], None], stopping: Callable[[], bool]) -> None:
        self.queue, self.worker, self.retry_s, self.max_attempts = queue, worker, retry_s, max_attempts
        self.on_event, self.stopping = on_event, stopping
        self.attempts = 0
        self.done = 0
        self.failed = 0  # failed for good
        self.requeued = 0  # queued again: given back, or failed with attempts left
        self.lost = 0  # taken back by another worker

    def settle(self, job_id: int, write: Callable[[JobQueue], Any]) -> Any:
        """A write about the job's state; None when it could not be made."""
        try:
            return retried(lambda: write(self.queue()), self.retry_s, stop=self.stopping)
        except TRANSIENT as exc:
            self.on_event(f"job {job_id}: could not record its state ({exc}); its lease will expire")
            return None

    def done_with(self, job_id: int, run_id: int | None, summary: str) -> str:
        """The job tuned to the end: done, unless it had been taken back meanwhile."""
        if not self.settle(job_id, lambda q: q.finish_job(job_id=job_id, worker=self.worker, run_id=run_id)):
            self.lost += 1
            self.on_event(f"job {job_id}: finished, but it had been taken back; the other worker's result stands")
            return "taken"
        self.done += 1
        self.on_event(f"job {job_id}: done, {summary}")
        return "done"

    def fail(self, job_id: int, error: str, *, permanent: bool = False) -> str:
        state = self.settle(job_id, lambda q: q.fail_attempt(job_id=job_id, worker=self.worker, error=error,
                                                             max_attempts=self.max_attempts, permanent=permanent))
        if state == "failed":
            self.failed += 1
        elif state == "queued":
            self.requeued += 1
        self.on_event(f"job {job_id}: attempt failed ({error.splitlines()[0]}); now {state or 'not ours'}")
        return state or "taken"

    def end(self, job_id: int, exc: BaseException, device: str) -> str:
        """Act on a tuning that raised `exc` (see `ending`); the job's new state, or "taken", "unknown"."""
        end = ending(exc, worker=self.worker, device=device)
        if end.action == "nothing":
            self.lost += 1
            self.on_event(f"job {job_id}: {end.reason}")
            return "taken"
        if end.action == "fail":
            return self.fail(job_id, end.reason, permanent=end.permanent)
        given = self.settle(job_id, lambda q: q.release_job(job_id=job_id, worker=self.worker, reason=end.reason))
        self.requeued += int(end.counts_as_requeued or bool(given))
        self.on_event(f"job {job_id}: given back ({end.reason})")
        return "queued" if given else "unknown"
