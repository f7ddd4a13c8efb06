"""Thin routes: parse, call autotuner.serving / db, convert rows to schemas. Reads are open; writes need a token."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.app import ServiceState
from api.schemas import (
    ConfigOut,
    DeviceOut,
    ErrorOut,
    HealthOut,
    JobIn,
    JobOut,
    JobPage,
    ResultDetail,
    ResultOut,
    ResultPage,
    RunOut,
    TrialOut,
)
from autotuner import serving
from autotuner.registry import UnknownOpError, get_op
from autotuner.store import stored_best
from db import queue
from db import repository as repo
from db.engine import session_scope
from db.models import BestConfig, Job

router = APIRouter()
bearer = HTTPBearer(auto_error=False, description="AUTOTUNER_TOKEN of the server")
MAX_ID = 2**31 - 1
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
Id = Annotated[int, Path(ge=1, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=10**9)]
DeviceKey = Annotated[str | None, Query(max_length=200, pattern=PRINTABLE, description="Device key, e.g. "
                                        "'NVIDIA H100 80GB HBM3 (sm_90)'; may be left out when the database "
                                        "knows exactly one device")]
UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {"model": ErrorOut, "description": "The result database is unavailable"}}
CONFIG_PARAMS = {"op", "shape", "dtype", "device", "fallback", "epilogue", "approximate", "causal", "kernel_hash",
                 "triton_version"}


def state(request: Request) -> ServiceState:
    service: ServiceState = request.app.state.service
    return service


State = Annotated[ServiceState, Depends(state)]


# -- lookups --------------------------------------------------------------------------------------------
@router.get("/config", response_model=None, tags=["lookup"],
            responses={200: {"model": ConfigOut}, 404: {"model": ErrorOut, "description": "fallback=none and no "
                       "exact result"}, **UNAVAILABLE})
async def get_config(
    request: Request,
    st: State,
    op: Annotated[str, Query(max_length=64, description="matmul, softmax, layernorm, gelu, attention")],
    shape: Annotated[str, Query(max_length=100, description="e.g. 4096x4096x4096 (matmul), 4096x4096 (softmax)")],
    dtype: Annotated[str, Query(max_length=16)] = "float16",
    device: DeviceKey = None,
    fallback: Literal["nearest", "default", "none"] = "nearest",
    epilogue: Annotated[str | None, Query(max_length=32, description="matmul")] = None,
    approximate: Annotated[str | None, Query(max_length=16, description="gelu")] = None,
    causal: Annotated[bool | None, Query(description="attention")] = None,
    kernel_hash: Annotated[str | None, Query(pattern=r"^[0-9a-f]{1,64}$", description="the caller's kernel hash; "
                                             "default: the server's")] = None,
    triton_version: Annotated[str | None, Query(max_length=32, pattern=PRINTABLE, description="the caller's "
                                                "Triton version; default: the server's")] = None,
) -> Response:
    """The config to launch with: the exact tuned result, else the nearest tuned problem's, else the default."""
    unknown = sorted(set(request.query_params) - CONFIG_PARAMS)
    if unknown:
        raise serving.InputError(unknown[0], f"unknown query parameter {unknown[0]!r}; accepted: "
                                             f"{', '.join(sorted(CONFIG_PARAMS))}")
    options = {"epilogue": epilogue, "approximate": approximate, "causal": causal}

    def resolve() -> tuple[int, bytes, str]:
        op_, problem = serving.parse_request(op, shape, dtype, options)
        store = st.store()
        dev = serving.pick_device(store, device)
        try:
            answer = serving.answer_config(store, op_, problem, dev, fallback=fallback, kernel_hash=kernel_hash,
                                           triton_version=triton_version)
        except serving.NotFound as exc:
            return 404, ErrorOut(detail=str(exc)).model_dump_json().encode(), "none"
        return 200, ConfigOut(**dataclasses.asdict(answer)).model_dump_json().encode(), answer.source

    async def compute() -> tuple[int, bytes, str]:
        return await run_in_threadpool(resolve)

    entry = await st.config_cache.get(request.scope["query_string"], compute)
    st.metrics.lookups.labels(entry.source).inc()
    return Response(entry.body, status_code=entry.status, media_type="application/json")


@router.get("/devices", response_model=list[DeviceOut], tags=["results"], responses=UNAVAILABLE)
def get_devices(st: State) -> list[DeviceOut]:
    with session_scope(st.store().engine) as s:
        return [DeviceOut.model_validate(d, from_attributes=True) for d in repo.list_devices(s)]


# -- results --------------------------------------------------------------------------------------------
def _result(row: BestConfig) -> dict[str, Any]:
    try:
        running_hash = get_op(row.op).kernel_hash
    except UnknownOpError:
        running_hash = ""  # an op this server does not load: it cannot vouch for the result
    return dict(
        id=row.id, op=row.op, problem_key=row.problem_key, problem=row.problem, device=row.device.key,
        kernel_hash=row.kernel_hash, triton_version=row.triton_version, config=row.config, median_ms=row.median_ms,
        default_ms=row.default_ms, torch_ms=row.torch_ms,
        speedup_vs_default=row.default_ms / row.median_ms if row.default_ms and row.median_ms else None,
        speedup_vs_torch=row.torch_ms / row.median_ms if row.torch_ms and row.median_ms else None,
        stale=stored_best(row, running_hash).stale,
        run_id=row.run_id, updated_at=row.updated_at)


