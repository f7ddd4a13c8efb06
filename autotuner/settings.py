"""One settings class, read from AUTOTUNER_* environment variables; built in entry points and passed down."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUTOTUNER_", extra="ignore")

    db_url: str | None = Field(None, description="SQLAlchemy URL; default: a SQLite file in the user's data dir")
    url: str | None = Field(None, description="Base URL of a remote autotuner service for lookups")
    token: str | None = Field(None, description="Bearer token the service requires for writes")
    tune_on_miss: bool = False  # library calls: queue a tuning job for a problem with no exact result
    on_miss: Literal["tune", "default", "error"] = Field(
        "tune", description="autotuner.autotune kernels, a key with no stored result: tune now, launch the default "
                            "and queue a job, or raise")
    record: bool = Field(False, description="autotuner.autotune kernels: queue a job with the recorded call for "
                                            "every new key")
    tune_wait_s: float = Field(600.0, gt=0, description="A process that misses a key another process is tuning "
                                                        "waits this long for its winner, then launches the default")
    plugins: list[str] = Field(default_factory=list, description="Modules that register extra ops on import")
    trial_timeout_s: float = Field(60.0, gt=0, description="A trial (compile + check + timing) running longer is killed")
    compile_workers: int = Field(0, ge=0, description="Processes compiling ahead of timing (0: from the CPU count)")
    warmup_ms: float = Field(25.0, gt=0)
    rep_ms: float = Field(100.0, gt=0)
    max_problem_bytes: int | None = Field(None, gt=0, description="Refuse problems needing more memory than this "
                                                                  "(default: the device's memory)")
    db_wait_s: float = Field(30.0, ge=0, description="`worker --once/--until-empty` give up on a database that "
                                                     "cannot be opened after this long")

    # The service and the worker
    config_cache_s: float = Field(2.0, ge=0, description="The service answers GET /config from memory this long")
    heartbeat_s: float = Field(10.0, gt=0, description="A worker refreshes its job's heartbeat this often")
    lease_s: float = Field(120.0, gt=0, description="A running job whose heartbeat is older is queued again")
    max_attempts: int = Field(3, ge=1, description="A job that failed this many times is marked failed")
    poll_s: float = Field(2.0, gt=0, description="An idle worker looks for queued jobs this often")
