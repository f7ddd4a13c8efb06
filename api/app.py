"""The app factory: `create_app(settings)` builds the FastAPI service; nothing is built at import time."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from api.config_cache import ConfigCache, ConfigFastPath
from api.metrics import Metrics, MetricsMiddleware
from autotuner.registry import load_plugins
from autotuner.serving import InputError, NotFound
from autotuner.settings import Settings
from autotuner.store import Store
from db import queue
from db.engine import DatabaseUnavailable, NotAutotunerDatabase, session_scope

log = logging.getLogger(__name__)
RECONNECT_S = 1.0


class ServiceState:
    """What the routes share: settings, the store (opened on first use, retried while the database is down),
    the /config answer cache and the metrics."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        self._failed_at = 0.0
        self._error = ""
        self._lock = threading.Lock()
        self.config_cache = ConfigCache(settings.config_cache_s)
        self.metrics = Metrics(self.count_jobs)

    def store(self) -> Store:
        if self._store is not None:
            return self._store
        with self._lock:
            if self._store is None:
                if time.monotonic() - self._failed_at < RECONNECT_S:
                    raise DatabaseUnavailable(self._error)
                try:
                    self._store = Store(self.settings.db_url)
                except (DatabaseUnavailable, NotAutotunerDatabase) as exc:
                    self._failed_at, self._error = time.monotonic(), str(exc)
                    raise
            return self._store

    def count_jobs(self) -> dict[str, int]:
        with session_scope(self.store().engine) as s:
            return queue.count_jobs_by_state(s)

    def check_token(self, authorization: str | None) -> None:
        """Writes need `Authorization: Bearer <AUTOTUNER_TOKEN>`; a server without a token refuses them all."""
        if not self.settings.token:
            raise Forbidden("this server was started without AUTOTUNER_TOKEN, so it accepts no writes")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.settings.token.encode()):
            raise Unauthorized("writes need the header 'Authorization: Bearer <token>' with the server's token")


class Unauthorized(PermissionError):
    pass


class Forbidden(PermissionError):
    pass


def _error(status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(InputError)
    async def input_error(_: Request, exc: InputError) -> JSONResponse:
        loc = [exc.location, *exc.field.split(".")]
        return _error(422, [{"loc": loc, "msg": exc.message, "type": "value_error"}])

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(Unauthorized)
    async def unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return _error(401, str(exc), {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Forbidden)
    async def forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return _error(403, str(exc))

    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", exc)
        return _error(503, f"the result database is unavailable: {str(exc).splitlines()[0][:300]}",
                      {"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            # Starlette names only the first route's methods; a path served by several routes allows them all.
            allowed = sorted({m for r in app.routes if isinstance(r, Route) and r.methods
                              and r.matches(request.scope)[0] != Match.NONE for m in r.methods})
            return _error(405, "Method Not Allowed", {"Allow": ", ".join(allowed)})
        return await http_exception_handler(request, exc)

    for exc_type in (DatabaseUnavailable, NotAutotunerDatabase, OperationalError, InterfaceError):
        app.add_exception_handler(exc_type, unavailable)


def create_app(settings: Settings | None = None) -> FastAPI:
    from api.routes import router

    settings = settings or Settings()
    load_plugins(settings.plugins)
    app = FastAPI(title="autotuner", version="0.1.0",
                  description="Tuned Triton kernel configs: look them up, browse results, queue tuning jobs.")
    app.state.service = ServiceState(settings)
    app.include_router(router)
    _install_handlers(app)
    service = app.state.service
    app.add_middleware(ConfigFastPath, cache=service.config_cache, metrics=service.metrics)
    app.add_middleware(MetricsMiddleware, metrics=service.metrics)  # added last: outermost, sees every request
    return app
