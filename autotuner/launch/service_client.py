"""The remote service a launching process asks on a miss (`AUTOTUNER_URL`): an exact, current answer or nothing,
and no second ask for a while after a failure."""

from __future__ import annotations

import time
from typing import Any

from autotuner.base.device import DeviceInfo
from autotuner.base.registry import Op
from autotuner.store.resolution import FINAL, Resolution, Source
from search_spaces.contract import ProblemType

SERVICE_TIMEOUT_S = 0.25
SERVICE_BACKOFF_S = 30.0


class Service:
    """The remote service a launching process asks on a miss, with a back-off after a failure."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._down_until = 0.0

    def ask(self, op: Op, problem: ProblemType, device: DeviceInfo) -> tuple[Resolution | None, str]:
        if not self.url:
            return None, "service: AUTOTUNER_URL is not set"
        now = time.monotonic()
        if now < self._down_until:
            return None, f"service: skipped, it failed {SERVICE_BACKOFF_S - (self._down_until - now):.0f} s ago"
        import httpx
        import triton

        values = op.options_of(problem)
        params = {"op": op.name, "shape": problem.shape, "dtype": problem.dtype, "device": device.key,
                  "fallback": "none", "kernel_hash": op.kernel_hash, "triton_version": triton.__version__,
                  **{o.name: str(values[o.name]).lower() for o in op.query_options}}
        try:
            r = httpx.get(self.url.rstrip("/") + "/config", params=params, timeout=SERVICE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            self._down_until = time.monotonic() + SERVICE_BACKOFF_S
            return None, f"service: {type(exc).__name__} at {self.url}; not asked again for {SERVICE_BACKOFF_S:.0f} s"
        if r.status_code == 404:
            return None, "service: no exact result"
        if r.status_code != 200:
            self._down_until = time.monotonic() + SERVICE_BACKOFF_S
            return None, f"service: HTTP {r.status_code}; not asked again for {SERVICE_BACKOFF_S:.0f} s"
        body = r.json()
        if body.get("source") not in {s.value for s in FINAL} or body.get("stale"):
            return None, "service: no exact result"
        try:
            config = op.space.validate(body["config"], problem, device)
        except (ValueError, KeyError) as exc:
            return None, f"service: answered a config this space rejects ({exc})"
        return Resolution(config=config, source=Source(body["source"]), step="service",
                          reason=f"tuned result from {self.url}", from_problem=body.get("from_problem") or problem.key,
                          median_ms=_number(body.get("median_ms")), torch_ms=_number(body.get("torch_ms"))), \
            f"service: {body['source']}"


def _number(value: Any) -> float | None:
    """A time from the service's answer, or None where it sent none or something else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
