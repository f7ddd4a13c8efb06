"""GET /results, /results/{id}, /devices: what the database holds."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from api.deps import StoreDep
from api.schemas import (
    PRINTABLE,
    UNAVAILABLE,
    DeviceOut,
    ErrorOut,
    ResultDetail,
    ResultOut,
    ResultPage,
    RunOut,
    TrialOut,
)
from autotuner.base.device import INTERPRETER
from autotuner.base.registry import Op, UnknownOpError, get_op, library_of
from autotuner.launch.serving import measured
from autotuner.store.resolution import NotFound
from autotuner.store.rows import ResultRow
from autotuner.store.stored_best import StoredBest, stored_best

MAX_ID = 2**31 - 1
Id = Annotated[int, Path(ge=1, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=10**9)]


def judge(row: ResultRow) -> tuple[Op | None, StoredBest]:
    """The op a stored result belongs to (None: this server does not load it, so it cannot vouch for the
    result), and the result judged against the running kernel hash and Triton version."""
    try:
        op = get_op(row.op)
    except UnknownOpError:
        return None, stored_best(row, "")
    return op, stored_best(row, op.kernel_hash)


def _ratio(slow: float | None, fast: float | None) -> float | None:
    """A speedup as answered: three decimals, from times that are times (measured() keeps them)."""
    return round(slow / fast, 3) if slow is not None and fast is not None and measured(slow) and measured(fast) \
        else None


def result_fields(row: ResultRow, judged: tuple[Op | None, StoredBest] | None = None) -> dict[str, Any]:
    _, best = judged or judge(row)
    return dict(
        id=row.id, op=row.op, library=library_of(row.op), problem_key=row.problem_key, problem=row.problem, device=row.device.key,
        kernel_hash=row.kernel_hash, triton_version=row.triton_version, config=row.config,
        median_ms=measured(row.median_ms), default_ms=measured(row.default_ms), torch_ms=measured(row.torch_ms),
        speedup_vs_default=_ratio(row.default_ms, row.median_ms),
        # interpreter wall-clock says nothing of GPU speed
        speedup_vs_torch=_ratio(row.torch_ms, row.median_ms) if row.device.key != INTERPRETER else None,
        stale=best.stale,
        run_id=row.run_id, updated_at=row.updated_at)


def router() -> APIRouter:
    api = APIRouter(tags=["results"])

    @api.get("/devices", response_model=list[DeviceOut], responses=UNAVAILABLE)
    def get_devices(store: StoreDep) -> list[DeviceOut]:
        """The devices results were tuned on."""
        return [DeviceOut.model_validate(d, from_attributes=True) for d in store.devices()]

    @api.get("/results", response_model=ResultPage, responses=UNAVAILABLE)
    def get_results(store: StoreDep, op: Annotated[str | None, Query(max_length=200, pattern=PRINTABLE)] = None,
                    device: Annotated[str | None, Query(max_length=200, pattern=PRINTABLE)] = None,
                    limit: Limit = 50, offset: Offset = 0) -> ResultPage:
        """Stored best configs, newest first; filter by op and device key."""
        rows, total = store.results_page(op=op, device_key=device, limit=limit, offset=offset)
        return ResultPage(total=total, limit=limit, offset=offset, items=[ResultOut(**result_fields(r)) for r in rows])

    @api.get("/results/{result_id}", response_model=ResultDetail, responses={404: {"model": ErrorOut}, **UNAVAILABLE})
    def get_result(store: StoreDep, result_id: Id, trials_limit: Annotated[int, Query(ge=1, le=500)] = 100,
                   trials_offset: Offset = 0) -> ResultDetail:
        """One stored best config with the run that found it: the run's rejections as counts per rule, and one
        page of its measured and failed trials in the order measured."""
        found = store.result(result_id, with_trials=False)
        if found is None:
            raise NotFound(f"no result with id {result_id}")
        row, run = found
        trials, total = store.trials_page(run.id, limit=trials_limit, offset=trials_offset) if run else ([], 0)
        return ResultDetail(
            **result_fields(row),
            run=RunOut.model_validate({**{k: getattr(run, k) for k in RunOut.model_fields},
                                       "rejections": run.rejections or {}}) if run else None,
            trials=[TrialOut.model_validate(t, from_attributes=True) for t in trials],
            trials_total=total, trials_limit=trials_limit, trials_offset=trials_offset)

    return api
