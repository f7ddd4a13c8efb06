"""The service's routes, one module per resource. Each module's `router(ops)` builds its routes from the
registered ops' declarations (their names, shapes, dtypes and options become the OpenAPI schema's
enumerations and patterns), so an op added to the registry appears in the API with nothing written here.

    config      GET /config                       the config to launch with
    results     GET /results, /results/{id}, /devices
    jobs        POST /jobs, GET /jobs, /jobs/{id}
    operations  GET /healthz, /metrics
    pages       GET /, /ui/results/{id}, /ui/queue   HTML for people (not in the OpenAPI schema)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.routes import config, jobs, operations, pages, results
from search_spaces.contract import TunableOp


def routers(ops: list[TunableOp[Any]]) -> list[APIRouter]:
    return [config.router(ops), results.router(), jobs.router(ops), operations.router(), pages.router()]
