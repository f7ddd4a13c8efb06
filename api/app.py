"""The app factory: `create_app(settings)` builds the FastAPI service; nothing is built at import time.

Plugins are loaded first, so every registered op (built-in, plugin or `autotuner.autotune` kernel) is in the
routes' schema: its name, shape pattern, dtypes and options.
"""

from __future__ import annotations

from fastapi import FastAPI

from api import errors
from api.config_cache import ConfigFastPath
from api.deps import ServiceState
from api.metrics import MetricsMiddleware
from api.routes import pages, routers
from autotuner.registry import load_plugins, ops
from autotuner.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    load_plugins(settings.plugins)
    app = FastAPI(title="autotuner", version="0.1.0",
                  description="Tuned Triton kernel configs: look them up, browse results, queue tuning jobs.")
    app.state.service = service = ServiceState(settings)
    for router in routers(ops()):
        app.include_router(router)
    pages.mount_static(app)
    errors.install(app)
    app.add_middleware(ConfigFastPath, cache=service.config_cache, metrics=service.metrics)
    app.add_middleware(MetricsMiddleware, metrics=service.metrics)  # added last: outermost, sees every request
    return app
