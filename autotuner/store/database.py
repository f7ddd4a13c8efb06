"""`Store`: the database through SQLAlchemy, answering every interface of autotuner.store.interfaces in frozen rows.
Each write is its own committed transaction, so nothing measured is lost if the process dies."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.store.row_checks import best_fault, checked, run_fault, trial_fault
from autotuner.store.rows import (
    DeviceRow,
    FaultyRow,
    ResultRow,
    RunRow,
    TrialRow,
    device_row,
    result_row,
    run_row,
    trial_row,
)
from autotuner.store.sql_jobs import SqlJobs
from autotuner.store.sql_runs import SqlRuns
from autotuner.store.stored_best import versions
from db import repository as repo
from db.engine import in_session, open_engine, session_scope
from db.health import MIN_FREE_BYTES, file_identity, storage_problem


class Store(SqlRuns, SqlJobs):
    """Every interface of autotuner.store.interfaces over one SQLAlchemy engine: the runs and sweeps (SqlRuns), the
    queue (SqlJobs), and here the reads of the service, the pages and the command line, health, audit and import."""

    def __init__(self, url: str | None, *, create: bool = True, timeout_s: float | None = None) -> None:
        """`create=False` for readers: a missing database raises db.engine.NoDatabase instead of being made.
        `timeout_s` bounds every wait on the database (db.engine.make_engine)."""
        self.engine = open_engine(url, create=create, timeout_s=timeout_s)
        self.identity = file_identity(self.engine)  # the SQLite file opened (db.health: deleted or replaced since?)
        self._device_ids: dict[str, int] = {}

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
        return in_session(self.engine, repo.best_of_runs, run_ids=run_ids)

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
        in_session(self.engine, repo.save_peak, device_id=self.device_id(device), name=name, value=value, unit=unit,
                   method=method, torch_version=versions()[1])


def _bests(rows: Any) -> list[Any]:
    return checked("best_configs", rows, best_fault)


def _runs(rows: Any, with_trials: bool) -> list[RunRow]:
    """The runs that pass the row checks, each with the trials that do."""
    out = []
    for run in checked("tuning_runs", rows, run_fault):
        trials = tuple(trial_row(t) for t in checked("trials", run.trials, trial_fault)) if with_trials else ()
        out.append(dataclasses.replace(run_row(run, with_trials=False), trials=trials))
    return out
