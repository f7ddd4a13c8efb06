"""The job queue's SQL: queue, claim, heartbeat, finish, retry and requeue jobs. More: docs/design/store.md."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import JOB_STATES, Job, TuningRun, utcnow

_CLAIM_ORDER = (Job.priority.desc(), Job.id)
AFFINITY_WINDOW = 16  # the queued jobs, in order, among which a claim may take one of the same priority first
_KERNELS = (Job.kind, Job.op, Job.dtype, Job.options)  # what decides a job's kernel binaries, its shape aside


def add_job(session: Session, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str,
            budget_trials: int | None, budget_seconds: float | None, priority: int = 0, kind: str = "tune",
            sweep_id: int | None = None, gpus: int | None = None) -> int:
    job = Job(op=op, shape=shape, dtype=dtype, options=options, strategy=strategy, budget_trials=budget_trials,
              budget_seconds=budget_seconds, priority=priority, state="queued", attempts=0, created_at=utcnow(),
              kind=kind, sweep_id=sweep_id, gpus=gpus)
    session.add(job)
    session.flush()
    return job.id


def add_done_job(session: Session, *, op: str, shape: str, dtype: str, options: dict[str, Any], worker: str) -> int:
    """A tuning job `worker` already did itself (a launching process that tuned a key in place): what it ran is
    kept with it (a decorated kernel's recorded call rides in `options`), and no worker claims it."""
    now = utcnow()
    job = Job(op=op, shape=shape, dtype=dtype, options=options, strategy="tpe", budget_trials=None,
              budget_seconds=None, priority=0, state="done", attempts=1, created_at=now, started_at=now,
              finished_at=now, kind="tune", worker=worker)
    session.add(job)
    session.flush()
    return job.id


def raise_priority(session: Session, *, job_id: int, by: int) -> bool:
    result: Any = session.execute(update(Job).where(Job.id == job_id, Job.state == "queued")
                                  .values(priority=Job.priority + by))
    return bool(result.rowcount == 1)


def get_job(session: Session, *, job_id: int) -> Job | None:
    return session.get(Job, job_id)


def list_jobs(session: Session, *, state: str | None = None, limit: int = 50, offset: int = 0) -> tuple[list[Job], int]:
    q = select(Job)
    count = select(func.count(Job.id))
    if state:
        q, count = q.where(Job.state == state), count.where(Job.state == state)
    rows = list(session.scalars(q.order_by(Job.id.desc()).limit(limit).offset(offset)))
    return rows, int(session.scalar(count) or 0)


def count_jobs_by_state(session: Session) -> dict[str, int]:
    counts = dict.fromkeys(JOB_STATES, 0)
    for state, n in session.execute(select(Job.state, func.count(Job.id)).group_by(Job.state)):
        counts[state] = int(n)
    return counts


def _take(session: Session, job_id: int, worker: str, now: datetime) -> bool:
    result: Any = session.execute(
        update(Job).where(Job.id == job_id, Job.state == "queued")
        .values(state="running", worker=worker, attempts=Job.attempts + 1, heartbeat_at=now, started_at=now,
                finished_at=None))
    return bool(result.rowcount == 1)


def kernels(kind: str, op: str, dtype: str, options: Any) -> str:
    """A job's kernels, as one comparable value (its kind, op, dtype and options; not its shape)."""
    return json.dumps([kind, op, dtype, options], sort_keys=True, default=str)


def claim_order(window: Sequence[tuple[int, int, str]], last: str | None, running: set[str]) -> list[int]:
    """The ids of `window` ((id, priority, kernels) in queue order) in the order a claim tries them: by priority,
    and within one, the kernels of `last` (the job the worker ended last) first, then kernels no running job has,
    then the rest, each in queue order."""
    def rank(item: tuple[int, tuple[int, int, str]]) -> tuple[int, int, int]:
        place, (_, priority, k) = item
        return (-priority, 0 if k == last else 1 if k not in running else 2, place)

    return [job_id for _, (job_id, _, _) in sorted(enumerate(window), key=rank)]


def claim_job(session: Session, *, worker: str, after: int | None = None) -> Job | None:
    """A queued job, now running for `worker` (the order: the module's text; `after`: the job the worker ended
    last); None when nothing is queued or every job tried was taken first by another worker."""
    now = utcnow()
    rows = session.execute(select(Job.id, Job.priority, *_KERNELS).where(Job.state == "queued")
                           .order_by(*_CLAIM_ORDER).limit(AFFINITY_WINDOW)).all()
    if not rows:
        return None
    order = [r[0] for r in rows]
    passed_over = session.scalar(select(func.count(Job.id)).where(Job.id > rows[0][0], Job.state != "queued")) or 0
    if passed_over < AFFINITY_WINDOW:
        window = [(r[0], r[1], kernels(*r[2:])) for r in rows]
        last = session.execute(select(*_KERNELS).where(Job.id == after)).first() if after is not None else None
        running = {kernels(*r) for r in session.execute(select(*_KERNELS).where(Job.state == "running"))}
        order = claim_order(window, kernels(*last) if last is not None else None, running)
    # (else the oldest job was passed over AFFINITY_WINDOW times: the queue's order, until it is taken)
    postgres = session.get_bind().dialect.name == "postgresql"
    for job_id in order:
        if postgres and session.scalar(select(Job.id).where(Job.id == job_id, Job.state == "queued")
                                       .with_for_update(skip_locked=True)) is None:
            continue  # another worker's claim holds it: the next
        if _take(session, job_id, worker, now):  # (SQLite: unless another worker took it first)
            break
    else:
        return None
    session.flush()
    return session.get(Job, job_id, populate_existing=True)


def heartbeat(session: Session, *, job_id: int, worker: str) -> bool:
    """Refresh the job's heartbeat; False when the job is no longer this worker's (it was taken back)."""
    result: Any = session.execute(update(Job).where(Job.id == job_id, Job.worker == worker, Job.state == "running")
                                  .values(heartbeat_at=utcnow()))
    return bool(result.rowcount == 1)


def holds(session: Session, *, job_id: int, worker: str) -> bool:
    """Whether `worker` holds the running job, locking its row until the transaction ends (PostgreSQL), so it
    cannot be taken back between this check and the writes that depend on it."""
    q = select(Job.id).where(Job.id == job_id, Job.worker == worker, Job.state == "running")
    if session.get_bind().dialect.name == "postgresql":
        q = q.with_for_update()
    return session.scalar(q) is not None


def finish_job(session: Session, *, job_id: int, worker: str, run_id: int | None) -> bool:
    result: Any = session.execute(update(Job).where(Job.id == job_id, Job.worker == worker, Job.state == "running")
                                  .values(state="done", run_id=run_id, error=None, finished_at=utcnow()))
    if result.rowcount == 1:
        _sweep_settled(session, job_id)
    return bool(result.rowcount == 1)


def _sweep_settled(session: Session, job_id: int) -> None:
    """When a sweep's last tuning job ends (done or failed for good) and at least two of its points were tuned,
    queue the job that cross-times its winners: once, and once more after each round of points its refinement
    queued (autotuner.engine.sweeps.refine)."""
    job = session.get(Job, job_id)
    if job is None or job.sweep_id is None or job.kind != "tune":
        return
    states = list(session.scalars(select(Job.state).where(Job.sweep_id == job.sweep_id, Job.kind == "tune")))
    if any(s in ("queued", "running") for s in states) or states.count("done") < 2:
        return
    newest = session.scalar(select(func.max(Job.id)).where(Job.sweep_id == job.sweep_id, Job.kind == "tune"))
    timed = session.scalar(select(func.max(Job.id)).where(Job.sweep_id == job.sweep_id, Job.kind == "cross_time"))
    if timed is not None and newest is not None and timed > newest:  # cross-timed since its last points were queued
        return
    add_job(session, op=job.op, shape=job.shape, dtype=job.dtype, options={}, strategy=job.strategy,
            budget_trials=None, budget_seconds=None, priority=job.priority, kind="cross_time", sweep_id=job.sweep_id)


def queue_sweep_points(session: Session, *, sweep_id: int, points: list[tuple[str, dict[str, Any]]],
                       trials: Callable[[int | None], int | None] | None = None) -> list[int]:
    """Jobs for points refinement added to a sweep (shape, options), queued as its first tuning job was (strategy,
    budgets, GPUs, priority; `trials` turns its trial budget into theirs); their ids. None queued where the sweep
    has no tuning job."""
    first = session.scalar(select(Job).where(Job.sweep_id == sweep_id, Job.kind == "tune").order_by(Job.id).limit(1))
    if first is None:
        return []
    budget = trials(first.budget_trials) if trials is not None else first.budget_trials
    return [add_job(session, op=first.op, shape=shape, dtype=first.dtype, options=options, strategy=first.strategy,
                    budget_trials=budget, budget_seconds=first.budget_seconds, priority=first.priority,
                    sweep_id=sweep_id, gpus=first.gpus) for shape, options in points]


def fail_attempt(session: Session, *, job_id: int, worker: str, error: str, max_attempts: int,
                 permanent: bool = False) -> str | None:
    """Record a failed attempt: queued again, or failed for good after `max_attempts` (or at once if permanent).

    Returns the job's new state, or None when the job was no longer this worker's.
    """
    job = session.scalar(select(Job).where(Job.id == job_id, Job.worker == worker, Job.state == "running")
                         .with_for_update())
    if job is None:
        return None
    if permanent or job.attempts >= max_attempts:
        job.state, job.finished_at = "failed", utcnow()
        job.error = error if permanent else f"failed {job.attempts} times; last: {error}"
        session.flush()
        _sweep_settled(session, job_id)
    else:
        job.state, job.worker, job.error = "queued", None, f"attempt {job.attempts} failed: {error}"
    return job.state


def release_job(session: Session, *, job_id: int, worker: str, reason: str) -> bool:
    """Give a job back without counting the attempt (the worker was asked to stop)."""
    result: Any = session.execute(
        update(Job).where(Job.id == job_id, Job.worker == worker, Job.state == "running")
        .values(state="queued", worker=None, attempts=Job.attempts - 1, error=reason))
    return bool(result.rowcount == 1)


LOST_LIMIT = 2  # a job whose worker died holding it this many times is failed: it may be what kills them


def requeue_stale(session: Session, *, older_than: datetime, max_attempts: int) -> list[tuple[int, str]]:
    """Jobs whose worker stopped heartbeating before `older_than`: queued again once, failed on the second worker lost
    (a job that kills its process would take every worker down) or after `max_attempts`. Their unfinished runs are
    marked interrupted. Returns (job id, new state)."""
    stale = (select(Job.id).where(Job.state == "running", Job.heartbeat_at < older_than).order_by(Job.id))
    if session.get_bind().dialect.name == "postgresql":
        stale = stale.with_for_update(skip_locked=True)
    changed = []
    for job_id in list(session.scalars(stale)):
        job = session.get(Job, job_id, populate_existing=True)
        if job is None or job.state != "running" or job.heartbeat_at is None:
            continue
        reason = f"worker {job.worker} stopped heartbeating (last beat {job.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC)"
        lost = (job.lost or 0) + 1
        gone = job.attempts >= max_attempts or lost >= LOST_LIMIT
        error = reason
        if lost >= LOST_LIMIT:
            error = (f"{lost} workers were lost running it (killed, crashed or ended by the job itself); last: "
                     f"{reason}")
        elif gone:
            error = f"failed {job.attempts} times; last: {reason}"
        result: Any = session.execute(
            update(Job).where(Job.id == job_id, Job.state == "running", Job.heartbeat_at == job.heartbeat_at)
            .values(state="failed" if gone else "queued", worker=None, finished_at=utcnow() if gone else None,
                    error=error, lost=lost))
        if result.rowcount != 1:
            continue  # another worker requeued it first
        session.execute(update(TuningRun).where(TuningRun.job_id == job_id, TuningRun.status == "running")
                        .values(status="interrupted", error=reason, finished_at=utcnow()))
        changed.append((job_id, "failed" if gone else "queued"))
    return changed


def newest_tuning_job(session: Session, *, op: str, shape: str, dtype: str) -> Job | None:
    """The newest tuning job of this problem (a decorated kernel's recorded call rides in its options; the store
    checks the row)."""
    job = session.scalar(select(Job).where(Job.op == op, Job.shape == shape, Job.dtype == dtype, Job.kind == "tune")
                         .order_by(Job.id.desc()).limit(1))
    return job


def recorded_calls(session: Session, *, op: str, dtype: str, limit: int = 64) -> list[tuple[str, dict[str, Any]]]:
    """(shape, options) of the newest tuning jobs of this op and dtype that carry a recorded call."""
    jobs = session.scalars(select(Job).where(Job.op == op, Job.dtype == dtype, Job.kind == "tune")
                           .order_by(Job.id.desc()).limit(limit))
    return [(j.shape, dict(j.options)) for j in jobs if isinstance(j.options, dict)
            and isinstance(j.options.get("call"), dict)]


def recorded_dtypes(session: Session, *, op: str, shape: str) -> list[str]:
    """The dtypes this problem's tuning jobs were recorded in (a decorated kernel's key names them)."""
    return sorted(set(session.scalars(select(Job.dtype).where(Job.op == op, Job.shape == shape, Job.kind == "tune"))))

