"""Repository functions: the only place that writes SQL through SQLAlchemy (a launching process's two reads are
also written in plain SQL, in db.sqlite_reads). Keyword arguments only; callers own the session."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session, selectinload

from db.models import BestConfig, CrossTiming, Device, DevicePeak, Sweep, Trial, TuneClaim, TuningRun, utcnow

RESULT_KEY = ("op", "problem_key", "device_id", "kernel_hash", "triton_version")


def _insert(session: Session):  # type: ignore[no-untyped-def]
    """The dialect's INSERT with ON CONFLICT, imported on first use: a process on SQLite (a launching one, say)
    never loads the PostgreSQL dialect."""
    if session.get_bind().dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    return pg_insert


def upsert_device(session: Session, *, key: str, name: str, capability: str, sm_count: int, total_memory: int,
                  smem_per_block: int) -> int:
    """The device's id, inserting it once even when several processes race."""
    stmt = _insert(session)(Device).values(
        key=key, name=name, capability=capability, sm_count=sm_count, total_memory=total_memory,
        smem_per_block=smem_per_block, created_at=utcnow(),
    ).on_conflict_do_nothing(index_elements=["key"])
    session.execute(stmt)
    return int(session.execute(select(Device.id).where(Device.key == key)).scalar_one())


def list_devices(session: Session) -> list[Device]:
    return list(session.scalars(select(Device).order_by(Device.id)))


def start_run(session: Session, *, op: str, problem_key: str, problem: dict[str, Any], device_id: int,
              kernel_hash: str, triton_version: str, torch_version: str, strategy: str,
              budget_trials: int | None, budget_seconds: float | None, clock: str, job_id: int | None = None) -> int:
    run = TuningRun(op=op, problem_key=problem_key, problem=problem, device_id=device_id, kernel_hash=kernel_hash,
                    triton_version=triton_version, torch_version=torch_version, strategy=strategy,
                    budget_trials=budget_trials, budget_seconds=budget_seconds, clock=clock, status="running",
                    started_at=utcnow(), job_id=job_id)
    session.add(run)
    session.flush()
    return run.id


def finish_run(session: Session, *, run_id: int, status: str, error: str | None = None) -> None:
    session.execute(update(TuningRun).where(TuningRun.id == run_id)
                    .values(status=status, error=error, finished_at=utcnow()))


def record_trial(session: Session, *, run_id: int, config: dict[str, Any], config_key: str, status: str,
                 median_ms: float | None = None, p20_ms: float | None = None, p80_ms: float | None = None,
                 compile_s: float | None = None, error: str | None = None) -> int:
    trial = Trial(run_id=run_id, config=config, config_key=config_key, status=status, median_ms=median_ms,
                  p20_ms=p20_ms, p80_ms=p80_ms, compile_s=compile_s, error=error, created_at=utcnow())
    session.add(trial)
    session.flush()
    return trial.id


def set_rejections(session: Session, *, run_id: int, total: int, by_rule: dict[str, Any]) -> None:
    session.execute(update(TuningRun).where(TuningRun.id == run_id).values(rejected=total, rejections=by_rule))


def set_retimed(session: Session, *, trial_id: int, retimed_ms: float) -> None:
    session.execute(update(Trial).where(Trial.id == trial_id).values(retimed_ms=retimed_ms))


def save_best(session: Session, *, op: str, problem_key: str, problem: dict[str, Any], device_id: int,
              kernel_hash: str, triton_version: str, config: dict[str, Any], median_ms: float,
              default_ms: float | None, torch_ms: float | None, run_id: int | None,
              updated_at: datetime | None = None) -> bool:
    """Insert the best config for its key, or replace the stored one only if faster, in one statement (ON CONFLICT DO
    UPDATE WHERE faster), so concurrent writers never leave a slower config. True when written."""
    return save_bests(session, [dict(
        op=op, problem_key=problem_key, problem=problem, device_id=device_id, kernel_hash=kernel_hash,
        triton_version=triton_version, config=config, median_ms=median_ms, default_ms=default_ms,
        torch_ms=torch_ms, run_id=run_id, updated_at=updated_at or utcnow())]) == 1


