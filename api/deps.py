"""What the routes depend on: the service's shared state, its store, and the write token. More: docs/design/service.md.
"""

from __future__ import annotations

import hmac
from collections import Counter
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.config_cache import ConfigCache
from api.metrics import Metrics
from autotuner.base.settings import Settings
from autotuner.store.interfaces import Storage
from autotuner.store.lazy import LazyStore
from search_spaces.errors import AutotunerError

RECONNECT_S = 1.0  # a database that failed to open is tried again after this long


class Unauthorized(AutotunerError, PermissionError):
    pass


class Forbidden(AutotunerError, PermissionError):
    pass


class StorageUnusable(AutotunerError, RuntimeError):
    """The database answers but cannot keep a write (db.health): a write is refused with this cause (503)."""


class ServiceState:
    """What the routes share: settings, the store (opened on first use, retried while the database is down),
    the /config answer cache and the metrics."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = LazyStore(settings.db_url, create=True, retry_s=RECONNECT_S, timeout_s=settings.db_timeout_s)
        self.config_cache = ConfigCache(settings.config_cache_s)
        self.metrics = Metrics(lambda: self.store.get().count_jobs())
        self.write_routes: list[Any] = []  # the routes that need the token (create_app fills it)

    def is_write(self, scope: dict[str, Any]) -> bool:
        from starlette.routing import Match

        return any(r.matches(scope)[0] == Match.FULL for r in self.write_routes)

    def check_authorization(self, header: str | None) -> None:
        """The `Authorization` header of a write, checked before its body is read (api.guard)."""
        scheme, _, given = (header or "").partition(" ")
        ok = scheme.lower() == "bearer" and given.strip()
        self.check_token(HTTPAuthorizationCredentials(scheme="Bearer", credentials=given.strip()) if ok else None)

    def check_token(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        """Writes need `Authorization: Bearer <AUTOTUNER_TOKEN>`; a server without a token refuses them all."""
        if not self.settings.token:
            raise Forbidden("this server was started without AUTOTUNER_TOKEN, so it accepts no writes")
        given = credentials.credentials if credentials else ""
        if not hmac.compare_digest(given.encode(), self.settings.token.encode()):
            raise Unauthorized("writes need the header 'Authorization: Bearer <token>' with the server's token")


def get_state(request: Request) -> ServiceState:
    service: ServiceState = request.app.state.service
    return service


State = Annotated[ServiceState, Depends(get_state)]


def get_store(st: State) -> Storage:
    return st.store.full()  # DatabaseUnavailable becomes a 503 (api.errors)


StoreDep = Annotated[Storage, Depends(get_store)]


def get_writable_store(st: State) -> Storage:
    """The store of a route that writes: StorageUnusable (503, with its cause) where the database cannot keep the
    write (deleted or replaced under the service, read-only, full, corrupt), so nothing is accepted and lost."""
    store = st.store.full()
    problem = store.health(st.settings.min_free_bytes)
    if problem is not None:
        raise StorageUnusable(problem)
    return store


WritableStoreDep = Annotated[Storage, Depends(get_writable_store)]
bearer = HTTPBearer(auto_error=False, description="AUTOTUNER_TOKEN of the server")


def require_token(st: State, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    st.check_token(credentials)


Writer = Depends(require_token)


def single_query_values(request: Request) -> None:
    """Every query parameter of the service takes one value: one given twice (`?offset=1&offset=2`) is a 422
    naming it, not the last value taken silently (FastAPI's way, which answered a request the schema refuses)."""
    given = Counter(name for name, _ in request.query_params.multi_items())  # (one pass: on every request)
    repeated = sorted(n for n, times in given.items() if times > 1)
    if repeated:
        raise RequestValidationError([{"loc": ["query", n], "msg": "given more than once; give it once",
                                       "type": "repeated_parameter"} for n in repeated])
