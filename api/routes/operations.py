"""GET /healthz and /metrics: for load balancers and Prometheus."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import State
from api.errors import UNAVAILABLE_DETAIL
from api.schemas import HealthOut
from autotuner.store.errors import cause_of

log = logging.getLogger(__name__)


def router() -> APIRouter:
    api = APIRouter(tags=["operations"])

    @api.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
    def healthz(st: State, response: Response) -> HealthOut:
        """200 when the database answers and can keep a write; 503 with the cause when it is deleted or replaced
        under the service, read-only, full or corrupt, and when it does not answer."""
        try:
            store = st.store.full()
            # a deleted file is seen before a connection could make a new, empty one
            problem, backend = store.health(st.settings.min_free_bytes), store.ping()
        except Exception as exc:  # where the database is, and the driver's words, go to the log only
            log.warning("healthz: database unavailable: %s: %s", type(exc).__name__, str(exc).splitlines()[:1])
            response.status_code = 503
            return HealthOut(status="unavailable", database="unreachable", detail=cause_of(exc) or UNAVAILABLE_DETAIL)
        if problem is not None:
            log.warning("healthz: %s", problem)
            response.status_code = 503
            return HealthOut(status="unavailable", database=backend, detail=problem)
        return HealthOut(status="ok", database=backend)

    @api.get("/metrics", include_in_schema=False)
    def metrics(st: State) -> Response:
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return api
