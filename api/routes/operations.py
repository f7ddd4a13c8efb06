"""GET /healthz and /metrics: for load balancers and Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import State
from api.schemas import HealthOut


def router() -> APIRouter:
    api = APIRouter(tags=["operations"])

    @api.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
    def healthz(st: State, response: Response) -> HealthOut:
        """200 when the database answers, 503 when it does not."""
        try:
            backend = st.store.get().ping()
        except Exception as exc:
            response.status_code = 503
            return HealthOut(status="unavailable", database="unreachable", detail=str(exc).splitlines()[0][:300])
        return HealthOut(status="ok", database=backend)

    @api.get("/metrics", include_in_schema=False)
    def metrics(st: State) -> Response:
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return api