def save_bests(session: Session, rows: list[dict[str, Any]]) -> int:
    """save_best for many rows in one statement per batch (an import): each inserted, or replacing a stored one
    only where faster, or over a stored time that is none (zero, negative, NaN: a row written by hand) and never
    wins. Returns how many rows were written (RETURNING: rowcount is -1 on some drivers)."""
    for r in rows:
        if not (isinstance(r["median_ms"], int | float) and math.isfinite(r["median_ms"]) and r["median_ms"] > 0):
            raise ValueError(f"a best config's time is a finite positive number of ms, not {r['median_ms']!r}")
    ins = _insert(session)
    stmt = ins(BestConfig)
    cols = ("problem", "config", "median_ms", "default_ms", "torch_ms", "run_id", "updated_at")
    stmt = stmt.on_conflict_do_update(
        index_elements=list(RESULT_KEY), set_={c: stmt.excluded[c] for c in cols},
        where=or_(BestConfig.median_ms > stmt.excluded.median_ms, BestConfig.median_ms <= 0,
                  BestConfig.median_ms.is_(None)))
    written = 0
    for start in range(0, len(rows), 500):
        batch = [{"updated_at": utcnow(), **r} for r in rows[start:start + 500]]
        written += sum(1 for _ in session.execute(stmt.returning(BestConfig.id), batch))
    return written


def existing_runs(session: Session, *, ops: set[str]) -> dict[tuple[str, str, int, Any], int]:
    """The stored runs of these ops by (op, problem key, device id, start time in UTC): what an import skips."""
    q = select(TuningRun.id, TuningRun.op, TuningRun.problem_key, TuningRun.device_id, TuningRun.started_at)
    return {(r.op, r.problem_key, r.device_id, utc(r.started_at)): r.id
            for r in session.execute(q.where(TuningRun.op.in_(ops)))} if ops else {}


