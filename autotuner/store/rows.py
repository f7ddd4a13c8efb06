"""What the store hands out: frozen rows read whole inside its transaction, so no caller holds an ORM object or a
session.

    rows, total = store.results_page(op="softmax", device_key=None, limit=50, offset=0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar, get_type_hints

from autotuner.store.prediction import Prediction

R = TypeVar("R")


@dataclass(frozen=True, kw_only=True)
class DeviceRow:
    id: int
    key: str
    name: str
    capability: str  # "9.0"
    sm_count: int
    total_memory: int
    smem_per_block: int


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    id: int
    run_id: int
    config: dict[str, Any]
    config_key: str
    status: str
    median_ms: float | None
    p20_ms: float | None
    p80_ms: float | None
    retimed_ms: float | None
    compile_s: float | None
    error: str | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class RunRow:
    """A tuning run; `trials` in the order measured (empty when read without them)."""

    id: int
    op: str
    problem_key: str
    problem: dict[str, Any]
    device: DeviceRow
    kernel_hash: str
    triton_version: str
    torch_version: str
    strategy: str
    budget_trials: int | None
    budget_seconds: float | None
    clock: str
    status: str
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    job_id: int | None
    rejected: int
    rejections: dict[str, Any] | None
    trials: tuple[TrialRow, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ResultRow:
    """A stored best config of one problem on one device, for one kernel hash and Triton version."""

    id: int
    op: str
    problem_key: str
    problem: dict[str, Any]
    device: DeviceRow
    kernel_hash: str
    triton_version: str
    config: dict[str, Any]
    median_ms: float
    default_ms: float | None
    torch_ms: float | None
    run_id: int | None
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class JobRow:
    id: int
    op: str
    shape: str
    dtype: str
    options: dict[str, Any]
    strategy: str
    budget_trials: int | None
    budget_seconds: float | None
    priority: int
    state: str
    attempts: int
    worker: str | None
    heartbeat_at: datetime | None
    error: str | None
    run_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    kind: str = "tune"  # tune, or cross_time: time a sweep's winners on its points
    gpus: int | None = None  # how many of its worker's GPUs measure its configs at once (None: all it has)
    sweep_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """Problems of one op, dtype and options differing in `dim`, in order along it (`shapes`)."""

    id: int
    op: str
    dtype: str
    options: dict[str, Any]
    dim: str
    shapes: tuple[str, ...]
    created_at: datetime
    refined: tuple[str, ...] = ()  # the shapes refinement added (autotuner.engine.sweeps.refine)
    target: float | None = None  # the loss neighbouring winners may have on each other (None: not refined)
    budget: int = 0  # how many points refinement may add
    predictions: dict[str, Prediction] = field(default_factory=dict)  # device key -> its model's picks


@dataclass(frozen=True, kw_only=True)
class CrossTimingRow:
    """One point's winner (`winner_key`) timed on a point (`on_key`) against that point's own winner."""

    winner_key: str
    on_key: str
    config: dict[str, Any]
    ms: float | None
    own_ms: float | None
    device: str
    kernel_hash: str
    triton_version: str

    @property
    def regret(self) -> float | None:
        """How much slower than the point's own winner: 0.05 is 5% slower; None where not measured."""
        return self.ms / self.own_ms - 1.0 if self.ms and self.own_ms else None


@dataclass(frozen=True, kw_only=True)
class FaultyRow:
    """A stored row that fails its row check (autotuner.store.row_checks): every read skips it."""

    table: str
    id: int
    reason: str
    row: dict[str, Any]  # its columns as stored


def _read(cls: type[R], obj: Any, **given: Any) -> R:
    """A frozen row of `cls` from an ORM object's attributes of the same names (`given` ones excepted)."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    return cls(**{n: given[n] if n in given else getattr(obj, n) for n in names})


def device_row(obj: Any) -> DeviceRow:
    return _read(DeviceRow, obj)


def trial_row(obj: Any) -> TrialRow:
    return _read(TrialRow, obj, config=dict(obj.config))


def run_row(obj: Any, *, with_trials: bool = True) -> RunRow:
    trials = tuple(trial_row(t) for t in obj.trials) if with_trials else ()
    return _read(RunRow, obj, device=device_row(obj.device), problem=dict(obj.problem), trials=trials,
                 rejections=dict(obj.rejections) if obj.rejections is not None else None)


def result_row(obj: Any) -> ResultRow:
    return _read(ResultRow, obj, device=device_row(obj.device), problem=dict(obj.problem), config=dict(obj.config))


def job_row(obj: Any) -> JobRow:
    return _read(JobRow, obj, options=dict(obj.options or {}))


def sweep_row(obj: Any) -> SweepRow:
    points = obj.points if isinstance(obj.points, dict) else {}
    target = points.get("target")
    budget = points.get("budget")
    return _read(SweepRow, obj, options=dict(obj.options or {}), shapes=_strings(points.get("shapes")),
                 refined=_strings(points.get("refined")),
                 target=float(target) if isinstance(target, (int, float)) and 0 <= target < 1 else None,
                 budget=budget if isinstance(budget, int) and 0 <= budget <= 4096 else 0,
                 predictions=_predictions(points.get("predicted")))


def _predictions(value: Any) -> dict[str, Prediction]:
    """Each device's stored prediction that reads back whole (a malformed one is left out)."""
    held = value.items() if isinstance(value, dict) else ()
    return {str(k): p for k, v in held if (p := Prediction.from_json(v)) is not None}


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def cross_timing_row(obj: Any) -> CrossTimingRow:
    return _read(CrossTimingRow, obj, config=dict(obj.config), device=obj.device.key)


def row_fields(row: type, *, exclude: Collection[str] = ()) -> tuple[str, ...]:
    """A row's fields in declared order, but `exclude`: what an export, an import model or an HTTP model of the
    row is made of (each is derived from the row, not declared again)."""
    return tuple(f.name for f in fields(row) if f.name not in exclude)


def row_types(row: type) -> dict[str, Any]:
    """A row's fields' types, resolved (the rows are written with postponed annotations)."""
    return get_type_hints(row)
