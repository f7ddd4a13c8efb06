"""A store kept in this process's memory, registered for `memory://` URLs: a second backend of the store's read
and run-writing interfaces (ResultReader, RunWriter, SweepStore's sweeps and cross timings), written against
autotuner.store.interfaces and the store's row judgements alone, with no SQL. tests/unit/store/test_store_conformance.py runs
the readers' suite over it, which shows the interfaces, not the SQL store, are what a backend answers."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store import register_backend
from autotuner.store.nearest import nearest_stored
from autotuner.store.row_checks import checked, cross_timing_fault, trial_times
from autotuner.store.rows import CrossTimingRow, SweepRow, cross_timing_row, sweep_row
from autotuner.store.stored_best import StoredBest, best_of, versions
from search_spaces.contract import ProblemType
from search_spaces.space import Rejection

_STORES: dict[str, MemoryStore] = {}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class MemoryStore:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.runs: dict[int, SimpleNamespace] = {}
        self.trials: list[SimpleNamespace] = []
        self.bests: list[SimpleNamespace] = []
        self.sweep_rows: dict[int, SimpleNamespace] = {}
        self.cells: list[SimpleNamespace] = []

    # RunWriter
    def start_run(self, *, op: Op, problem: ProblemType, device: DeviceInfo, strategy: str, **_: Any) -> int:
        run_id = next(self._ids)
        self.runs[run_id] = SimpleNamespace(id=run_id, op=op.name, problem_key=problem.key, device_key=device.key,
                                            kernel_hash=op.kernel_hash, triton_version=versions()[0], status="running")
        return run_id

    def record_rejections(self, *, run_id: int, rejected: list[Rejection]) -> None:
        pass

    def record_trial(self, *, run_id: int, config: dict[str, Any], config_key: str, status: str,
                     median_ms: float | None = None, error: str | None = None, **_: Any) -> int:
        trial = SimpleNamespace(id=next(self._ids), run_id=run_id, config=dict(config), config_key=config_key,
                                status=status, median_ms=median_ms, retimed_ms=None, error=error, created_at=_now())
        self.trials.append(trial)
        return int(trial.id)

    def set_retimed(self, *, trial_id: int, retimed_ms: float) -> None:
        next(t for t in self.trials if t.id == trial_id).retimed_ms = retimed_ms

    def finish_run(self, *, run_id: int, status: str, error: str | None = None, **_: Any) -> None:
        self.runs[run_id].status = status

    def save_best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, config: dict[str, Any],
                  median_ms: float, default_ms: float | None, torch_ms: float | None, run_id: int | None,
                  holder: tuple[int, str] | None = None) -> bool:
        key = (op.name, problem.key, device.key, op.kernel_hash, versions()[0])
        row = SimpleNamespace(op=op.name, problem_key=problem.key, problem=dataclasses.asdict(problem),
                              device_key=device.key, kernel_hash=op.kernel_hash, triton_version=versions()[0],
                              config=dict(config), median_ms=median_ms, default_ms=default_ms, torch_ms=torch_ms,
                              run_id=run_id, updated_at=_now())
        stored = next((b for b in self.bests if (b.op, b.problem_key, b.device_key, b.kernel_hash,
                                                  b.triton_version) == key), None)
        if stored is not None and stored.median_ms <= median_ms:
            return False
        if stored is not None:
            self.bests.remove(stored)
        row.id = next(self._ids)
        self.bests.append(row)
        return True

    # ResultReader
    def _bests(self, op: str, device_key: str, problem_key: str | None = None) -> list[SimpleNamespace]:
        return [b for b in self.bests if b.op == op and b.device_key == device_key
                and (problem_key is None or b.problem_key == problem_key)]

    def best(self, *, op: Op, problem: ProblemType, device: DeviceInfo, kernel_hash: str | None = None,
             triton_version: str | None = None) -> StoredBest | None:
        return best_of(self._bests(op.name, device.key, problem.key), kernel_hash or op.kernel_hash, triton_version,
                       op.space)

    def nearest(self, *, op: Op, problem: ProblemType, device: DeviceInfo, limit: int = 3,
                kernel_hash: str | None = None, triton_version: str | None = None,
                any_options: bool = False) -> list[tuple[ProblemType, StoredBest]]:
        return nearest_stored(op, problem, self._bests(op.name, device.key), kernel_hash=kernel_hash,
                              triton_version=triton_version, limit=limit, any_options=any_options)

    def trial_times(self, *, op: Op, problem: ProblemType,
                    device: DeviceInfo) -> dict[str, tuple[dict[str, Any], float | None]]:
        runs = {r.id for r in self.runs.values() if (r.op, r.problem_key, r.device_key, r.kernel_hash,
                                                       r.triton_version) == (op.name, problem.key, device.key,
                                                                             op.kernel_hash, versions()[0])}
        return trial_times([t for t in self.trials if t.run_id in runs and t.status != "invalid"])

    # sweeps
    def create_sweep(self, *, op: str, dtype: str, options: dict[str, Any], dim: str, shapes: list[str],
                     target: float | None = None, budget: int = 0) -> int:
        sweep_id = next(self._ids)
        points: dict[str, Any] = {"shapes": list(shapes)}
        if target is not None:
            points.update(target=target, budget=budget, refined=[])
        self.sweep_rows[sweep_id] = SimpleNamespace(id=sweep_id, op=op, dtype=dtype, options=dict(options), dim=dim,
                                                    points=points, created_at=_now())
        return sweep_id

    def sweep(self, sweep_id: int) -> SweepRow | None:
        row = self.sweep_rows.get(sweep_id)
        return sweep_row(row) if row is not None else None

    def sweeps(self, *, op: str | None = None) -> list[SweepRow]:
        return [sweep_row(w) for w in self.sweep_rows.values() if op is None or w.op == op]

    def save_cross_timings(self, *, sweep_id: int, op: Op, device: DeviceInfo, cells: list[dict[str, Any]]) -> None:
        self.cells += [SimpleNamespace(id=next(self._ids), sweep_id=sweep_id, device=SimpleNamespace(key=device.key),
                                       kernel_hash=op.kernel_hash, triton_version=versions()[0], measured_at=_now(),
                                       **{**c, "config": dict(c["config"])}) for c in cells]

    def cross_timings(self, sweep_id: int, *, device_key: str | None = None) -> list[CrossTimingRow]:
        cells = [c for c in self.cells if c.sweep_id == sweep_id and (device_key is None or c.device.key == device_key)]
        return [cross_timing_row(c) for c in checked("cross_timings", cells, cross_timing_fault)]


def open_memory(url: str | None, *, create: bool = True, timeout_s: float | None = None) -> MemoryStore:
    """The store named by `memory://NAME`, made on first open (as a SQLite file is), shared by every later open."""
    assert url is not None
    if url not in _STORES:
        if not create:
            from autotuner.store.errors import NoStore

            raise NoStore(f"no store at {url}")
        _STORES[url] = MemoryStore()
    return _STORES[url]


register_backend("memory", open_memory)
