"""Two ASGI middlewares that stand in front of the routes. More: docs/design/service.md."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from api.deps import Forbidden, ServiceState, Unauthorized
from autotuner.base.json_depth import MAX_DEPTH, too_deep

log = logging.getLogger(__name__)
Send = Callable[[dict[str, Any]], Awaitable[None]]
BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


async def respond(send: Send, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _reject_constant(name: str) -> float:
    raise ValueError(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


class RequestGuard:
    def __init__(self, app: Any, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.state.is_write(scope):
            try:
                self.state.check_authorization(headers.get("authorization"))
            except Unauthorized as exc:
                await respond(send, 401, str(exc), {"WWW-Authenticate": "Bearer"})
                return
            except Forbidden as exc:
                await respond(send, 403, str(exc))
                return
        limit = self.state.settings.max_body_bytes
        too_large = f"the request body is larger than {limit} bytes (AUTOTUNER_MAX_BODY_BYTES)"
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await respond(send, 413 if declared.isdigit() else 400,
                          too_large if declared.isdigit() else "bad Content-Length")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await respond(send, 413, too_large, {"Connection": "close"})
                return
            if not message.get("more_body", False):
                break
        if "json" in headers.get("content-type", "") and body:
            if too_deep(bytes(body)):
                await respond(send, 422, [{"loc": ["body"], "type": "too_deep",
                                           "msg": f"JSON nested more than {MAX_DEPTH} levels deep"}])
                return
            try:
                json.loads(body, parse_constant=_reject_constant, parse_float=_finite)
            except ValueError as exc:
                if not isinstance(exc, json.JSONDecodeError):
                    await respond(send, 422, [{"loc": ["body"], "type": "finite_number",
                                               "msg": f"numbers must be finite: {str(exc)[:20]} is not"}])
                    return  # (not JSON at all is left to the app: 422 with FastAPI's own message)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would say it

        await self.app(scope, replay, send)


class Deadline:
    def __init__(self, app: Any, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self._background: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        abandoned = False

        async def guarded(message: dict[str, Any]) -> None:
            nonlocal started
            if abandoned:
                return  # answered 503 already
            started = started or message["type"] == "http.response.start"
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, guarded))
        done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
        if task in done or started:
            await task
            return
        abandoned = True
        self._background.add(task)
        task.add_done_callback(self._finished)
        log.warning("%s %s: no answer in %.1f s; answered 503", scope["method"], scope["path"], self.timeout_s)
        await respond(send, 503, "the result database did not answer in time; try again shortly",
                      {"Retry-After": "2"})

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("an abandoned request ended with %r", task.exception())
