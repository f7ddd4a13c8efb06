"""The service's routes, one module per resource, each built from the registered ops' declarations (`router(ops)`), so a
new op appears in the API with nothing written here.

    config      GET /config
    results     GET /results, /results/{id}, /devices
    jobs        POST /jobs, GET /jobs, /jobs/{id}
    operations  GET /healthz, /metrics
    pages       GET /, /ui/results/{id}, /ui/queue   (HTML, not in the OpenAPI schema)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.routes import config, jobs, operations, pages, results
from search_spaces.contract import TunableOp


def routers(ops: list[TunableOp[Any]]) -> list[APIRouter]:
    return [config.router(ops), results.router(), jobs.router(ops), operations.router(), pages.router()]
