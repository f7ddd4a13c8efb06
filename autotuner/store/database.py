"""`Store`: the database through SQLAlchemy (db.repository, db.queue), answering every interface of
autotuner.store.interfaces (ResultReader, RunWriter, JobQueue) and the reads of the service, the pages and the
command line, in frozen rows (autotuner.store.rows). Each write is its own committed transaction, so nothing
already measured is lost if the process dies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store.interfaces import NoRecordedCall, NotHeld
from autotuner.store.nearest import nearest_stored
from autotuner.store.prediction import Prediction
from autotuner.store.recorded_calls import derived_call
from autotuner.store.row_checks import (
    best_fault,
    checked,
    cross_timing_fault,
    job_fault,
    run_fault,
    trial_fault,
    trial_times,
    warn_once,
)
from autotuner.store.rows import (
    CrossTimingRow,
    DeviceRow,
    FaultyRow,
    JobRow,
    ResultRow,
    RunRow,
    SweepRow,
    TrialRow,
    cross_timing_row,
    device_row,
    job_row,
    result_row,
    run_row,
    sweep_row,
    trial_row,
)
from autotuner.store.stored_best import StoredBest, best_of, versions
from db import queue
from db import repository as repo
from db.engine import open_engine, session_scope
from db.health import MIN_FREE_BYTES, file_identity, storage_problem
from search_spaces.contract import ProblemType
from search_spaces.space import Rejection, rejection_counts


class Store:
    def __init__(self, url: str | None, *, create: bool = True, timeout_s: float | None = None) -> None:
        """`create=False` for readers: a missing database raises db.engine.NoDatabase instead of being made.
        `timeout_s` bounds every wait on the database (db.engine.make_engine)."""
        self.engine = open_engine(url, create=create, timeout_s=timeout_s)
        self.identity = file_identity(self.engine)  # the SQLite file opened (db.health: deleted or replaced since?)
        self._device_ids: dict[str, int] = {}

    def device_id(self, device: DeviceInfo) -> int:
        if device.key not in self._device_ids:
            with session_scope(self.engine) as s:
                self._device_ids[device.key] = repo.upsert_device(
                    s, key=device.key, name=device.name, capability=f"{device.capability[0]}.{device.capability[1]}",
                    sm_count=device.sm_count, total_memory=device.total_memory, smem_per_block=device.smem_per_block)
        return self._device_ids[device.key]

    def start_run(self, *, op: Op, problem: ProblemType, device: DeviceInfo, strategy: str, budget_trials: int | None,
                  budget_seconds: float | None, clock: str, job_id: int | None = None) -> int:
        device_id = self.device_id(device)
        triton_version, torch_version = versions()
        with session_scope(self.engine) as s:
            return repo.start_run(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                                  device_id=device_id, kernel_hash=op.kernel_hash, triton_version=triton_version,
                                  torch_version=torch_version, strategy=strategy, budget_trials=budget_trials,
                                  budget_seconds=budget_seconds, clock=clock, job_id=job_id)

    def record_trial(self, *, run_id: int, config: dict[str, Any], config_key: str, status: str,
                     median_ms: float | None = None, p20_ms: float | None = None, p80_ms: float | None = None,
                     compile_s: float | None = None, error: str | None = None) -> int:
        with session_scope(self.engine) as s:
            return repo.record_trial(s, run_id=run_id, config=config, config_key=config_key, status=status,
                                     median_ms=median_ms, p20_ms=p20_ms, p80_ms=p80_ms, compile_s=compile_s,
                                     error=error)

    def record_rejections(self, *, run_id: int, rejected: list[Rejection]) -> None:
        """Configs the constraints rejected (never compiled): kept as the run's counts per rule."""
        with session_scope(self.engine) as s:
            repo.set_rejections(s, run_id=run_id, total=len(rejected), by_rule=rejection_counts(rejected))

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        with session_scope(self.engine) as s:
            repo.set_retimed(s, trial_id=trial_id, retimed_ms=retimed_ms)

    def finish_run(self, *, run_id: int, status: str, error: str | None = None,
                   holder: tuple[int, str] | None = None) -> None:
        """`holder` (job id, worker): end the run only while that worker holds that job (else NotHeld)."""
        with session_scope(self.engine) as s:
            if holder is not None and not queue.holds(s, job_id=holder[0], worker=holder[1]):
                raise NotHeld(f"job {holder[0]} is no longer {holder[1]}'s")
            repo.finish_run(s, run_id=run_id, status=status, error=error)

    def save_best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, config: dict[str, Any], median_ms: float,
                  default_ms: float | None, torch_ms: float | None, run_id: int | None,
                  holder: tuple[int, str] | None = None) -> bool:
        """Store the winner unless a faster one is stored; `holder` (job id, worker): only while that worker
        holds that job, checked in the same transaction (else NotHeld, and nothing is written)."""
        device_id = self.device_id(device)
        with session_scope(self.engine) as s:
            if holder is not None and not queue.holds(s, job_id=holder[0], worker=holder[1]):
                raise NotHeld(f"job {holder[0]} is no longer {holder[1]}'s")
            return repo.save_best(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                                  device_id=device_id, kernel_hash=op.kernel_hash, triton_version=versions()[0],
                                  config=config, median_ms=median_ms, default_ms=default_ms, torch_ms=torch_ms,
                                  run_id=run_id)

    def best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, kernel_hash: str | None = None,
             triton_version: str | None = None) -> StoredBest | None:
        """The stored best for this exact problem: the current one if any, else the newest stale one.

        Current means the running kernel hash and Triton version, or the ones given (a remote caller's).
        """
        with session_scope(self.engine) as s:
            rows = repo.find_best_rows(s, op=op.name, device_key=device.key, problem_key=problem.key)
        return best_of(rows, kernel_hash or op.kernel_hash, triton_version, op.space)

    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0,
                  sweep_id: int | None = None, gpus: int | None = None) -> int:
        with session_scope(self.engine) as s:
            return queue.add_job(s, op=op, shape=shape, dtype=dtype, options=options, strategy=strategy,
                                 budget_trials=budget_trials, budget_seconds=budget_seconds, priority=priority,
                                 sweep_id=sweep_id, gpus=gpus)

    def keep_tuned_call(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], worker: str) -> int:
        """A key `worker` tuned in place, kept as a done tuning job with its options (a decorated kernel's
        recorded call): a sweep of the kernel can make its points' calls from it (recorded_problem)."""
        with session_scope(self.engine) as s:
            return queue.add_done_job(s, op=op, shape=shape, dtype=dtype, options=options, worker=worker)

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        with session_scope(self.engine) as s:
            return queue.raise_priority(s, job_id=job_id, by=by)

    # -- sweeps: problems differing in one dimension, and their winners timed on each other ----------------------
    def create_sweep(self, *, op: str, dtype: str, options: dict[str, Any], dim: str, shapes: list[str],
                     target: float | None = None, budget: int = 0) -> int:
        with session_scope(self.engine) as s:
            return repo.create_sweep(s, op=op, dtype=dtype, options=options, dim=dim, shapes=shapes, target=target,
                                     budget=budget)

    def add_sweep_points(self, sweep_id: int, *, shapes: list[str], added: list[str]) -> None:
        with session_scope(self.engine) as s:
            repo.add_sweep_points(s, sweep_id=sweep_id, shapes=shapes, added=added)

    def save_sweep_prediction(self, sweep_id: int, *, device: DeviceInfo, prediction: Prediction) -> None:
        with session_scope(self.engine) as s:
            repo.save_sweep_prediction(s, sweep_id=sweep_id, device_key=device.key, prediction=prediction.as_json())

    def refine_queued_sweep(self, sweep_id: int, *, shapes: list[str], added: list[tuple[str, dict[str, Any]]],
                            trials: Callable[[int | None], int | None] | None = None) -> list[int]:
        """A queued sweep's refinement: its points now `shapes`, and a job queued for each point `added` (shape,
        options), as its first tuning job was (its trial budget through `trials` where given); their ids. One
        transaction."""
        with session_scope(self.engine) as s:
            repo.add_sweep_points(s, sweep_id=sweep_id, shapes=shapes, added=[shape for shape, _ in added])
            return queue.queue_sweep_points(s, sweep_id=sweep_id, points=added, trials=trials)

    def sweep(self, sweep_id: int) -> SweepRow | None:
        with session_scope(self.engine) as s:
            found = repo.get_sweep(s, sweep_id=sweep_id)
            return sweep_row(found) if found is not None else None

    def sweeps(self, *, op: str | None = None) -> list[SweepRow]:
        with session_scope(self.engine) as s:
            return [sweep_row(w) for w in repo.list_sweeps(s, op=op)]

    def save_cross_timings(self, *, sweep_id: int, op: Op, device: DeviceInfo, cells: list[dict[str, Any]]) -> None:
        device_id = self.device_id(device)
        with session_scope(self.engine) as s:
            repo.save_cross_timings(s, sweep_id=sweep_id, device_id=device_id, kernel_hash=op.kernel_hash,
                                    triton_version=versions()[0], cells=cells)

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]:
        with session_scope(self.engine) as s:
            return [cross_timing_row(c) for c in checked("cross_timings", repo.cross_timings(
                s, sweep_id=sweep_id, device_key=device_key), cross_timing_fault)]

    # -- reading results (the service, export, report) ----------------------------------------------------
    def health(self, min_free_bytes: int = MIN_FREE_BYTES) -> str | None:
        """Why this database cannot keep a write now (deleted, replaced, read-only, full, corrupt), or None;
        raises when it does not answer."""
        return storage_problem(self.engine, self.identity, min_free_bytes=min_free_bytes)

    def faulty_rows(self) -> list[FaultyRow]:
        from autotuner.store.row_audit import faulty_rows

        return list(faulty_rows(self))

    def quarantine(self, rows: list[FaultyRow], path: Path) -> None:
        from autotuner.store.row_audit import quarantine

        quarantine(self, rows, path)

    def ping(self) -> str:
        """The backend's name when the database answers; raises when it does not."""
        with self.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return self.engine.dialect.name

    def devices(self) -> list[DeviceRow]:
        with session_scope(self.engine) as s:
            return [device_row(d) for d in repo.list_devices(s)]

    def results(self, *, op: str | None = None, device_key: str | None = None,
                problem_key: str | None = None) -> list[ResultRow]:
        """Stored best configs (every kernel hash and Triton version), oldest first, with their device."""
        with session_scope(self.engine) as s:
            return [result_row(r) for r in _bests(repo.find_best(s, op=op, device_key=device_key,
                                                                  problem_key=problem_key))]

    def results_page(self, *, op: str | None, device_key: str | None, limit: int,
                     offset: int) -> tuple[list[ResultRow], int]:
        with session_scope(self.engine) as s:
            rows, total = repo.page_best(s, op=op, device_key=device_key, limit=limit, offset=offset)
            return [result_row(r) for r in _bests(rows)], total

    def result(self, result_id: int, *, with_trials: bool = True) -> tuple[ResultRow, RunRow | None] | None:
        """One stored best config and the run that found it (with its trials, unless `with_trials` is off)."""
        with session_scope(self.engine) as s:
            row = repo.get_best(s, best_id=result_id)
            if row is None or not _bests([row]):
                return None
            run = repo.get_run(s, run_id=row.run_id, with_trials=with_trials) if row.run_id is not None else None
            runs = _runs([run], with_trials) if run is not None else []
            return result_row(row), runs[0] if runs else None

    def trials_page(self, run_id: int, *, limit: int, offset: int) -> tuple[list[TrialRow], int]:
        """One page of a run's trials in the order measured, and how many it has."""
        with session_scope(self.engine) as s:
            trials, total = repo.page_trials(s, run_id=run_id, limit=limit, offset=offset)
            return [trial_row(t) for t in checked("trials", trials, trial_fault)], total

    def results_of_runs(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> the id of the stored best config it produced."""
        with session_scope(self.engine) as s:
            return repo.best_of_runs(s, run_ids=run_ids)

    def runs(self, *, op: str | None = None, device_key: str | None = None,
             problem_key: str | None = None) -> list[RunRow]:
        """Tuning runs with their trials and device, oldest first."""
        with session_scope(self.engine) as s:
            return _runs(repo.list_runs(s, op=op, device_key=device_key, problem_key=problem_key), True)

    def import_rows(self, *, devices: list[dict[str, Any]], runs: list[tuple[dict[str, Any], list[dict[str, Any]]]],
                    bests: list[tuple[dict[str, Any], int | None]]) -> dict[str, int]:
        """Add exported rows in one transaction: devices by key; runs (fields with a `device` key, and trials)
        unless present; best configs (fields with a `device` key, and the index of their run in `runs`)
        replacing a stored one only when faster. Returns counts of what was added."""
        counts = {"devices": 0, "runs": 0, "trials": 0, "best_configs": 0}
        with session_scope(self.engine) as s:
            known = {d.key for d in repo.list_devices(s)}
            device_ids = {d["key"]: repo.upsert_device(s, **d) for d in devices}
            counts["devices"] = len(set(device_ids) - known)
            stored = repo.existing_runs(s, ops={fields["op"] for fields, _ in runs})
            run_ids: dict[int, int] = {}
            first: dict[tuple[Any, ...], int] = {}  # a run in the file twice is imported once
            new: list[tuple[int, tuple[dict[str, Any], list[dict[str, Any]]]]] = []
            repeats: list[tuple[int, tuple[Any, ...]]] = []
            for i, (fields, trials) in enumerate(runs):
                fields = dict(fields)
                fields["device_id"] = device_ids[fields.pop("device")]
                key = (fields["op"], fields["problem_key"], fields["device_id"], repo.utc(fields["started_at"]))
                if key in stored:
                    run_ids[i] = stored[key]
                elif key in first:
                    repeats.append((i, key))
                else:
                    first[key] = i
                    new.append((i, (fields, trials)))
            for (i, _), run_id in zip(new, repo.insert_runs(s, [r for _, r in new]), strict=True):
                run_ids[i] = run_id
            for i, key in repeats:
                run_ids[i] = run_ids[first[key]]
            counts["runs"] = len(new)
            counts["trials"] = sum(len(trials) for _, (_, trials) in new)
            rows = []
            for fields, run in bests:
                fields = dict(fields)
                fields["device_id"] = device_ids[fields.pop("device")]
                rows.append({**fields, "run_id": run_ids.get(run) if run is not None else None})
            counts["best_configs"] = repo.save_bests(s, rows)
        return counts

    def peaks(self, device: DeviceInfo) -> dict[str, float]:
        with session_scope(self.engine) as s:
            return {name: p.value for name, p in repo.get_peaks(s, device_id=self.device_id(device)).items()}

    def save_peak(self, device: DeviceInfo, *, name: str, value: float, unit: str, method: str) -> None:
        with session_scope(self.engine) as s:
            repo.save_peak(s, device_id=self.device_id(device), name=name, value=value, unit=unit, method=method,
                           torch_version=versions()[1])

    def trial_times(self, *, op: Op, problem: ProblemType, device: DeviceInfo) -> dict[str, tuple[dict[str, Any], float | None]]:
        """Configs measured (or failed: None) for this problem before, at the running kernel hash and Triton
        version."""
        with session_scope(self.engine) as s:
            return trial_times(repo.trial_times(s, op=op.name, problem_key=problem.key, device_key=device.key,
                                                kernel_hash=op.kernel_hash, triton_version=versions()[0]))

    def claim_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str, lease_s: float) -> bool:
        from datetime import timedelta

        from db.models import utcnow

        with session_scope(self.engine) as s:
            return repo.claim_tuning(s, op=op, problem_key=problem_key, device_key=device_key, owner=owner,
                                     expires_at=utcnow() + timedelta(seconds=lease_s))

    def release_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str) -> None:
        with session_scope(self.engine) as s:
            repo.release_tuning(s, op=op, problem_key=problem_key, device_key=device_key, owner=owner)

    # -- the job queue (the service and the workers) ---------------------------------------------------------
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
        with session_scope(self.engine) as s:
            return queue.recorded_dtypes(s, op=op, shape=shape)

    def count_jobs(self) -> dict[str, int]:
        with session_scope(self.engine) as s:
            return queue.count_jobs_by_state(s)

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
        with session_scope(self.engine) as s:
            return queue.heartbeat(s, job_id=job_id, worker=worker)

    def finish_job(self, *, job_id: int, worker: str, run_id: int | None) -> bool:
        with session_scope(self.engine) as s:
            return queue.finish_job(s, job_id=job_id, worker=worker, run_id=run_id)

    def fail_attempt(self, *, job_id: int, worker: str, error: str, max_attempts: int,
                     permanent: bool = False) -> str | None:
        with session_scope(self.engine) as s:
            return queue.fail_attempt(s, job_id=job_id, worker=worker, error=error, max_attempts=max_attempts,
                                      permanent=permanent)

    def release_job(self, *, job_id: int, worker: str, reason: str) -> bool:
        with session_scope(self.engine) as s:
            return queue.release_job(s, job_id=job_id, worker=worker, reason=reason)

    def requeue_stale(self, *, older_than: Any, max_attempts: int) -> list[tuple[int, str]]:
        with session_scope(self.engine) as s:
            return queue.requeue_stale(s, older_than=older_than, max_attempts=max_attempts)

    def nearest(self, *, op: Op, problem: ProblemType, device: DeviceInfo, limit: int = 3, kernel_hash: str | None = None,
                triton_version: str | None = None, any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
        """Current (not stale) best configs of the nearest tuned problems on the same device (`any_options`:
        also those differing in dtype, epilogue, causal..., ranked after the matching ones; for warm starts)."""
        with session_scope(self.engine) as s:
            rows = repo.find_best_rows(s, op=op.name, device_key=device.key)
        return nearest_stored(op, problem, rows, kernel_hash=kernel_hash, triton_version=triton_version, limit=limit,
                              any_options=any_options)


def _bests(rows: Any) -> list[Any]:
    return checked("best_configs", rows, best_fault)


def _jobs(rows: Any) -> list[Any]:
    return checked("jobs", rows, job_fault)


def _runs(rows: Any, with_trials: bool) -> list[RunRow]:
    """The runs that pass the row checks, each with the trials that do."""
    out = []
    for run in checked("tuning_runs", rows, run_fault):
        trials = tuple(trial_row(t) for t in checked("trials", run.trials, trial_fault)) if with_trials else ()
        out.append(dataclasses.replace(run_row(run, with_trials=False), trials=trials))
    return out
