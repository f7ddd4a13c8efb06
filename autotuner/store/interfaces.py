"""The store's small interfaces, as Optuna's BaseStorage is to its storages: what a caller needs, not which class
answers it.

    ResultReader   what reads tuned results: the lookups (autotuner.launch.lookup), the search's warm starts and
                   a decorated kernel's reuse of measured configs. Answered by `database.Store`,
                   `lazy.LaunchReads` (a launching process's sqlite3 reads) and `job_store.JobStore` alike.
    RunWriter      what writes one tuning run as it goes, each call its own transaction (`database.Store`, and a
                   worker's `job_store.JobStore`, which rides out outages).
    RunStore       both: what `autotuner.engine.tuner.tune` is given.
    SweepStore     a RunStore that also keeps sweeps and their cross timings (`autotuner.engine.sweep`).
    JobQueue       the job queue the service fills and the workers drain (`database.Store`).

Rows handed out are frozen (autotuner.store.rows), never ORM objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from autotuner.store.prediction import Prediction
from autotuner.store.rows import CrossTimingRow, JobRow, SweepRow
from autotuner.store.stored_best import StoredBest

if TYPE_CHECKING:
    from autotuner.base.device import DeviceInfo
    from autotuner.base.registry import Op
    from search_spaces.contract import ProblemType
    from search_spaces.space import Rejection

TrialTimes = dict[str, tuple[dict[str, Any], float | None]]  # config key -> (config, ms; None: it failed)


class ResultReader(Protocol):
    def best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, kernel_hash: str | None = None,
             triton_version: str | None = None) -> StoredBest | None:
        """The stored best for this exact problem: the fastest current one, else the newest stale one."""

    def nearest(self, *, op: Op, problem: ProblemType, device: DeviceInfo, limit: int = 3,
                kernel_hash: str | None = None, triton_version: str | None = None,
                any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
        """Current best configs of the nearest tuned problems on the same device, nearest first."""

    def trial_times(self, *, op: Op, problem: ProblemType, device: DeviceInfo) -> TrialTimes:
        """Configs measured (or failed) for this problem before, at the running kernel hash and Triton version."""

    def sweeps(self, *, op: str | None = None) -> list[SweepRow]:
        """The sweeps of an op (every op's with None), oldest first."""

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]:
        """A sweep's winners timed on its points (on one device's, with a key)."""


class RunWriter(Protocol):
    def start_run(self, *, op: Op, problem: ProblemType, device: DeviceInfo, strategy: str,
                  budget_trials: int | None, budget_seconds: float | None, clock: str,
                  job_id: int | None = None) -> int:
        """A new run, status running; its id."""

    def record_rejections(self, *, run_id: int, rejected: list[Rejection]) -> None:
        """The configs the constraints rejected, kept as counts per rule."""

    def record_trial(self, *, run_id: int, config: dict[str, Any], config_key: str, status: str,
                     median_ms: float | None = None, p20_ms: float | None = None, p80_ms: float | None = None,
                     compile_s: float | None = None, error: str | None = None) -> int:
        """One measured (or failed) config; its trial id."""

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        """A trial's time from the re-timing rounds."""

    def save_best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, config: dict[str, Any],
                  median_ms: float, default_ms: float | None, torch_ms: float | None, run_id: int | None) -> bool:
        """Store the winner unless a faster one is stored; whether it was."""

    def finish_run(self, *, run_id: int, status: str, error: str | None = None) -> None:
        """End the run: done, failed or interrupted."""


class RunStore(ResultReader, RunWriter, Protocol):
    """What tuning one problem reads and writes."""


class SweepStore(RunStore, Protocol):
    """What a sweep writes besides its points' runs: the sweep, and its cross timings."""

    def create_sweep(self, *, op: str, dtype: str, options: dict[str, Any], dim: str, shapes: list[str],
                     target: float | None = None, budget: int = 0) -> int:
        """A new sweep of these points; its id. `target` and `budget`: how it refines (None: it does not)."""

    def add_sweep_points(self, sweep_id: int, *, shapes: list[str], added: list[str]) -> None:
        """The sweep's points now `shapes`, `added` among them by refinement."""

    def save_cross_timings(self, *, sweep_id: int, op: Op, device: DeviceInfo, cells: list[dict[str, Any]]) -> None:
        """Each cell (winner_key, on_key, config, ms, own_ms), replacing one measured before for the same pair."""

    def save_sweep_prediction(self, sweep_id: int, *, device: DeviceInfo, prediction: Prediction) -> None:
        """The sweep's model's picks on `device` (autotuner.engine.predict), replacing one made before."""


class JobQueue(Protocol):
    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0,
                  gpus: int | None = None) -> int:
        """A new queued job; its id. `gpus`: how many of its worker's GPUs measure its configs at once (None: all
        the worker has)."""

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        """A queued job's priority up `by` (its key met that many more times); False where it is no longer
        queued."""

    def job(self, job_id: int) -> JobRow | None: ...

    def jobs_page(self, *, state: str | None, limit: int, offset: int) -> tuple[list[JobRow], int]: ...

    def count_jobs(self) -> dict[str, int]: ...

    def recorded_options(self, *, op: str, shape: str, dtype: str) -> dict[str, Any] | None:
        """The options (a recorded call) of the newest job queued for this problem."""

    def claim_job(self, worker: str) -> tuple[JobRow | None, dict[str, int]]:
        """The next queued job, now running for `worker`; else None and the count of jobs by state."""

    def heartbeat(self, *, job_id: int, worker: str) -> bool:
        """Refresh the job's heartbeat; False when it is no longer the worker's."""

    def finish_job(self, *, job_id: int, worker: str, run_id: int | None) -> bool: ...

    def fail_attempt(self, *, job_id: int, worker: str, error: str, max_attempts: int,
                     permanent: bool = False) -> str | None:
        """Count a failed attempt; the job's new state (queued again or failed), None when not the worker's."""

    def release_job(self, *, job_id: int, worker: str, reason: str) -> bool:
        """Give a running job back to the queue without counting the attempt."""

    def requeue_stale(self, *, older_than: datetime, max_attempts: int) -> list[tuple[int, str]]:
        """Queue again (or fail) the running jobs whose heartbeat is older; (job id, new state) each."""
