"""The app factory: `create_app(settings)` builds the service after loading plugins, so every registered op is in the
routes' schema; nothing is built at import time."""

from __future__ import annotations

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from api import errors
from api.config_cache import ConfigFastPath
from api.deps import ServiceState, require_token, single_query_values
from api.guard import Deadline, RequestGuard
from api.metrics import MetricsMiddleware
from api.routes import pages, routers
from autotuner.base.registry import load_plugins, ops
from autotuner.base.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    load_plugins(settings.plugins)
    app = FastAPI(title="autotuner", version="0.1.0",
                  description="Tuned Triton kernel configs: look them up, browse results, queue tuning jobs.",
                  dependencies=[Depends(single_query_values)])
    app.state.service = service = ServiceState(settings)
    built = routers(ops())
    for router in built:
        app.include_router(router)
    service.write_routes = [r for router in built for r in router.routes if isinstance(r, APIRoute)
                            and any(d.call is require_token for d in r.dependant.dependencies)]
    pages.mount_static(app)
    errors.install(app, {op.name: op.problem_type.layout for op in ops()})
    # Middlewares, innermost first: the token and the body before any route parses it; the deadline around
    # every route (a /config answer from memory needs none); the metrics outermost, seeing every request.
    app.add_middleware(RequestGuard, state=service)
    app.add_middleware(Deadline, timeout_s=settings.request_timeout_s)
    app.add_middleware(ConfigFastPath, cache=service.config_cache, metrics=service.metrics)
    app.add_middleware(MetricsMiddleware, metrics=service.metrics)
    return app
