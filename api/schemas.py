"""Request and response bodies. These are not ORM rows: routes convert rows into them."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, create_model, field_validator

from autotuner.engine.search.strategies import check_strategy, strategy_names
from autotuner.store.resolution import TORCH_MARGIN, Source
from search_spaces.contract import TunableOp
from search_spaces.problem import DTYPE_ALIASES


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

PRINTABLE = r"^[^\x00-\x1f\x7f]*$"  # no control characters
OptionValue = str | bool | int | float


class ErrorOut(BaseModel):
    detail: str


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class FieldErrorOut(BaseModel):
    """A request whose values name nothing (404: an op's problem of another shape, another op's option, an
    unknown device) or a job this service cannot run (409). `detail` names the field."""

    detail: list[FieldError]


class NotFoundOut(BaseModel):
    detail: str | list[FieldError]


class DeviceChoiceOut(BaseModel):
    """No device named and the database knows several (300): name one of `devices`."""

    detail: list[FieldError]
    devices: list[str]


class ConfigOut(BaseModel):
    op: str
    problem: dict[str, Any]
    problem_key: str
    device: str
    config: dict[str, Any] = Field(description="Keyword arguments to launch the kernel with")
    source: Source = Field(description="exact: tuned for this problem; bucket: tuned for its bucket's "
                                       "representative (the built-in ops bucket their leading dimension by powers "
                                       "of two); nearest: tuned for the nearest problem; "
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
    expected_regret: float | None = Field(None, description="For a bucket or nearest answer: how much slower its "
                                                            "config is expected to run than this problem's own "
                                                            "winner (0.03: 3%): the loss a sweep's cross timings "
                                                            "measured on the swept problem beside `from_problem` on "
                                                            "this one's side, scaled by where this one lies between "
                                                            "them (log scale); null where not measured")
    regret_measured_on: list[str] = Field(default_factory=list, description="The problems expected_regret was "
                                                                            "measured on")
    regret_basis: str | None = Field(None, description="How expected_regret was found, or that it was not measured")
    launches_torch: bool = Field(False, description="The op's library call (autotuner.<name>) launches torch's own "
                                                    "op for this problem instead of `config`: the tune that stored "
                                                    f"this result timed torch's op more than {TORCH_MARGIN:.0%} "
                                                    "faster than it")


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
    library: str | None = Field(None, description="a kernel's library: the top-level package of its module (a "
                                                  "`module:qualname` op); None for the built-in ops")
    problem_key: str
    problem: dict[str, Any]
    device: str
    kernel_hash: str
    triton_version: str
    config: dict[str, Any]
    median_ms: float | None = Field(description="four significant digits; None for a stored time that is not one "
                                                "(a row written by hand)")
    default_ms: float | None
    torch_ms: float | None
    speedup_vs_default: float | None
    speedup_vs_torch: float | None = Field(description="None without a torch time, and for results timed by the "
                                                       "interpreter (CPU wall-clock says nothing of GPU speed)")
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


class RejectionOut(BaseModel):
    count: int
    example: str


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
    rejected: int = Field(description="Configs the space's constraints rejected before compiling anything")
    rejections: dict[str, RejectionOut] = Field(description="Those rejections per rule, with one message each")


class ResultDetail(ResultOut):
    run: RunOut | None
    trials: list[TrialOut] = Field(description="The run's measured and failed trials, in the order measured: "
                                               "one page of them (trials_limit, trials_offset)")
    trials_total: int
    trials_limit: int
    trials_offset: int


class JobCommon(BaseModel):
    """What every job request holds besides its op's problem."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: str = Field("tpe", description="The search: a registered strategy (autotuner.engine.search.strategies)",
                          json_schema_extra=lambda schema: schema.update(enum=list(strategy_names())))
    trials: Annotated[int, Field(ge=1, le=100_000)] | None = Field(None, description="Configs to measure")
    time_budget_s: Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)] | None = Field(
        None, description="Seconds of searching")
    priority: int = Field(0, ge=-1000, le=1000, description="Higher runs first")
    gpus: Annotated[int, Field(ge=1, le=64)] | None = Field(
        None, description="How many of its worker's GPUs measure the job's configs at once (`autotuner worker "
                          "--gpus 0,1`); default: one, a worker with several running a job on each at once. A "
                          "worker with fewer uses those it has; the winner is chosen on one GPU either way")

    @field_validator("strategy")
    @classmethod
    def _registered(cls, value: str) -> str:
        check_strategy(value)  # ValueError naming the accepted ones: a 422
        return value

    @field_validator("trials", "priority", "gpus", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        """JSON has one number type: 3.0 is the integer 3 (as JSON Schema says), 3.5 is not."""
        return int(value) if isinstance(value, float) and value.is_integer() else value


def dtype_names(dtypes: tuple[str, ...]) -> tuple[str, ...]:
    """The dtype names a request may use for these dtypes: canonical names first, then their aliases."""
    return tuple(dict.fromkeys([*dtypes, *(a for a, c in DTYPE_ALIASES.items() if c in dtypes)]))


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", name) if part) or "Op"


def job_models(ops: list[TunableOp[Any]]) -> Any:
    """The body of POST /jobs: one model per op (its shape pattern, dtypes and options), told apart by `op`. Any
    body the schema accepts names a problem the worker can parse."""
    models = []
    for op in ops:
        if op.needs_recorded_call:
            continue  # a kernel whose jobs carry a recorded call: queued by the process that recorded it
        options: dict[str, Any] = {}
        for o in op.options:
            kind: Any = StrictBool if o.is_flag else Literal[o.choices]  # type: ignore[valid-type]
            options[o.name] = (kind, Field(o.default, description=o.help))
        options_model = create_model(f"{_pascal(op.name)}Options", __config__=ConfigDict(extra="forbid", strict=True),
                                     **options)
        models.append(create_model(
            f"{_pascal(op.name)}Job", __base__=JobCommon, __doc__=op.description or None,
            op=(Literal[op.name], ...),  # type: ignore[valid-type, arg-type]
            shape=(str, Field(pattern=op.problem_type.shape_pattern, description=op.problem_type.layout)),
            dtype=(Literal[dtype_names(op.dtypes)], op.dtypes[0]),  # type: ignore[valid-type, arg-type]
            options=(options_model, Field(default_factory=options_model))))
    if len(models) == 1:
        return models[0]
    if not models:
        raise ValueError("no op takes jobs over HTTP")
    return Annotated[Union[tuple(models)], Field(discriminator="op")]  # noqa: UP007


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
    gpus: int | None = Field(description="How many of its worker's GPUs measure its configs at once (null: one)")
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


UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {"model": ErrorOut, "description": "The result database is "
                                                                                   "unavailable"}}


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    detail: str | None = None
