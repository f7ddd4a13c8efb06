"""Request and response bodies. These are not ORM rows: routes convert rows into them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

Source = Literal["exact", "nearest", "default"]
OptionValue = str | bool | int | float


class ErrorOut(BaseModel):
    detail: str


class ConfigOut(BaseModel):
    op: str
    problem: dict[str, Any]
    problem_key: str
    device: str
    config: dict[str, Any] = Field(description="Keyword arguments to launch the kernel with")
    source: Source = Field(description="exact: tuned for this problem; nearest: tuned for the nearest problem; "
                                       "default: the space's heuristic")
    median_ms: float | None = Field(description="Measured time of this config on `timing_problem` (for a nearest "
                                                "answer: the other problem, not this one)")
    default_ms: float | None = Field(description="The default config's time on `timing_problem`")
    speedup_vs_default: float | None = Field(description="On `timing_problem`")
    torch_ms: float | None = Field(description="torch's time on `timing_problem`")
    stale: bool = Field(description="An exact result exists but was tuned with another kernel or Triton version, "
                                    "so it is not served")
    stale_reason: str | None
    tuned_at: UtcDatetime | None
    from_problem: str | None
    result_id: int | None
    timing_problem: str | None = Field(description="The problem whose measurements median_ms, default_ms, torch_ms "
                                                   "and speedup_vs_default are: this one for an exact answer, the "
                                                   "nearest tuned problem for a nearest one, none for the default")


class DeviceOut(BaseModel):
    id: int
    key: str
    name: str
    capability: str
    sm_count: int
    total_memory: int
    smem_per_block: int


class ResultOut(BaseModel):
    id: int
    op: str
    problem_key: str
    problem: dict[str, Any]
    device: str
    kernel_hash: str
    triton_version: str
    config: dict[str, Any]
    median_ms: float
    default_ms: float | None
    torch_ms: float | None
    speedup_vs_default: float | None
    speedup_vs_torch: float | None
    stale: bool
    run_id: int | None
    updated_at: UtcDatetime


class ResultPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ResultOut]


class TrialOut(BaseModel):
    id: int
    config: dict[str, Any]
    status: str
    median_ms: float | None
    p20_ms: float | None
    p80_ms: float | None
    retimed_ms: float | None
    compile_s: float | None
    error: str | None


class RunOut(BaseModel):
    id: int
    strategy: str
    status: str
    clock: str
    torch_version: str
    budget_trials: int | None
    budget_seconds: float | None
    started_at: UtcDatetime
    finished_at: UtcDatetime | None
    error: str | None
    job_id: int | None


class ResultDetail(ResultOut):
    run: RunOut | None
    trials: list[TrialOut]


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    op: str = Field(max_length=64, examples=["softmax"])
    shape: str = Field(max_length=100, examples=["4096x4096"])
    dtype: str = Field("float16", max_length=16)
    options: dict[str, OptionValue] = Field(default_factory=dict, max_length=8,
                                            description="Problem options: matmul epilogue, gelu approximate, "
                                                        "attention causal")
    strategy: str = Field("tpe", max_length=32)
    trials: int | None = Field(None, ge=1, le=100_000, description="Configs to measure")
    time_budget_s: float | None = Field(None, gt=0, le=7 * 86400, allow_inf_nan=False)
    priority: int = Field(0, ge=-1000, le=1000, description="Higher runs first")


class JobOut(BaseModel):
    id: int
    op: str
    shape: str
    dtype: str
    options: dict[str, Any]
    strategy: str
    trials: int | None
    time_budget_s: float | None
    priority: int
    state: Literal["queued", "running", "done", "failed"]
    attempts: int
    worker: str | None
    heartbeat_at: UtcDatetime | None
    error: str | None
    run_id: int | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None


class JobPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[JobOut]


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    detail: str | None = None