def utc(value: datetime) -> datetime:
    from datetime import timezone

    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def insert_runs(session: Session, runs: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[int]:
    """Whole runs with their trials, as exported (an import), in a few statements; their new ids in order."""
    if not runs:
        return []
    ids: list[int] = []
    for start in range(0, len(runs), 500):
        batch = runs[start:start + 500]
        result = session.execute(insert(TuningRun).returning(TuningRun.id, sort_by_parameter_order=True),
                                 [fields for fields, _ in batch])
        ids += [int(i) for i in result.scalars()]
    trials = [{**t, "run_id": run_id} for run_id, (_, ts) in zip(ids, runs, strict=True) for t in ts]
    for start in range(0, len(trials), 2000):
        session.execute(insert(Trial), trials[start:start + 2000])
    return ids


def _best_query(op: str | None, device_key: str | None, problem_key: str | None) -> Select[Any]:
    q = select(BestConfig).join(Device).options(selectinload(BestConfig.device))
    if op:
        q = q.where(BestConfig.op == op)
    if device_key:
        q = q.where(Device.key == device_key)
    if problem_key:
        q = q.where(BestConfig.problem_key == problem_key)
    return q.order_by(BestConfig.id)


def find_best(session: Session, *, op: str | None = None, device_key: str | None = None,
              problem_key: str | None = None) -> list[BestConfig]:
    """Stored best configs (every kernel hash and Triton version); the caller decides exact vs stale."""
    return list(session.scalars(_best_query(op, device_key, problem_key)))


def find_best_rows(session: Session, *, op: str, device_key: str, problem_key: str | None = None) -> list[Any]:
    """find_best's rows for one problem (or every problem of the op, with no `problem_key`) on one device as plain
    rows (the stored columns by name), through SQLAlchemy Core: a launching process's first lookup then skips
    configuring the ORM's mappers."""
    best, device = BestConfig.__table__, Device.__table__
    q = select(best).join(device, best.c.device_id == device.c.id).where(best.c.op == op, device.c.key == device_key)
    if problem_key is not None:
        q = q.where(best.c.problem_key == problem_key)
    return list(session.execute(q.order_by(best.c.id)))


def get_run(session: Session, *, run_id: int, with_trials: bool = True) -> TuningRun | None:
    loads = [selectinload(TuningRun.device)] + ([selectinload(TuningRun.trials)] if with_trials else [])
    return session.scalar(select(TuningRun).where(TuningRun.id == run_id).options(*loads))


def page_trials(session: Session, *, run_id: int, limit: int, offset: int) -> tuple[list[Trial], int]:
    total = session.scalar(select(func.count()).select_from(Trial).where(Trial.run_id == run_id))
    rows = session.scalars(select(Trial).where(Trial.run_id == run_id).order_by(Trial.id).limit(limit).offset(offset))
    return list(rows), int(total or 0)


def list_runs(session: Session, *, op: str | None = None, device_key: str | None = None,
              problem_key: str | None = None) -> list[TuningRun]:
    q = select(TuningRun).join(Device).options(selectinload(TuningRun.trials), selectinload(TuningRun.device))
    if op:
        q = q.where(TuningRun.op == op)
    if device_key:
        q = q.where(Device.key == device_key)
    if problem_key:
        q = q.where(TuningRun.problem_key == problem_key)
    return list(session.scalars(q.order_by(TuningRun.id)))


def page_best(session: Session, *, op: str | None = None, device_key: str | None = None, limit: int = 50,
              offset: int = 0) -> tuple[list[BestConfig], int]:
    """One page of stored best configs, newest first, and how many match in all."""
    q = _best_query(op, device_key, None)
    total = session.scalar(select(func.count()).select_from(q.order_by(None).subquery()))
    rows = session.scalars(q.order_by(None).order_by(BestConfig.id.desc()).limit(limit).offset(offset))
    return list(rows), int(total or 0)


def best_of_runs(session: Session, *, run_ids: list[int]) -> dict[int, int]:
    """The stored best config id each of these runs produced, for those that produced one."""
    if not run_ids:
        return {}
    rows = session.execute(select(BestConfig.run_id, BestConfig.id).where(BestConfig.run_id.in_(set(run_ids))))
    return {int(run): int(best) for run, best in rows if run is not None}


def get_best(session: Session, *, best_id: int) -> BestConfig | None:
    return session.scalar(select(BestConfig).where(BestConfig.id == best_id).options(selectinload(BestConfig.device)))


def get_peaks(session: Session, *, device_id: int) -> dict[str, DevicePeak]:
    return {p.name: p for p in session.scalars(select(DevicePeak).where(DevicePeak.device_id == device_id))}


def save_peak(session: Session, *, device_id: int, name: str, value: float, unit: str, method: str,
              torch_version: str) -> None:
    """Store a measured ceiling, replacing an earlier measurement of the same name."""
    stmt = _insert(session)(DevicePeak).values(device_id=device_id, name=name, value=value, unit=unit, method=method,
                                               torch_version=torch_version, measured_at=utcnow())
    session.execute(stmt.on_conflict_do_update(
        index_elements=["device_id", "name"],
        set_={c: stmt.excluded[c] for c in ("value", "unit", "method", "torch_version", "measured_at")}))


def trial_times(session: Session, *, op: str, problem_key: str, device_key: str, kernel_hash: str,
                triton_version: str) -> list[Any]:
    """Every measured or failed trial of this problem at this kernel hash and Triton version, in order, as plain rows
    (the store checks them: row_checks.trial_times); through Core, as a launching process asks it."""
    trial, run, device = Trial.__table__, TuningRun.__table__, Device.__table__
    q = (select(trial.c.config_key, trial.c.config, trial.c.status, trial.c.median_ms, trial.c.retimed_ms,
                trial.c.error, trial.c.created_at)
         .join(run, trial.c.run_id == run.c.id).join(device, run.c.device_id == device.c.id)
         .where(run.c.op == op, run.c.problem_key == problem_key, device.c.key == device_key,
                run.c.kernel_hash == kernel_hash, run.c.triton_version == triton_version, trial.c.status != "invalid")
         .order_by(trial.c.id))
    return list(session.execute(q))


def claim_tuning(session: Session, *, op: str, problem_key: str, device_key: str, owner: str,
                 expires_at: datetime) -> bool:
    """Take the claim on tuning this problem; False when another owner holds a claim that has not expired."""
    session.execute(delete(TuneClaim).where(TuneClaim.op == op, TuneClaim.problem_key == problem_key,
                                            TuneClaim.device_key == device_key, TuneClaim.expires_at < utcnow()))
    stmt = _insert(session)(TuneClaim).values(op=op, problem_key=problem_key, device_key=device_key, owner=owner,
                                              claimed_at=utcnow(), expires_at=expires_at)
    stmt = stmt.on_conflict_do_nothing(index_elements=["op", "problem_key", "device_key"]).returning(TuneClaim.id)
    return session.execute(stmt).scalar() is not None  # RETURNING: rowcount is -1 on some drivers


def release_tuning(session: Session, *, op: str, problem_key: str, device_key: str, owner: str) -> None:
    session.execute(delete(TuneClaim).where(TuneClaim.op == op, TuneClaim.problem_key == problem_key,
                                            TuneClaim.device_key == device_key, TuneClaim.owner == owner))


def create_sweep(session: Session, *, op: str, dtype: str, options: dict[str, Any], dim: str,
                 shapes: list[str], target: float | None = None, budget: int = 0) -> int:
    points: dict[str, Any] = {"shapes": list(shapes)}
    if target is not None:
        points.update(target=target, budget=budget, refined=[])
    sweep = Sweep(op=op, dtype=dtype, options=options, dim=dim, points=points, created_at=utcnow())
    session.add(sweep)
    session.flush()
    return sweep.id


def add_sweep_points(session: Session, *, sweep_id: int, shapes: list[str], added: list[str]) -> None:
    """The sweep's points now `shapes` (in order along its dimension), `added` among them by refinement."""
    sweep = session.get(Sweep, sweep_id, with_for_update=True)
    if sweep is None:
        return
    points = dict(sweep.points)
    sweep.points = {**points, "shapes": list(shapes), "refined": [*points.get("refined", []), *added]}
    session.flush()


def save_sweep_prediction(session: Session, *, sweep_id: int, device_key: str, prediction: dict[str, Any]) -> None:
    """The sweep's prediction on one device (autotuner.store.prediction), replacing one made before."""
    sweep = session.get(Sweep, sweep_id, with_for_update=True)
    if sweep is None:
        return
    points = dict(sweep.points)
    sweep.points = {**points, "predicted": {**dict(points.get("predicted") or {}), device_key: prediction}}
    session.flush()


def get_sweep(session: Session, *, sweep_id: int) -> Sweep | None:
    return session.get(Sweep, sweep_id)


def list_sweeps(session: Session, *, op: str | None = None) -> list[Sweep]:
    q = select(Sweep).order_by(Sweep.id)
    if op is not None:
        q = q.where(Sweep.op == op)
    return list(session.scalars(q))


def save_cross_timings(session: Session, *, sweep_id: int, device_id: int, kernel_hash: str, triton_version: str,
                       cells: list[dict[str, Any]]) -> None:
    """Each cell (winner_key, on_key, config, ms, own_ms), replacing one measured before for the same pair."""
    for cell in cells:
        session.execute(delete(CrossTiming).where(
            CrossTiming.sweep_id == sweep_id, CrossTiming.device_id == device_id,
            CrossTiming.winner_key == cell["winner_key"], CrossTiming.on_key == cell["on_key"],
            CrossTiming.kernel_hash == kernel_hash, CrossTiming.triton_version == triton_version))
        session.add(CrossTiming(sweep_id=sweep_id, device_id=device_id, kernel_hash=kernel_hash,
                                triton_version=triton_version, measured_at=utcnow(), **cell))
    session.flush()


def cross_timings(session: Session, *, sweep_id: int, device_key: str | None = None) -> list[CrossTiming]:
    q = (select(CrossTiming).join(Device, CrossTiming.device_id == Device.id).where(CrossTiming.sweep_id == sweep_id)
         .options(selectinload(CrossTiming.device)).order_by(CrossTiming.id))
    if device_key is not None:
        q = q.where(Device.key == device_key)
    return list(session.scalars(q))


CHECKED_TABLES = ("best_configs", "tuning_runs", "trials", "jobs", "cross_timings")


def table_rows(session: Session, table: str, *, after: int = 0, limit: int = 1000) -> list[Any]:
    """One batch of a table's rows by id (columns by name, JSON decoded as every read decodes it), for the row
    audit (`autotuner db check`)."""
    from db.models import Base

    t = Base.metadata.tables[table]
    return list(session.execute(select(t).where(t.c.id > after).order_by(t.c.id).limit(limit)))


def delete_rows(session: Session, table: str, ids: list[int]) -> None:
    from db.models import Base

    t = Base.metadata.tables[table]
    session.execute(delete(t).where(t.c.id.in_(ids)))
