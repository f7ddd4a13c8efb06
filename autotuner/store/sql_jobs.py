"""The SQL store's job queue, recorded calls and tuning claims (autotuner.store.database.Store is made of it)."""

from __future__ import annotations

from typing import Any

from autotuner.base.registry import Op
from autotuner.store.interfaces import NoRecordedCall
from autotuner.store.recorded_calls import derived_call
from autotuner.store.row_checks import checked, job_fault, warn_once
from autotuner.store.rows import JobRow, job_row
from db import queue
from db import repository as repo
from db.engine import in_session, session_scope
from search_spaces.contract import ProblemType


class SqlJobs:
    """The job queue (JobQueue), the recorded calls a worker replays (RecordedCalls) and the tuning claims between
    processes (TuningClaims), over `self.engine`."""

    engine: Any
    _device_ids: dict[str, int]

    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0,
                  sweep_id: int | None = None, gpus: int | None = None) -> int:
        return in_session(self.engine, queue.add_job, op=op, shape=shape, dtype=dtype, options=options,
                          strategy=strategy, budget_trials=budget_trials, budget_seconds=budget_seconds,
                          priority=priority, sweep_id=sweep_id, gpus=gpus)

    def keep_tuned_call(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], worker: str) -> int:
        """A key `worker` tuned in place, kept as a done tuning job with its options (a decorated kernel's
        recorded call): a sweep of the kernel can make its points' calls from it (recorded_problem)."""
        return in_session(self.engine, queue.add_done_job, op=op, shape=shape, dtype=dtype, options=options,
                          worker=worker)

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        return in_session(self.engine, queue.raise_priority, job_id=job_id, by=by)

    def job(self, job_id: int) -> JobRow | None:
        with session_scope(self.engine) as s:
            job = queue.get_job(s, job_id=job_id)
            return job_row(job) if job is not None and _jobs([job]) else None

    def jobs_page(self, *, state: str | None, limit: int, offset: int) -> tuple[list[JobRow], int]:
        with session_scope(self.engine) as s:
            jobs, total = queue.list_jobs(s, state=state, limit=limit, offset=offset)
            return [job_row(j) for j in _jobs(jobs)], total

    def recorded_options(self, *, op: str, shape: str, dtype: str) -> dict[str, Any] | None:
        """The options (a recorded call) of the newest job queued for this problem, if any."""
        with session_scope(self.engine) as s:
            job = queue.newest_tuning_job(s, op=op, shape=shape, dtype=dtype)
            return dict(job.options) if job is not None and _jobs([job]) else None

    def recorded_problem(self, op: Op, shape: str, dtype: str) -> ProblemType:
        """A decorated kernel's problem with the call a launching process recorded for it (the newest job's), else
        one made from a call recorded where one key argument had another value (store.recorded_calls);
        NoRecordedCall (a ProblemError) where neither is."""
        recorded = self.recorded_options(op=op.name, shape=shape, dtype=dtype)
        if recorded:
            return op.parse_problem(shape, dtype, **recorded)
        wanted = dict(getattr(op.parse_problem(shape, dtype), "values", ()))
        with session_scope(self.engine) as s:
            others = queue.recorded_calls(s, op=op.name, dtype=dtype)
        for other, options in others:  # a call recorded at another value of one key argument, newest first
            try:
                values = dict(getattr(op.parse_problem(other, dtype), "values", ()))
            except ValueError:
                continue
            try:
                call = derived_call(options["call"], values, wanted)
            except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError):  # a malformed row
                continue
            if call is not None:
                return op.parse_problem(shape, dtype, call=call)
        raise NoRecordedCall(f"no recorded call of {op.name} {shape} to tune from, nor one at another value of one "
                             "key argument that it can be made from")

    def recorded_dtypes(self, *, op: str, shape: str) -> list[str]:
        """The dtypes calls of this problem were recorded in."""
        return in_session(self.engine, queue.recorded_dtypes, op=op, shape=shape)

    def count_jobs(self) -> dict[str, int]:
        return in_session(self.engine, queue.count_jobs_by_state)

    def claim_job(self, worker: str, after: int | None = None) -> tuple[JobRow | None, dict[str, int]]:
        """The next queued job (db.queue: priority, age, and jobs of the kernels of the one `worker` ended last,
        `after`, first), now running for `worker`, or None with the count of jobs by state."""
        while True:
            with session_scope(self.engine) as s:
                job = queue.claim_job(s, worker=worker, after=after)
                if job is None:
                    return None, queue.count_jobs_by_state(s)
                fault = job_fault(job)
                if fault is None:
                    return job_row(job), {}
                # a row no worker can run: failed once with its reason, and the next job claimed
                warn_once("jobs", job.id, fault)
                queue.fail_attempt(s, job_id=job.id, worker=worker, error=f"unreadable job row: {fault}",
                                   max_attempts=1, permanent=True)

    def heartbeat(self, *, job_id: int, worker: str) -> bool:
        return in_session(self.engine, queue.heartbeat, job_id=job_id, worker=worker)

    def finish_job(self, *, job_id: int, worker: str, run_id: int | None) -> bool:
        return in_session(self.engine, queue.finish_job, job_id=job_id, worker=worker, run_id=run_id)

    def fail_attempt(self, *, job_id: int, worker: str, error: str, max_attempts: int,
                     permanent: bool = False) -> str | None:
        return in_session(self.engine, queue.fail_attempt, job_id=job_id, worker=worker, error=error,
                          max_attempts=max_attempts, permanent=permanent)

    def release_job(self, *, job_id: int, worker: str, reason: str) -> bool:
        return in_session(self.engine, queue.release_job, job_id=job_id, worker=worker, reason=reason)

    def requeue_stale(self, *, older_than: Any, max_attempts: int) -> list[tuple[int, str]]:
        return in_session(self.engine, queue.requeue_stale, older_than=older_than, max_attempts=max_attempts)

    def claim_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str, lease_s: float) -> bool:
        from datetime import timedelta

        from db.models import utcnow

        return in_session(self.engine, repo.claim_tuning, op=op, problem_key=problem_key, device_key=device_key,
                          owner=owner, expires_at=utcnow() + timedelta(seconds=lease_s))

    def release_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str) -> None:
        in_session(self.engine, repo.release_tuning, op=op, problem_key=problem_key, device_key=device_key, owner=owner)


def _jobs(rows: Any) -> list[Any]:
    return checked("jobs", rows, job_fault)
