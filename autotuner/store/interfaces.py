"""The store's small interfaces, as Optuna's BaseStorage is to its storages. More: docs/design/store.md."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from autotuner.store.prediction import Prediction
from autotuner.store.rows import CrossTimingRow, DeviceRow, FaultyRow, JobRow, ResultRow, RunRow, SweepRow, TrialRow
from autotuner.store.stored_best import StoredBest
from search_spaces.errors import AutotunerError
from search_spaces.problem import ProblemError

if TYPE_CHECKING:
    from pathlib import Path

    from autotuner.base.device import DeviceInfo
    from autotuner.base.registry import Op
    from search_spaces.contract import ProblemType
    from search_spaces.space import Rejection

TrialTimes = dict[str, tuple[dict[str, Any], float | None]]  # config key -> (config, ms; None: it failed)


class NotHeld(AutotunerError, RuntimeError):
    """A write on behalf of a job that is no longer the writer's (it was taken back)."""


class NoRecordedCall(ProblemError):
    """A decorated kernel's key that no launching process recorded a call for: nothing to tune it from."""


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
        """The sweep's model's picks on `device` (autotuner.engine.sweeps.predict), replacing one made before."""

    def sweep(self, sweep_id: int) -> SweepRow | None:
        """One sweep, or None."""

    def refine_queued_sweep(self, sweep_id: int, *, shapes: list[str], added: list[tuple[str, dict[str, Any]]],
                            trials: Callable[[int | None], int | None] | None = None) -> list[int]:
        """A queued sweep's refinement: its points now `shapes`, and a job queued for each point `added` (shape,
        options), its trial budget through `trials` where given; their ids. One transaction."""


class JobQueue(Protocol):
    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0,
                  sweep_id: int | None = None, gpus: int | None = None) -> int:
        """A new queued job (a point of sweep `sweep_id`, where given); its id. `gpus`: how many of its worker's
        GPUs measure its configs at once (None: one)."""

    def raise_priority(self, job_id: int, *, by: int) -> bool:
        """A queued job's priority up `by` (its key met that many more times); False where it is no longer
        queued."""

    def job(self, job_id: int) -> JobRow | None: ...

    def jobs_page(self, *, state: str | None, limit: int, offset: int) -> tuple[list[JobRow], int]: ...

    def count_jobs(self) -> dict[str, int]: ...

    def recorded_options(self, *, op: str, shape: str, dtype: str) -> dict[str, Any] | None:
        """The options (a recorded call) of the newest job queued for this problem."""

    def claim_job(self, worker: str, after: int | None = None) -> tuple[JobRow | None, dict[str, int]]:
        """The next queued job, now running for `worker` (`after`: the job it ended last, whose kernels it
        prefers); else None and the count of jobs by state."""

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


class RecordedCalls(Protocol):
    """The calls launching processes recorded for decorated kernels' keys (a worker rebuilds a problem from one)."""

    def recorded_problem(self, op: Op, shape: str, dtype: str) -> ProblemType:
        """The problem with the call recorded for it, or one made from a call recorded at another value of one key
        argument; NoRecordedCall (a ProblemError) where neither is."""

    def recorded_dtypes(self, *, op: str, shape: str) -> list[str]:
        """The dtypes calls of this problem were recorded in."""

    def keep_tuned_call(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], worker: str) -> int:
        """A key `worker` tuned in place, kept as a done tuning job with its options (its recorded call)."""


class TuningClaims(Protocol):
    """Which process tunes a key in place, so that two launching processes never tune the same key at once."""

    def claim_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str, lease_s: float) -> bool:
        """True when `owner` now holds the key's tuning (for `lease_s`), False when another does."""

    def release_tuning(self, *, op: str, problem_key: str, device_key: str, owner: str) -> None:
        """Give the key's tuning up."""


class ResultBrowser(Protocol):
    """What the service's answers and pages, `report` and the analysis read: devices, results, runs, trials."""

    def devices(self) -> list[DeviceRow]: ...

    def results(self, *, op: str | None = None, device_key: str | None = None,
                problem_key: str | None = None) -> list[ResultRow]:
        """Stored best configs (every kernel hash and Triton version), oldest first, with their device."""

    def results_page(self, *, op: str | None, device_key: str | None, limit: int,
                     offset: int) -> tuple[list[ResultRow], int]: ...

    def result(self, result_id: int, *, with_trials: bool = True) -> tuple[ResultRow, RunRow | None] | None:
        """One stored best config and the run that found it (with its trials, unless `with_trials` is off)."""

    def trials_page(self, run_id: int, *, limit: int, offset: int) -> tuple[list[TrialRow], int]:
        """One page of a run's trials in the order measured, and how many it has."""

    def results_of_runs(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> the id of the stored best config it produced."""

    def runs(self, *, op: str | None = None, device_key: str | None = None,
             problem_key: str | None = None) -> list[RunRow]:
        """Tuning runs with their trials and device, oldest first."""


class PeakStore(Protocol):
    """A device's measured ceilings (autotuner.analysis.peaks)."""

    def peaks(self, device: DeviceInfo) -> dict[str, float]: ...

    def save_peak(self, device: DeviceInfo, *, name: str, value: float, unit: str, method: str) -> None: ...


class StorageHealth(Protocol):
    def health(self, min_free_bytes: int = ...) -> str | None:
        """Why the storage cannot keep a write now (deleted, replaced, read-only, full, corrupt), or None;
        raises when it does not answer."""

    def ping(self) -> str:
        """The backend's name when it answers; raises when it does not."""


class RowAudit(Protocol):
    """The rows every read skips (autotuner.store.row_checks), for `autotuner db check`."""

    def faulty_rows(self) -> list[FaultyRow]:
        """Every stored row that fails its row check: table, id, why, and the row as stored."""

    def quarantine(self, rows: list[FaultyRow], path: Path) -> None:
        """Write `rows` to a JSON file at `path`, then delete them from the database."""


class Storage(SweepStore, JobQueue, RecordedCalls, TuningClaims, ResultBrowser, PeakStore, StorageHealth, RowAudit,
              Protocol):
    """A whole store: what `autotuner.store.open_store` gives. A second backend answers these (and
    tests/unit/store/test_store_conformance.py runs over it); callers ask for the narrowest interface they use."""

    def save_best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, config: dict[str, Any], median_ms: float,
                  default_ms: float | None, torch_ms: float | None, run_id: int | None,
                  holder: tuple[int, str] | None = None) -> bool:
        """RunWriter's; `holder` (job id, worker): only while that worker holds that job, checked in the same
        transaction (else store.database.NotHeld, and nothing is written)."""

    def finish_run(self, *, run_id: int, status: str, error: str | None = None,
                   holder: tuple[int, str] | None = None) -> None:
        """RunWriter's; `holder` (job id, worker): only while that worker holds that job (else NotHeld)."""

    def import_rows(self, *, devices: list[dict[str, Any]], runs: list[tuple[dict[str, Any], list[dict[str, Any]]]],
                    bests: list[tuple[dict[str, Any], int | None]]) -> dict[str, int]:
        """Add exported rows in one transaction (autotuner.store.transfer); counts of what was added."""
