"""The SQL store's tuning runs, results and sweeps (autotuner.store.database.Store is made of it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store.interfaces import NotHeld
from autotuner.store.nearest import nearest_stored
from autotuner.store.prediction import Prediction
from autotuner.store.row_checks import checked, cross_timing_fault, trial_times
from autotuner.store.rows import CrossTimingRow, SweepRow, cross_timing_row, sweep_row
from autotuner.store.stored_best import StoredBest, best_of, versions
from db import queue
from db import repository as repo
from db.engine import in_session, session_scope
from search_spaces.contract import ProblemType
from search_spaces.space import Rejection, rejection_counts


class SqlRuns:
    """A tuning run written and read back (RunWriter, ResultReader) and the sweeps (SweepStore), over `self.engine`."""

    engine: Any
    _device_ids: dict[str, int]

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
        return in_session(self.engine, repo.start_run, op=op.name, problem_key=problem.key,
                          problem=dataclasses.asdict(problem), device_id=device_id, kernel_hash=op.kernel_hash,
                          triton_version=triton_version, torch_version=torch_version, strategy=strategy,
                          budget_trials=budget_trials, budget_seconds=budget_seconds, clock=clock, job_id=job_id)

    def record_trial(self, *, run_id: int, config: dict[str, Any], config_key: str, status: str,
                     median_ms: float | None = None, p20_ms: float | None = None, p80_ms: float | None = None,
                     compile_s: float | None = None, error: str | None = None) -> int:
        return in_session(self.engine, repo.record_trial, run_id=run_id, config=config, config_key=config_key,
                          status=status, median_ms=median_ms, p20_ms=p20_ms, p80_ms=p80_ms, compile_s=compile_s,
                          error=error)

    def record_rejections(self, *, run_id: int, rejected: list[Rejection]) -> None:
        """Configs the constraints rejected (never compiled): kept as the run's counts per rule."""
        in_session(self.engine, repo.set_rejections, run_id=run_id, total=len(rejected),
                   by_rule=rejection_counts(rejected))

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        in_session(self.engine, repo.set_retimed, trial_id=trial_id, retimed_ms=retimed_ms)

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

    def trial_times(self, *, op: Op, problem: ProblemType, device: DeviceInfo) -> dict[str, tuple[dict[str, Any], float | None]]:
        """Configs measured (or failed: None) for this problem before, at the running kernel hash and Triton
        version."""
        with session_scope(self.engine) as s:
            return trial_times(repo.trial_times(s, op=op.name, problem_key=problem.key, device_key=device.key,
                                                kernel_hash=op.kernel_hash, triton_version=versions()[0]))

    def nearest(self, *, op: Op, problem: ProblemType, device: DeviceInfo, limit: int = 3, kernel_hash: str | None = None,
                triton_version: str | None = None, any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
        """Current (not stale) best configs of the nearest tuned problems on the same device (`any_options`:
        also those differing in dtype, epilogue, causal..., ranked after the matching ones; for warm starts)."""
        with session_scope(self.engine) as s:
            rows = repo.find_best_rows(s, op=op.name, device_key=device.key)
        return nearest_stored(op, problem, rows, kernel_hash=kernel_hash, triton_version=triton_version, limit=limit,
                              any_options=any_options)

    def create_sweep(self, *, op: str, dtype: str, options: dict[str, Any], dim: str, shapes: list[str],
                     target: float | None = None, budget: int = 0) -> int:
        return in_session(self.engine, repo.create_sweep, op=op, dtype=dtype, options=options, dim=dim, shapes=shapes,
                          target=target, budget=budget)

    def add_sweep_points(self, sweep_id: int, *, shapes: list[str], added: list[str]) -> None:
        in_session(self.engine, repo.add_sweep_points, sweep_id=sweep_id, shapes=shapes, added=added)

    def save_sweep_prediction(self, sweep_id: int, *, device: DeviceInfo, prediction: Prediction) -> None:
        in_session(self.engine, repo.save_sweep_prediction, sweep_id=sweep_id, device_key=device.key,
                   prediction=prediction.as_json())

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
        in_session(self.engine, repo.save_cross_timings, sweep_id=sweep_id, device_id=device_id,
                   kernel_hash=op.kernel_hash, triton_version=versions()[0], cells=cells)

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]:
        with session_scope(self.engine) as s:
            return [cross_timing_row(c) for c in checked("cross_timings", repo.cross_timings(
                s, sweep_id=sweep_id, device_key=device_key), cross_timing_fault)]