@router.get("/results", response_model=ResultPage, tags=["results"], responses=UNAVAILABLE)
def get_results(st: State, op: Annotated[str | None, Query(max_length=64, pattern=PRINTABLE)] = None,
                device: Annotated[str | None, Query(max_length=200, pattern=PRINTABLE)] = None,
                limit: Limit = 50, offset: Offset = 0) -> ResultPage:
    """Stored best configs, newest first; filter by op and device key."""
    with session_scope(st.store().engine) as s:
        rows, total = repo.page_best(s, op=op, device_key=device, limit=limit, offset=offset)
        return ResultPage(total=total, limit=limit, offset=offset, items=[ResultOut(**_result(r)) for r in rows])


@router.get("/results/{result_id}", response_model=ResultDetail, tags=["results"],
            responses={404: {"model": ErrorOut}, **UNAVAILABLE})
def get_result(st: State, result_id: Id) -> ResultDetail:
    """One stored best config with the run that found it and every trial of that run."""
    with session_scope(st.store().engine) as s:
        row = repo.get_best(s, best_id=result_id)
        if row is None:
            raise serving.NotFound(f"no result with id {result_id}")
        run = repo.get_run(s, run_id=row.run_id) if row.run_id is not None else None
        return ResultDetail(
            **_result(row),
            run=RunOut.model_validate(run, from_attributes=True) if run else None,
            trials=[TrialOut.model_validate(t, from_attributes=True) for t in (run.trials if run else [])])


# -- jobs -----------------------------------------------------------------------------------------------
def _job(job: Job) -> JobOut:
    return JobOut(id=job.id, op=job.op, shape=job.shape, dtype=job.dtype, options=job.options, strategy=job.strategy,
                  trials=job.budget_trials, time_budget_s=job.budget_seconds, priority=job.priority, state=job.state,
                  attempts=job.attempts, worker=job.worker, heartbeat_at=job.heartbeat_at, error=job.error,
                  run_id=job.run_id, created_at=job.created_at, started_at=job.started_at,
                  finished_at=job.finished_at)


@router.post("/jobs", status_code=202, response_model=JobOut, tags=["jobs"],
             responses={400: {"model": ErrorOut, "description": "The body is not JSON"},
                        401: {"model": ErrorOut, "description": "No or wrong bearer token"},
                        403: {"model": ErrorOut, "description": "The server accepts no writes (no token set)"},
                        **UNAVAILABLE})
def post_job(st: State, body: JobIn, response: Response,
             credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> JobOut:
    """Queue a tuning job; a worker (`autotuner worker`) picks it up. Needs the server's bearer token."""
    st.check_token(f"{credentials.scheme} {credentials.credentials}" if credentials else None)
    try:
        op, problem = serving.check_job(body.op, body.shape, body.dtype, body.options, body.strategy)
    except serving.InputError as exc:
        field = exc.field if exc.field in JobIn.model_fields else f"options.{exc.field}"
        raise serving.InputError(field, exc.message, location="body") from None
    options = {k: getattr(problem, k) for k in op.options}
    with session_scope(st.store().engine) as s:
        job_id = queue.add_job(s, op=op.name, shape=problem.shape, dtype=problem.dtype, options=options,
                               strategy=body.strategy, budget_trials=body.trials,
                               budget_seconds=body.time_budget_s, priority=body.priority)
        job = queue.get_job(s, job_id=job_id)
        assert job is not None
        response.headers["Location"] = f"/jobs/{job_id}"
        return _job(job)


@router.get("/jobs/{job_id}", response_model=JobOut, tags=["jobs"],
            responses={404: {"model": ErrorOut}, **UNAVAILABLE})
def get_job(st: State, job_id: Id) -> JobOut:
    with session_scope(st.store().engine) as s:
        job = queue.get_job(s, job_id=job_id)
        if job is None:
            raise serving.NotFound(f"no job with id {job_id}")
        return _job(job)


@router.get("/jobs", response_model=JobPage, tags=["jobs"], responses=UNAVAILABLE)
def get_jobs(st: State, state: Literal["queued", "running", "done", "failed"] | None = None, limit: Limit = 50,
             offset: Offset = 0) -> JobPage:
    """Jobs, newest first; filter by state."""
    with session_scope(st.store().engine) as s:
        rows, total = queue.list_jobs(s, state=state, limit=limit, offset=offset)
        return JobPage(total=total, limit=limit, offset=offset, items=[_job(j) for j in rows])


# -- operations -----------------------------------------------------------------------------------------
@router.get("/healthz", response_model=HealthOut, tags=["operations"], responses={503: {"model": HealthOut}})
def healthz(st: State, response: Response) -> HealthOut:
    """200 when the database answers, 503 when it does not."""
    try:
        with st.store().engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        response.status_code = 503
        return HealthOut(status="unavailable", database="unreachable", detail=str(exc).splitlines()[0][:300])
    return HealthOut(status="ok", database=st.store().engine.dialect.name)


@router.get("/metrics", include_in_schema=False)
def metrics(st: State) -> Response:
    return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)
