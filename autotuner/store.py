"""The tuning engine's view of the database: each write is its own committed transaction, so nothing
already measured is lost if the process dies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import triton

from autotuner.device import DeviceInfo
from autotuner.nearest import rank
from autotuner.registry import Op
from db import queue
from db import repository as repo
from db.engine import open_engine, session_scope
from db.models import BestConfig


@dataclass(frozen=True)
class StoredBest:
    config: dict[str, Any]
    median_ms: float
    default_ms: float | None
    torch_ms: float | None
    problem: dict[str, Any]
    problem_key: str
    stale: bool
    stale_reason: str | None
    updated_at: Any
    run_id: int | None
    id: int


def versions() -> tuple[str, str]:
    return triton.__version__, torch.__version__


def stored_best(row: BestConfig, kernel_hash: str, triton_version: str | None = None) -> StoredBest:
    """A stored row judged against a kernel hash and a Triton version (default: the running one)."""
    triton_version = triton_version or versions()[0]
    reasons = []
    if row.kernel_hash != kernel_hash:
        reasons.append(f"kernel source changed (stored hash {row.kernel_hash}, running {kernel_hash})")
    if row.triton_version != triton_version:
        reasons.append(f"Triton version differs (stored {row.triton_version}, running {triton_version})")
    return StoredBest(dict(row.config), row.median_ms, row.default_ms, row.torch_ms, dict(row.problem),
                      row.problem_key, bool(reasons), "; ".join(reasons) or None, row.updated_at, row.run_id, row.id)


class Store:
    def __init__(self, url: str | None, *, create: bool = True) -> None:
        """`create=False` for readers: a missing database raises db.engine.NoDatabase instead of being made."""
        self.engine = open_engine(url, create=create)
        self._device_ids: dict[str, int] = {}

    def device_id(self, device: DeviceInfo) -> int:
        if device.key not in self._device_ids:
            with session_scope(self.engine) as s:
                self._device_ids[device.key] = repo.upsert_device(
                    s, key=device.key, name=device.name, capability=f"{device.capability[0]}.{device.capability[1]}",
                    sm_count=device.sm_count, total_memory=device.total_memory, smem_per_block=device.smem_per_block)
        return self._device_ids[device.key]

    def start_run(self, *, op: Op, problem: Any, device: DeviceInfo, strategy: str, budget_trials: int | None,
                  budget_seconds: float | None, clock: str, job_id: int | None = None) -> int:
        device_id = self.device_id(device)
        triton_version, torch_version = versions()
        with session_scope(self.engine) as s:
            return repo.start_run(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                                  device_id=device_id, kernel_hash=op.kernel_hash, triton_version=triton_version,
                                  torch_version=torch_version, strategy=strategy, budget_trials=budget_trials,
                                  budget_seconds=budget_seconds, clock=clock, job_id=job_id)

    def record_trial(self, **kw: Any) -> int:
        with session_scope(self.engine) as s:
            return repo.record_trial(s, **kw)

    def record_rejections(self, *, run_id: int, rejected: list[tuple[dict[str, Any], str, str]]) -> None:
        """Configs the constraints rejected: stored as `invalid` trials with their reason, never compiled."""
        with session_scope(self.engine) as s:
            for config, key, reason in rejected:
                repo.record_trial(s, run_id=run_id, config=config, config_key=key, status="invalid", error=reason)

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        with session_scope(self.engine) as s:
            repo.set_retimed(s, trial_id=trial_id, retimed_ms=retimed_ms)

    def finish_run(self, *, run_id: int, status: str, error: str | None = None) -> None:
        with session_scope(self.engine) as s:
            repo.finish_run(s, run_id=run_id, status=status, error=error)

    def save_best(self, *, op: Op, problem: Any, device: DeviceInfo, config: dict[str, Any], median_ms: float,
                  default_ms: float | None, torch_ms: float | None, run_id: int | None) -> bool:
        device_id = self.device_id(device)
        with session_scope(self.engine) as s:
            return repo.save_best(s, op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                                  device_id=device_id, kernel_hash=op.kernel_hash, triton_version=versions()[0],
                                  config=config, median_ms=median_ms, default_ms=default_ms, torch_ms=torch_ms,
                                  run_id=run_id)

    def best(self, *, op: Op, problem: Any, device: DeviceInfo, kernel_hash: str | None = None,
             triton_version: str | None = None) -> StoredBest | None:
        """The stored best for this exact problem: the current one if any, else the newest stale one.

        Current means the running kernel hash and Triton version, or the ones given (a remote caller's).
        """
        with session_scope(self.engine) as s:
            rows = [stored_best(r, kernel_hash or op.kernel_hash, triton_version) for r in
                    repo.find_best(s, op=op.name, device_key=device.key, problem_key=problem.key)]
        if not rows:
            return None
        fresh = [r for r in rows if not r.stale]
        return min(fresh, key=lambda r: r.median_ms) if fresh else max(rows, key=lambda r: r.id)

    def queue_job(self, *, op: str, shape: str, dtype: str, options: dict[str, Any], strategy: str = "tpe",
                  budget_trials: int | None = None, budget_seconds: float | None = None, priority: int = 0) -> int:
        with session_scope(self.engine) as s:
            return queue.add_job(s, op=op, shape=shape, dtype=dtype, options=options, strategy=strategy,
                                budget_trials=budget_trials, budget_seconds=budget_seconds, priority=priority)

    def nearest(self, *, op: Op, problem: Any, device: DeviceInfo, limit: int = 3, kernel_hash: str | None = None,
                triton_version: str | None = None, any_options: bool = False) -> list[tuple[Any, StoredBest]]:
        """Current (not stale) best configs of the nearest tuned problems on the same device (`any_options`:
        also those differing in dtype, epilogue, causal..., ranked after the matching ones; for warm starts)."""
        with session_scope(self.engine) as s:
            rows = [stored_best(r, kernel_hash or op.kernel_hash, triton_version) for r in repo.find_best(s, op=op.name, device_key=device.key)]
        others = []
        for r in rows:
            if r.stale:
                continue
            try:
                others.append((op.problem_type(**r.problem), r))
            except (TypeError, ValueError):
                continue
        return [(p, r) for _, p, r in rank(problem, others, any_options)[:limit]]
