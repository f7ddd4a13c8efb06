"""Request and response bodies. The responses that show a stored row are derived from the store's row
(autotuner.store.rows: `from_row`), not declared again; routes convert rows into them."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, create_model, field_validator

from autotuner.engine.search.strategies import check_strategy, strategy_names
from autotuner.store import rows
from autotuner.store.resolution import TORCH_MARGIN, Source
from search_spaces.contract import TunableOp
from search_spaces.problem import DTYPE_ALIASES


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


def from_row(row: type, name: str, *, exclude: Collection[str] = (), fields: Mapping[str, Any] | None = None,
             doc: str | None = None, base: type[BaseModel] = BaseModel) -> Any:
    """The response model of a store row: the row's fields in its order, but `exclude`, with the row's types (a
    time as UTC), each replaced or added by `fields` (name -> type, or (type, Field(...)))."""
    hints = rows.row_types(row)
    spec: dict[str, Any] = {}
    for field_name in rows.row_fields(row, exclude=exclude):
        kind = hints[field_name]
        kind = UtcDatetime if kind is datetime else UtcDatetime | None if kind == datetime | None else kind
        spec[field_name] = (kind, ...)
    for field_name, given in (fields or {}).items():
        spec[field_name] = given if isinstance(given, tuple) else (given, ...)
    return create_model(name, __base__=base, __doc__=doc, **spec)

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


DeviceOut: Any = from_row(rows.DeviceRow, "DeviceOut")


ResultOut: Any = from_row(rows.ResultRow, "ResultOut", fields={
    "device": str,
    "median_ms": (float | None, Field(description="four significant digits; None for a stored time that is not one "
                                                  "(a row written by hand)")),
    "library": (str | None, Field(None, description="a kernel's library: the top-level package of its module (a "
                                                    "`module:qualname` op); None for the built-in ops")),
    "speedup_vs_default": float | None,
    "speedup_vs_torch": (float | None, Field(description="None without a torch time, and for results timed by the "
                                                         "interpreter (CPU wall-clock says nothing of GPU speed)")),
    "stale": bool})


class ResultPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ResultOut]  # type: ignore[valid-type]


TrialOut: Any = from_row(rows.TrialRow, "TrialOut", exclude={"run_id", "config_key", "created_at"})


class RejectionOut(BaseModel):
    count: int
    example: str


RunOut: Any = from_row(rows.RunRow, "RunOut", exclude={"op", "problem_key", "problem", "device", "kernel_hash",
                                                    "triton_version", "trials"}, fields={
    "rejected": (int, Field(description="Configs the space's constraints rejected before compiling anything")),
    "rejections": (dict[str, RejectionOut], Field(description="Those rejections per rule, with one message each"))})


class ResultDetail(ResultOut):  # type: ignore[valid-type, misc]
    run: RunOut | None  # type: ignore[valid-type]
    trials: list[TrialOut] = Field(  # type: ignore[valid-type]
        description="The run's measured and failed trials, in the order measured: one page of them (trials_limit, "
                    "trials_offset)")
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


# A job as the queue holds it, under the names a request gives it (`trials`, `time_budget_s`).
JobOut: Any = from_row(rows.JobRow, "JobOut", exclude={"kind", "sweep_id", "budget_trials", "budget_seconds"}, fields={
    "trials": int | None, "time_budget_s": float | None,
    "state": Literal["queued", "running", "done", "failed"],
    "gpus": (int | None, Field(description="How many of its worker's GPUs measure its configs at once (null: one)"))})


class JobPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[JobOut]  # type: ignore[valid-type]


UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {"model": ErrorOut, "description": "The result database is "
                                                                                   "unavailable"}}


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
    detail: str | None = None
