"""Which config a launch uses when the caller gives none.

`resolve(op, problem, device)` tries, in order, and the first that answers wins:

1. the in-process cache (a dict lookup; non-exact answers expire after `RECHECK_S` so new results arrive);
2. the local database: the stored best for this exact problem, kernel hash and Triton version;
3. the remote service (`AUTOTUNER_URL`): `GET /config?...&fallback=none`, with a short timeout; a service
   that fails is not asked again for `SERVICE_BACKOFF_S`, so launches never keep waiting on it;
4. the nearest tuned problem on the same device (autotuner.nearest: same op, dtype and options; log-space
   distance; for matmul the same N and K first, nearest M);
5. the space's default config.

Stale results (another kernel hash or Triton version) are never served as exact. With
`AUTOTUNER_TUNE_ON_MISS=1`, a problem with no exact result is queued for tuning in the background, once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from autotuner.device import DeviceInfo
from autotuner.registry import Op, get_op
from autotuner.settings import Settings

log = logging.getLogger(__name__)
RECHECK_S = 60.0
SERVICE_TIMEOUT_S = 0.25
SERVICE_BACKOFF_S = 30.0


@dataclass(frozen=True)
class Resolution:
    config: dict[str, Any]
    source: str  # exact, nearest, default
    step: str  # cache, database, service, nearest, default
    reason: str
    median_ms: float | None = None
    from_problem: str | None = None
    trace: tuple[str, ...] = field(default_factory=tuple)


class Resolver:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._cache: dict[tuple[str, str, str], tuple[Resolution, float]] = {}
        self._store: Any = None
        self._store_error: str | None = None
        self._service_down_until = 0.0
        self._queued: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    # -- the steps ------------------------------------------------------------------------------------
    def _db(self) -> Any:
        if self._store is None and self._store_error is None:
            from autotuner.store import Store

            try:
                self._store = Store(self.settings.db_url, create=False)  # a lookup never creates a database
            except Exception as exc:  # a dead or foreign database must not stop a launch
                self._store_error = f"{type(exc).__name__}: {exc}"
                log.warning("autotuner: local database unavailable, using other sources: %s", exc)
        return self._store

    def _from_service(self, op: Op, problem: Any, device: DeviceInfo) -> tuple[Resolution | None, str]:
        url = self.settings.url
        if not url:
            return None, "service: AUTOTUNER_URL is not set"
        now = time.monotonic()
        if now < self._service_down_until:
            return None, f"service: skipped, it failed {SERVICE_BACKOFF_S - (self._service_down_until - now):.0f} s ago"
        import httpx
        import triton

        params = {"op": op.name, "shape": problem.shape, "dtype": problem.dtype, "device": device.key,
                  "fallback": "none", "kernel_hash": op.kernel_hash, "triton_version": triton.__version__,
                  **{k: str(getattr(problem, k)).lower() for k in op.options}}
        try:
            r = httpx.get(url.rstrip("/") + "/config", params=params, timeout=SERVICE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            self._service_down_until = time.monotonic() + SERVICE_BACKOFF_S
            return None, f"service: {type(exc).__name__} at {url}; not asked again for {SERVICE_BACKOFF_S:.0f} s"
        if r.status_code == 404:
            return None, "service: no exact result"
        if r.status_code != 200:
            self._service_down_until = time.monotonic() + SERVICE_BACKOFF_S
            return None, f"service: HTTP {r.status_code}; not asked again for {SERVICE_BACKOFF_S:.0f} s"
        body = r.json()
        if body.get("source") != "exact" or body.get("stale"):
            return None, "service: no exact result"
        try:
            config = op.space.validate(body["config"], problem, device)
        except (ValueError, KeyError) as exc:
            return None, f"service: answered a config this space rejects ({exc})"
        return Resolution(config, "exact", "service", f"tuned result from {url}", body.get("median_ms")), "service: exact"

    def _lookup(self, op: Op, problem: Any, device: DeviceInfo) -> Resolution:
        trace: list[str] = []
        store = self._db()
        if store is not None:
            best = store.best(op=op, problem=problem, device=device)
            if best is not None and not best.stale:
                trace.append("database: exact")
                return Resolution(best.config, "exact", "database", f"tuned {problem.key} on {device.key}",
                                  best.median_ms, problem.key, tuple(trace))
            trace.append("database: stale result ignored (" + (best.stale_reason or "") + ")" if best
                         else "database: no result for this problem")
        else:
            trace.append(f"database: unavailable ({self._store_error})")
        remote, note = self._from_service(op, problem, device)
        trace.append(note)
        if remote is not None:
            return Resolution(remote.config, remote.source, remote.step, remote.reason, remote.median_ms,
                              problem.key, tuple(trace))
        if store is not None:
            for other, best in store.nearest(op=op, problem=problem, device=device):
                if not op.space.violations(best.config, problem, device):
                    trace.append(f"nearest: {other.key}")
                    return Resolution(best.config, "nearest", "nearest",
                                      f"best config of the nearest tuned problem {other.key}", None, other.key,
                                      tuple(trace))
                trace.append(f"nearest: {other.key}'s config is not valid here")
        trace.append("default: the space's heuristic")
        return Resolution(op.space.default(problem, device), "default", "default", "no tuned result to use",
                          trace=tuple(trace))

    def _tune_on_miss(self, op: Op, problem: Any, key: tuple[str, str, str]) -> None:
        with self._lock:
            if key in self._queued:
                return
            self._queued.add(key)
        threading.Thread(target=self._queue_job, args=(op, problem), daemon=True).start()

    def _queue_job(self, op: Op, problem: Any) -> None:
        options = {k: getattr(problem, k) for k in op.options}
        try:
            if self.settings.url and self.settings.token:
                import httpx

                httpx.post(self.settings.url.rstrip("/") + "/jobs", timeout=2.0,
                           headers={"Authorization": f"Bearer {self.settings.token}"},
                           json={"op": op.name, "shape": problem.shape, "dtype": problem.dtype, "options": options})
                return
            store = self._db()
            if store is None:  # queueing is a write: it may create the database a lookup would not
                from autotuner.store import Store

                store = self._store = Store(self.settings.db_url)
                self._store_error = None
            store.queue_job(op=op.name, shape=problem.shape, dtype=problem.dtype, options=options)
        except Exception as exc:
            log.warning("autotuner: could not queue a tuning job for %s %s: %s", op.name, problem.key, exc)

    # -- public ---------------------------------------------------------------------------------------
    def resolve(self, op: Op | str, problem: Any, device: DeviceInfo) -> Resolution:
        op = get_op(op) if isinstance(op, str) else op
        key = (op.name, problem.key, device.key)
        hit = self._cache.get(key)
        if hit is not None and (hit[0].source == "exact" or time.monotonic() < hit[1]):
            return hit[0]
        res = self._lookup(op, problem, device)
        self._cache[key] = (res, time.monotonic() + RECHECK_S)
        if res.source != "exact" and self.settings.tune_on_miss:
            self._tune_on_miss(op, problem, key)
        return res

    def clear(self) -> None:
        self._cache.clear()


_RESOLVER: Resolver | None = None


def resolver() -> Resolver:
    """The process-wide resolver, built from AUTOTUNER_* settings on first use."""
    global _RESOLVER
    if _RESOLVER is None:
        _RESOLVER = Resolver()
    return _RESOLVER


def set_resolver(r: Resolver | None) -> None:
    global _RESOLVER
    _RESOLVER = r


def resolve(op: Op | str, problem: Any, device: DeviceInfo) -> Resolution:
    """The config to launch `problem` with on `device`, and where it came from (exact, nearest, default)."""
    return resolver().resolve(op, problem, device)
