"""SQLAlchemy 2 models. Rows are not API schemas: api/ converts them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from db.basics import JOB_STATES  # noqa: F401  (re-exported: db.queue and the migrations read it here)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON}


TRIAL_STATUSES = ("ok", "invalid", "compile_error", "out_of_resources", "wrong_result", "crash", "timeout")
RUN_STATUSES = ("running", "done", "failed", "interrupted")


class Device(Base):
    __tablename__ = "devices"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    capability: Mapped[str] = mapped_column(String(16))
    sm_count: Mapped[int] = mapped_column(Integer)
    total_memory: Mapped[int] = mapped_column(BigInteger)
    smem_per_block: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TuningRun(Base):
    __tablename__ = "tuning_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    op: Mapped[str] = mapped_column(String(200))
    problem_key: Mapped[str] = mapped_column(String(400))
    problem: Mapped[dict[str, Any]]
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    kernel_hash: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(32))
    torch_version: Mapped[str] = mapped_column(String(64))
    strategy: Mapped[str] = mapped_column(String(32))
    budget_trials: Mapped[int | None] = mapped_column(Integer, nullable=True)
    budget_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    clock: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="running")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL", use_alter=True, name="fk_tuning_runs_job_id"), nullable=True,
        index=True)
    # configs the space's constraints rejected before anything was compiled: counted, not stored one by one
    rejected: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    rejections: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=dict)  # rule -> {"count": n, "example": message}
    device: Mapped[Device] = relationship()
    trials: Mapped[list[Trial]] = relationship(back_populates="run", order_by="Trial.id")


class Trial(Base):
    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("run_id", "config_key", name="uq_trial_run_config"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("tuning_runs.id", ondelete="CASCADE"), index=True)
    config: Mapped[dict[str, Any]]
    config_key: Mapped[str] = mapped_column(String(400))
    status: Mapped[str] = mapped_column(String(32))
    median_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    p20_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    p80_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    retimed_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    compile_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    run: Mapped[TuningRun] = relationship(back_populates="trials")


class BestConfig(Base):
    __tablename__ = "best_configs"
    __table_args__ = (
        UniqueConstraint("op", "problem_key", "device_id", "kernel_hash", "triton_version", name="uq_best_result_key"),
        Index("ix_best_lookup", "op", "device_id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    op: Mapped[str] = mapped_column(String(200))
    problem_key: Mapped[str] = mapped_column(String(400))
    problem: Mapped[dict[str, Any]]
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    kernel_hash: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]]
    median_ms: Mapped[float] = mapped_column(Float)
    default_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    torch_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("tuning_runs.id", ondelete="SET NULL"), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    device: Mapped[Device] = relationship()


class Sweep(Base):
    """Problems of one op, dtype and options that differ in one dimension (`dim`), tuned together and then
    cross-timed: each point's winner timed on the neighbouring points (`cross_timings`)."""

    __tablename__ = "sweeps"
    id: Mapped[int] = mapped_column(primary_key=True)
    op: Mapped[str] = mapped_column(String(200))
    dtype: Mapped[str] = mapped_column(String(200))
    options: Mapped[dict[str, Any]]
    dim: Mapped[str] = mapped_column(String(64))  # what varies: a dimension flag (M) or a key argument
    points: Mapped[dict[str, Any]]  # {"shapes": [shape strings, in order along dim], and where it refines:
    #                                  "target": 0.02, "budget": 14, "refined": [the shapes refinement added]}
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CrossTiming(Base):
    """One point's winner timed on one point of its sweep (its own included), interleaved with that point's own
    winner on one device: `ms` against `own_ms` is the loss of serving that point with the other's config."""

    __tablename__ = "cross_timings"
    __table_args__ = (UniqueConstraint("sweep_id", "device_id", "winner_key", "on_key", "kernel_hash",
                                       "triton_version", name="uq_cross_timing"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    winner_key: Mapped[str] = mapped_column(String(400))  # the problem whose winner was timed
    on_key: Mapped[str] = mapped_column(String(400))  # the problem it was timed on
    config: Mapped[dict[str, Any]]
    ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: not valid there, or it failed
    own_ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # on_key's own winner, the same rounds
    kernel_hash: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(32))
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    device: Mapped[Device] = relationship()


JOB_KINDS = ("tune", "cross_time")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_claim", "state", "priority", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    op: Mapped[str] = mapped_column(String(200))
    shape: Mapped[str] = mapped_column(String(400))
    dtype: Mapped[str] = mapped_column(String(200))
    options: Mapped[dict[str, Any]]
    strategy: Mapped[str] = mapped_column(String(32), default="tpe")
    budget_trials: Mapped[int | None] = mapped_column(Integer, nullable=True)
    budget_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("tuning_runs.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    kind: Mapped[str] = mapped_column(String(16), default="tune", server_default="tune")  # JOB_KINDS
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id", ondelete="SET NULL"), nullable=True,
                                                 index=True)
    # how many of its worker's GPUs measure the job's configs at once (None: all the worker has)
    gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # attempts whose worker stopped heartbeating while holding it (killed, crashed, an import that ended it)
    lost: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class TuneClaim(Base):
    """A launching process tuning a problem now (`autotuner.autotune` under AUTOTUNER_ON_MISS=tune): others that
    miss the same problem wait for its winner instead of tuning too. A claim past `expires_at` is void."""

    __tablename__ = "tune_claims"
    __table_args__ = (UniqueConstraint("op", "problem_key", "device_key", name="uq_tune_claim"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    op: Mapped[str] = mapped_column(String(200))
    problem_key: Mapped[str] = mapped_column(String(400))
    device_key: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str] = mapped_column(String(200))
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DevicePeak(Base):
    """A ceiling measured once per device: copy bandwidth (GB/s) or a dense matmul rate (TFLOP/s) per dtype."""

    __tablename__ = "device_peaks"
    __table_args__ = (UniqueConstraint("device_id", "name", name="uq_device_peak"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"))
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))
    method: Mapped[str] = mapped_column(Text)
    torch_version: Mapped[str] = mapped_column(String(64))
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CompiledFile(Base):
    """A file of Triton's compile cache, kept so a host compiling the same kernel version loads it instead. `mac`:
    HMAC-SHA256 of key, name and bytes under the operator's secret (a file that does not verify is never loaded);
    `signer`: which secret signed it."""

    __tablename__ = "compiled_files"
    __table_args__ = (UniqueConstraint("signer", "cache_key", "filename", name="uq_compiled_file"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    signer: Mapped[str] = mapped_column(String(16))
    cache_key: Mapped[str] = mapped_column(String(128))
    filename: Mapped[str] = mapped_column(String(400))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    mac: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
