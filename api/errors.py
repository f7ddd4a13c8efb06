"""How errors become responses: every bad input a 4xx whose detail names the field, a dead database a 503. More:
docs/design/service.md."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DatabaseError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from api.deps import Forbidden, StorageUnusable, Unauthorized
from autotuner.launch.serving import AmbiguousDevice, CannotRun, InputError, NoSuchProblem
from autotuner.store.errors import NotAStore as NotAutotunerDatabase
from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable
from autotuner.store.errors import cause_of
from autotuner.store.resolution import NotFound

log = logging.getLogger(__name__)
UNAVAILABLE_DETAIL = "the result database is unavailable; try again shortly"


def error(status: int, detail: Any, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


def field_detail(exc: InputError, kind: str) -> list[dict[str, Any]]:
    return [{"loc": [exc.location, *exc.field.split(".")], "msg": exc.message, "type": kind}]


def validation_detail(errors: list[Any], layouts: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """FastAPI's validation errors without the echoed input, the discriminator named for an unknown op, and a shape
    matching no op's form answered with the forms (`layouts`)."""
    out: list[dict[str, Any]] = []
    for e in errors:
        loc = list(e.get("loc", ()))
        if e.get("type") == "string_pattern_mismatch" and loc[-1:] == ["shape"] and layouts:
            named = [op for op in layouts if op in loc]  # a job's body: its op's own form
            if named:
                msg = f"not a shape of {named[0]}, whose form is {layouts[named[0]]}"
            else:
                msg = "not a shape of any op; the forms are " + "; ".join(f"{op}: {form}" for op, form in layouts.items())
            out.append({"loc": loc, "msg": msg, "type": "shape_form"})
            continue
        if e.get("type") in ("union_tag_invalid", "union_tag_not_found"):
            loc.append(str(e.get("ctx", {}).get("discriminator", "op")).strip("'"))
        ctx = {k: v if isinstance(v, (str, int, bool)) or v is None else str(v) for k, v in e.get("ctx", {}).items()
               if k != "discriminator"}
        out.append({"loc": loc, "msg": e.get("msg", ""), "type": e.get("type", ""), **({"ctx": ctx} if ctx else {})})
    return out


def _flat(routes: list[Any]) -> list[Any]:
    """The app's routes with included routers opened (FastAPI keeps each as one entry that holds its routes)."""
    out = []
    for r in routes:
        inner = getattr(r, "original_router", None)
        out.extend(_flat(list(inner.routes)) if inner is not None else [r])
    return out


def install(app: FastAPI, layouts: dict[str, str] | None = None) -> None:
    """The handlers; `layouts`: each op's shape form, for a shape that matches none."""
    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error(422, validation_detail(list(exc.errors()), layouts))

    @app.exception_handler(NoSuchProblem)
    async def no_such_problem(_: Request, exc: NoSuchProblem) -> JSONResponse:
        return error(404, field_detail(exc, "no_such_problem"))

    @app.exception_handler(CannotRun)
    async def cannot_run(_: Request, exc: CannotRun) -> JSONResponse:
        return error(409, field_detail(exc, "cannot_run"))

    @app.exception_handler(AmbiguousDevice)
    async def ambiguous_device(_: Request, exc: AmbiguousDevice) -> JSONResponse:
        return error(300, field_detail(exc, "ambiguous"), devices=exc.devices)

    @app.exception_handler(InputError)
    async def input_error(_: Request, exc: InputError) -> JSONResponse:
        return error(422, field_detail(exc, "value_error"))

    @app.exception_handler(NotFound)
    async def not_found(_: Request, exc: NotFound) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(Unauthorized)
    async def unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return error(401, str(exc), {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Forbidden)
    async def forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return error(403, str(exc))

    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        # Where the database is and what its driver said is for the operator's log; the client gets the cause
        # where it is one of storage's (read-only, full, corrupt: db.health), else "try again shortly".
        log.warning("database unavailable: %s: %s", type(exc).__name__, str(exc).splitlines()[0][:500] if str(exc) else "")
        cause = cause_of(exc)
        return error(503, cause or UNAVAILABLE_DETAIL, None if cause else {"Retry-After": "1"})

    @app.exception_handler(DatabaseError)
    async def database_error(request: Request, exc: DatabaseError) -> JSONResponse:
        """A corrupt file reports itself as a DatabaseError (not an OperationalError): 503 with that cause; any
        other (an integrity error: a bug) is logged and answered 500."""
        if cause_of(exc) is not None:
            return await unavailable(request, exc)
        log.error("database error: %s: %s", type(exc).__name__, str(exc).splitlines()[0][:500] if str(exc) else "")
        return error(500, "internal server error")

    @app.exception_handler(StorageUnusable)
    async def unusable(_: Request, exc: StorageUnusable) -> JSONResponse:
        log.warning("write refused: %s", exc)
        return error(503, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            # Starlette names only the first route's methods; a path served by several routes allows them all.
            allowed = sorted({m for r in _flat(app.routes) if isinstance(r, Route) and r.methods
                              and r.matches(request.scope)[0] != Match.NONE for m in r.methods})
            return error(405, "Method Not Allowed", {"Allow": ", ".join(allowed)})
        return await http_exception_handler(request, exc)

    for exc_type in (DatabaseUnavailable, NotAutotunerDatabase, OperationalError, InterfaceError, PoolTimeout):
        app.add_exception_handler(exc_type, unavailable)
