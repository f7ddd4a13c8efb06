"""The answer cache in front of `GET /config`, which every launching process may call. More: docs/design/service.md."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from api.metrics import Metrics

JSON_HEADERS = [(b"content-type", b"application/json")]
CACHE_HEADER = b"x-autotuner-cache"
MAX_ENTRIES = 100_000


@dataclass
class Entry:
    expires: float
    status: int
    body: bytes
    source: str  # exact, nearest, default, or none (a 404)
    compute: Callable[[], Awaitable[tuple[int, bytes, str]]]
    refreshing: bool = False
    stale: bool = False  # its last refresh failed


class ConfigCache:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.entries: dict[bytes, Entry] = {}
        self._inflight: dict[bytes, asyncio.Future[Entry]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _store(self, key: bytes, result: tuple[int, bytes, str],
               compute: Callable[[], Awaitable[tuple[int, bytes, str]]]) -> Entry:
        entry = Entry(time.monotonic() + self.ttl_s, *result, compute)
        if self.ttl_s > 0:
            if len(self.entries) >= MAX_ENTRIES:
                self.entries.clear()
            self.entries[key] = entry
        return entry

    async def get(self, key: bytes, compute: Callable[[], Awaitable[tuple[int, bytes, str]]]) -> Entry:
        """The cached answer for `key`, computing it once however many requests ask at the same time."""
        entry = self.entries.get(key)
        if entry is not None and entry.expires > time.monotonic():
            return entry
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            entry = self._store(key, await compute(), compute)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiting requests re-raise it, no "never retrieved" warning
            raise
        finally:
            del self._inflight[key]

    def hit(self, key: bytes) -> Entry | None:
        """A cached answer, fresh or expired; an expired one starts its refresh in the background."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry.expires <= time.monotonic() and not entry.refreshing:
            entry.refreshing = True
            task = asyncio.get_running_loop().create_task(self._refresh(key, entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return entry

    async def _refresh(self, key: bytes, entry: Entry) -> None:
        try:
            result = await entry.compute()
        except Exception:  # the database is away: keep serving what we have, and try again later
            entry.expires = time.monotonic() + max(self.ttl_s, 0.5)
            entry.refreshing = False
            entry.stale = True
            return
        if result[0] >= 500 and entry.status < 500:  # an answer that is an outage does not replace a real one
            entry.expires, entry.refreshing, entry.stale = time.monotonic() + max(self.ttl_s, 0.5), False, True
            return
        self._store(key, result, entry.compute)


class ConfigFastPath:
    """Answers `GET /config` from the cache; everything else (and every miss) goes on to the app."""

    def __init__(self, app: Any, cache: ConfigCache, metrics: Metrics) -> None:
        self.app = app
        self.cache = cache
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/config" and scope["method"] == "GET":
            entry = self.cache.hit(scope["query_string"])
            if entry is not None:
                scope["autotuner.route"] = "/config"
                self.metrics.lookups.labels(entry.source).inc()
                fresh = not entry.stale and entry.expires > time.monotonic()
                headers = [*JSON_HEADERS, (b"content-length", str(len(entry.body)).encode()),
                           (CACHE_HEADER, b"hit" if fresh else b"stale")]
                await send({"type": "http.response.start", "status": entry.status, "headers": headers})
                await send({"type": "http.response.body", "body": entry.body})
                return
        await self.app(scope, receive, send)
