"""GET /healthz and /metrics: for load balancers and Prometheus."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import State
from api.errors import UNAVAILABLE_DETAIL
from api.schemas import HealthOut

log = logging.getLogger(__name__)


def router() -> APIRouter:
    api = APIRouter(tags=["operations"])

    @api.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
    def healthz(st: State, response: Response) -> HealthOut:
        """200 when the database answers, 503 when it does not."""
        try:
            backend = st.store.get().ping()
        except Exception as exc:  # what failed, and where the database is, goes to the log only
            log.warning("healthz: database unavailable: %s: %s", type(exc).__name__, str(exc).splitlines()[:1])
            response.status_code = 503
            return HealthOut(status="unavailable", database="unreachable", detail=UNAVAILABLE_DETAIL)
        return HealthOut(status="ok", database=backend)

    @api.get("/metrics", include_in_schema=False)
    def metrics(st: State) -> Response:
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return api
