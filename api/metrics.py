"""Prometheus metrics: requests and latency per route (an ASGI middleware), lookups by source, jobs by state.

Each app has its own registry, so several apps in one process (tests) do not collide.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class JobsCollector(Collector):
    """`autotuner_jobs{state}`, read from the database when scraped."""

    def __init__(self, count_jobs: Callable[[], dict[str, int]]) -> None:
        self.count_jobs = count_jobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("autotuner_jobs", "Tuning jobs by state", labels=["state"])
        try:
            counts = self.count_jobs()
        except Exception as exc:  # a dead database must not break the scrape
            log.warning("metrics: cannot count jobs: %s", exc)
            counts = {}
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        yield family


class Metrics:
    def __init__(self, count_jobs: Callable[[], dict[str, int]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("autotuner_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("autotuner_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.lookups = Counter("autotuner_config_lookups", "GET /config answers by source", ["source"],
                               registry=self.registry)
        self.registry.register(JobsCollector(count_jobs))


class MetricsMiddleware:
    """Pure ASGI (no per-request task or body copy): counts and times every HTTP request by route template."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("autotuner.route") or getattr(scope.get("route"), "path", "unmatched")
            method = scope.get("method", "")
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
