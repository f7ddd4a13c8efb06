"""POST /jobs, GET /jobs, GET /jobs/{id}: the tuning queue the workers drain. Writes need the server's token."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Response

from api.deps import State, StoreDep, WritableStoreDep, Writer
from api.schemas import UNAVAILABLE, ErrorOut, FieldErrorOut, JobOut, JobPage, job_models
from autotuner.engine.fits import ProblemTooLarge, check_queueable
from autotuner.launch import serving
from autotuner.store.resolution import NotFound
from autotuner.store.rows import JobRow
from search_spaces.contract import TunableOp

Id = Annotated[int, Path(ge=1, le=2**31 - 1)]


def job_out(job: JobRow) -> JobOut:
    return JobOut(id=job.id, op=job.op, shape=job.shape, dtype=job.dtype, options=job.options, strategy=job.strategy,
                  trials=job.budget_trials, time_budget_s=job.budget_seconds, priority=job.priority, gpus=job.gpus,
                  state=job.state, attempts=job.attempts, worker=job.worker, heartbeat_at=job.heartbeat_at,
                  error=job.error, run_id=job.run_id, created_at=job.created_at, started_at=job.started_at,
                  finished_at=job.finished_at)


def router(ops: list[TunableOp[Any]]) -> APIRouter:
    api = APIRouter(tags=["jobs"])
    JobIn = job_models(ops)  # noqa: N806  (a type built from the registry)

    @api.post("/jobs", status_code=202, response_model=JobOut, dependencies=[Writer], responses={
        400: {"model": ErrorOut, "description": "The body is not JSON"},
        401: {"model": ErrorOut, "description": "No or wrong bearer token"},
        403: {"model": ErrorOut, "description": "The server accepts no writes (no token set)"},
        413: {"model": ErrorOut, "description": "The body is larger than AUTOTUNER_MAX_BODY_BYTES"},
        409: {"model": FieldErrorOut, "description": "A problem the schema admits that this service cannot run: too "
                                                "large for the memory of every device it knows (or "
                                                "AUTOTUNER_MAX_PROBLEM_BYTES) or for the kernels' 32-bit offsets, "
                                                "or query heads that are not a multiple of the key/value heads"},
        422: {"description": "A value the schema refuses, or a number that is not finite"}, **UNAVAILABLE})
    def post_job(st: State, store: WritableStoreDep, body: Annotated[JobIn, Body()], response: Response) -> JobOut:  # type: ignore[valid-type]
        """Queue a tuning job; a worker (`autotuner worker`) picks it up. Needs the server's bearer token."""
        options = body.options.model_dump()  # type: ignore[attr-defined]
        try:
            op, problem = serving.parse_request(body.op, body.shape, body.dtype, options)  # type: ignore[attr-defined]
        except serving.InputError as exc:  # each value is the schema's; together they name nothing this op runs
            field = exc.field if exc.field in ("op", "shape", "dtype") else f"options.{exc.field}"
            raise serving.CannotRun(field, exc.message, location="body") from None
        try:  # a problem no device here could hold, or beyond the kernels' index range, is refused now
            check_queueable(op, problem, [d.total_memory for d in store.devices()], st.settings.max_problem_bytes)
        except ProblemTooLarge as exc:
            raise serving.CannotRun("shape", str(exc), location="body") from None
        b: Any = body  # (a model built from the registry: its fields are JobCommon's)
        job_id = store.queue_job(op=op.name, shape=problem.shape, dtype=problem.dtype, options=op.options_of(problem),
                                 strategy=b.strategy, budget_trials=b.trials, budget_seconds=b.time_budget_s,
                                 priority=b.priority, gpus=b.gpus)
        job = store.job(job_id)
        assert job is not None
        response.headers["Location"] = f"/jobs/{job_id}"
        return job_out(job)

    @api.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": ErrorOut}, **UNAVAILABLE})
    def get_job(store: StoreDep, job_id: Id) -> JobOut:
        job = store.job(job_id)
        if job is None:
            raise NotFound(f"no job with id {job_id}")
        return job_out(job)

    @api.get("/jobs", response_model=JobPage, responses=UNAVAILABLE)
    def get_jobs(store: StoreDep, state: Literal["queued", "running", "done", "failed"] | None = None,
                 limit: Annotated[int, Query(ge=1, le=500)] = 50,
                 offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> JobPage:
        """Jobs, newest first; filter by state."""
        rows, total = store.jobs_page(state=state, limit=limit, offset=offset)
        return JobPage(total=total, limit=limit, offset=offset, items=[job_out(j) for j in rows])

    return api
